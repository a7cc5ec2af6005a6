"""Webhooks over ``serve``: registered, listed, changed and deleted as upstream's; each retained item's
``retain.completed`` delivered from the operations queue to a real HTTP server on 127.0.0.1, signed as
upstream signs it, retried after a failure, never holding back a retain, and delivered once by the
next ``serve`` when the one that committed the retain was killed before it queued the delivery."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall import Engine
from hindsight_recall.service.webhook_delivery import sign, sign_v2
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.http_server import FixtureServer, Reply, Request
from hindsight_recall.testing.service import ServeProcess, ServerThread

SECRET = "whsec-test-0123456789"


@pytest.fixture(scope="module")
def receiver() -> Iterator[FixtureServer]:
    with FixtureServer({("POST", "/hook"): lambda r: Reply(200, {"ok": True}),
                        ("GET", "/hook"): lambda r: Reply(204, raw=b"")}) as server:
        yield server


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    # a database of its own: no queued work or outbox left by other modules comes before its deliveries
    return serve(own_database=True, webhook_allowed_hosts="127.0.0.1", webhook_retry_delays=(0.1, 0.1))


@pytest.fixture
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers=EXTRAS) as c:
        yield c


def bank_path() -> str:
    return f"/v1/default/banks/hooks-{uuid.uuid4().hex[:8]}"


def register(http: httpx.Client, b: str, url: str, **fields: Any) -> dict[str, Any]:
    made = http.post(f"{b}/webhooks", json={"url": url, "event_types": ["retain.completed"], **fields})
    assert made.status_code == 201, made.text
    return made.json()  # type: ignore[no-any-return]


def arrived(receiver: FixtureServer, bank_id: str, count: int, method: str = "POST",
            timeout: float = 20) -> list[Request]:
    deadline = time.monotonic() + timeout
    while True:
        got = [r for r in receiver.requests_to(method, "/hook") if method == "GET" or bank_id in r.raw.decode()]
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def deliveries(http: httpx.Client, b: str, hook: str, until: Callable[[list[dict[str, Any]]], bool],
               timeout: float = 20) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        items: list[dict[str, Any]] = http.get(f"{b}/webhooks/{hook}/deliveries").json()["items"]
        if until(items) or time.monotonic() > deadline:
            return items
        time.sleep(0.1)


def test_each_retained_item_is_delivered_signed(http: httpx.Client, receiver: FixtureServer) -> None:
    b = bank_path()
    bank_id = b.rsplit("/", 1)[1]
    hook = register(http, b, f"{receiver.url}/hook", secret=SECRET,
                    http_config={"headers": {"X-Team": "mem", "X-Hindsight-Event": "forged"}})
    assert "secret" not in hook or hook["secret"] is None
    items = [{"content": "Alice works at Helios.", "document_id": "d1", "tags": ["work"]},
             {"content": "Alice runs.", "document_id": "d1"}]
    assert http.post(f"{b}/memories", json={"items": items}).status_code == 200
    got = arrived(receiver, bank_id, 2)
    assert len(got) == 2
    events = [r.body for r in got]
    assert {e["event"] for e in events} == {"retain.completed"} and {e["bank_id"] for e in events} == {bank_id}
    assert len({e["event_id"] for e in events}) == 2 and len({e["operation_id"] for e in events}) == 1
    assert sorted(e["data"].get("tags", []) for e in events) == [[], ["work"]]
    assert {e["data"]["document_id"] for e in events} == {"d1"}
    assert {e["data"]["memory_unit_count"] for e in events} == {2}
    for request in got:
        headers = request.headers
        assert headers["x-hindsight-event"] == "retain.completed" and headers["x-team"] == "mem"
        assert headers["x-hindsight-event-id"] == request.body["event_id"]
        assert headers["x-hindsight-signature"] == sign(SECRET, request.raw) == headers["x-hub-signature-256"]
        expected = "sha256=" + hmac.new(SECRET.encode(), request.raw, hashlib.sha256).hexdigest()
        assert headers["x-hindsight-signature"] == expected
        stamp = int(headers["x-hindsight-signature-v2"].split(",")[0].removeprefix("t="))
        assert abs(stamp - time.time()) < 60 and headers["x-hindsight-signature-v2"] == sign_v2(
            SECRET, request.raw, stamp)
    listed = deliveries(http, b, hook["id"], lambda items: all(d["status"] == "completed" for d in items))
    assert len(listed) == 2 and {d["attempts"] for d in listed} == {1}
    assert {d["id"] for d in listed} == {r.headers["x-hindsight-delivery-id"] for r in got}
    assert {d["last_response_status"] for d in listed} == {200}


def test_an_async_retain_is_delivered_with_its_operation(http: httpx.Client, receiver: FixtureServer) -> None:
    b = bank_path()
    register(http, b, f"{receiver.url}/hook")
    queued = http.post(f"{b}/memories", json={"items": [{"content": "Bob swims."}], "async": True}).json()
    got = arrived(receiver, b.rsplit("/", 1)[1], 1)
    assert [r.body["operation_id"] for r in got] == [queued["operation_id"]]
    assert "x-hindsight-signature" not in got[0].headers  # no secret, no signature


def test_a_failed_delivery_is_retried_then_given_up(http: httpx.Client, receiver: FixtureServer) -> None:
    b = bank_path()
    flaky = register(http, b, f"{receiver.url}/hook")
    receiver.script("POST", "/hook", Reply(500, {"no": 1}))
    http.post(f"{b}/memories", json={"items": [{"content": "Carol paints."}]})
    done = deliveries(http, b, flaky["id"], lambda items: bool(items) and items[0]["status"] == "completed")
    assert done[0]["attempts"] == 2 and done[0]["last_response_status"] == 200
    http.delete(f"{b}/webhooks/{flaky['id']}")
    dead = register(http, b, "http://127.0.0.1:9/hook")  # nothing listens there
    http.post(f"{b}/memories", json={"items": [{"content": "Dan sails."}]})
    failed = deliveries(http, b, dead["id"], lambda items: bool(items) and items[0]["status"] == "failed")
    assert failed[0]["attempts"] == 3 and "ConnectError" in failed[0]["last_error"]
    assert "attempt 3 of 3" in failed[0]["last_error"]


def test_a_hanging_endpoint_never_holds_back_a_retain(http: httpx.Client, receiver: FixtureServer) -> None:
    receiver.route("POST", "/slow", lambda r: Reply(200, {}, delay=5))
    b = bank_path()
    register(http, b, f"{receiver.url}/slow", http_config={"timeout_seconds": 10})
    http.post(f"{b}/memories", json={"items": [{"content": f"Eve note {i}."} for i in range(3)]})
    began = time.monotonic()
    queued = http.post(f"{b}/memories", json={"items": [{"content": "Eve again."}], "async": True}).json()
    while http.get(f"{b}/operations/{queued['operation_id']}").json()["status"] != "completed":
        assert time.monotonic() - began < 4, "the async retain waited for the hanging endpoint"
        time.sleep(0.05)
    began = time.monotonic()
    assert http.post(f"{b}/memories", json={"items": [{"content": "Eve once more."}]}).status_code == 200
    assert time.monotonic() - began < 2


def test_get_deliveries_and_disabled_or_deleted_webhooks(http: httpx.Client, receiver: FixtureServer) -> None:
    b = bank_path()
    bank_id = b.rsplit("/", 1)[1]
    getter = register(http, b, f"{receiver.url}/hook", http_config={"method": "get", "params": {"k": "v"}})
    off = register(http, b, f"{receiver.url}/hook", enabled=False)
    http.post(f"{b}/memories", json={"items": [{"content": "Fay sings."}]})
    got = arrived(receiver, bank_id, 1, method="GET")
    assert len(got) == 1 and got[0].raw == b"" and "k=v" in got[0].query
    assert deliveries(http, b, off["id"], lambda items: False, timeout=0.5) == []
    patched = http.patch(f"{b}/webhooks/{getter['id']}", json={"url": "http://127.0.0.1:9/x", "enabled": False})
    assert patched.json()["url"].endswith("/x") and not patched.json()["enabled"]


def test_webhooks_are_listed_changed_and_deleted(http: httpx.Client, receiver: FixtureServer) -> None:
    b = bank_path()
    first = register(http, b, f"{receiver.url}/hook", secret=SECRET)
    second = register(http, b, f"{receiver.url}/hook")
    listed = http.get(f"{b}/webhooks", params={"limit": 1}).json()
    assert listed["total"] == 2 and [w["id"] for w in listed["items"]] == [first["id"]]
    assert all(w.get("secret") is None for w in http.get(f"{b}/webhooks").json()["items"])
    changed = http.patch(f"{b}/webhooks/{second['id']}", json={"event_types": ["consolidation.completed"],
                                                               "http_config": {"timeout_seconds": 5}}).json()
    assert changed["event_types"] == ["consolidation.completed"] and changed["http_config"]["timeout_seconds"] == 5
    assert changed["http_config"]["method"] == "POST"
    assert http.delete(f"{b}/webhooks/{second['id']}").json() == {"success": True}
    assert http.delete(f"{b}/webhooks/{second['id']}").status_code == 404
    assert http.get(f"{b}/webhooks/{second['id']}/deliveries").status_code == 404


@pytest.mark.parametrize(("body", "status"), [
    ({"url": "ftp://127.0.0.1/x"}, 400), ({"url": "http://10.0.0.1/x"}, 400), ({"url": "http://localhost/x"}, 400),
    ({"url": "http://169.254.169.254/latest"}, 400), ({"url": "http://[::1]/x"}, 400), ({"url": "nope"}, 400),
    ({"url": "http://example.com/x", "event_types": ["retain.done"]}, 422),
    ({"url": "http://example.com/x", "http_config": {"method": "PUT"}}, 422),
    ({"url": "http://example.com/x", "http_config": {"timeout_seconds": 0}}, 422),
    ({"url": "http://example.com/x", "nope": 1}, 422), ({}, 422),
])
def test_bad_webhooks_are_refused(http: httpx.Client, body: dict[str, Any], status: int) -> None:
    refused = http.post(f"{bank_path()}/webhooks", json=body)
    assert refused.status_code == status, refused.text


def test_bad_ids_and_unknown_banks(http: httpx.Client) -> None:
    b = bank_path()
    assert http.get(f"{b}/webhooks").status_code == 404
    assert http.patch(f"{b}/webhooks/not-a-uuid", json={"enabled": False}).status_code == 422
    assert http.patch(f"{b}/webhooks/{uuid.uuid4()}", json={"enabled": False}).status_code == 404
    hook = register(http, b, "http://example.com/x")
    assert http.patch(f"{b}/webhooks/{hook['id']}", json={}).status_code == 422
    assert http.patch(f"{b}/webhooks/{hook['id']}", json={"url": None}).status_code == 422
    assert http.patch(f"{b}/webhooks/{hook['id']}", json={"url": "http://192.168.1.1/"}).status_code == 400
    assert http.get(f"{b}/webhooks/{hook['id']}/deliveries", params={"cursor": "yesterday"}).status_code == 400
    assert http.get(f"{b}/webhooks/{hook['id']}/deliveries", params={"limit": "500"}).status_code == 400


# ---- kill -9 between the commit and the delivery ------------------------------------------------------------


def _serve_process(url: str, name: str, log_dir: Path, **settings: str) -> ServeProcess:
    """``serve`` as a process of its own on the database at ``url``; its sessions named ``name``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HINDSIGHT_API_", "HINDSIGHT_RECALL_"))}
    named = url + ("&" if "?" in url else "?") + f"application_name={name}"
    env.update({"HINDSIGHT_API_DATABASE_URL": named, "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
                "HINDSIGHT_API_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1", "HINDSIGHT_API_SERVICE_OPERATION_LEASE": "3",
                **settings})
    return ServeProcess(env, (log_dir / f"{name}.log").open("w"))


def _until(what: str, found: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.05)
    return value


def test_an_event_committed_before_a_kill_9_is_delivered_once_after_the_restart(
    engine: Engine, receiver: FixtureServer, tmp_path: Path
) -> None:
    """The retain commits, then its delivery stalls (the operations table is locked, so nothing reaches the
    queue) and ``serve`` is killed: a ``serve`` started again on the database delivers the event, once."""
    import psycopg

    url, tag = engine.db.url, uuid.uuid4().hex[:8]
    bank_id = f"outbox-{tag}"
    first = _serve_process(url, f"outbox-first-{tag}", tmp_path).start()
    answered: list[int] = []
    try:
        with httpx.Client(base_url=first.url, timeout=120, headers=EXTRAS) as http:
            register(http, f"/v1/default/banks/{bank_id}", f"{receiver.url}/hook")
        with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as look:
            holder.execute("LOCK TABLE operations IN EXCLUSIVE MODE")  # reads go on; no row goes in
            body = {"items": [{"content": "Gus fixes clocks.", "document_id": "g"}]}

            def post() -> None:  # answered before the kill, or cut off by it
                with contextlib.suppress(httpx.HTTPError):
                    answered.append(httpx.post(f"{first.url}/v1/default/banks/{bank_id}/memories", json=body,
                                               headers=EXTRAS, timeout=120).status_code)

            retain = threading.Thread(target=post, daemon=True)
            retain.start()
            _until("the retain committed", lambda: look.execute(
                "SELECT count(*) FROM memory_units WHERE bank_id = %s", (bank_id,)).fetchone()[0] == 1)
            # this module's own service works the same queue: whichever server took the event waits
            _until("a serve waits to queue the delivery", lambda: look.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'operations'::regclass"
                ).fetchone()[0])
            first.stop(signal.SIGKILL)
            look.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                         (f"outbox-first-{tag}",))
            holder.rollback()
            retain.join(30)
    finally:
        first.stop(signal.SIGKILL)
    assert answered in ([], [200]) and not arrived(receiver, bank_id, 1, timeout=0)
    second = _serve_process(url, f"outbox-second-{tag}", tmp_path).start()
    try:
        got = arrived(receiver, bank_id, 1, timeout=60)
        assert len(got) == 1, "the committed retain's event was lost with the killed server"
        with httpx.Client(base_url=second.url, timeout=60, headers=EXTRAS) as http:
            hooks = http.get(f"/v1/default/banks/{bank_id}/webhooks").json()["items"]
            done = deliveries(http, f"/v1/default/banks/{bank_id}", hooks[0]["id"],
                              lambda items: bool(items) and all(d["status"] == "completed" for d in items))
        time.sleep(2)  # a second delivery would come now
        again = arrived(receiver, bank_id, 2, timeout=0)
        assert len(again) == 1 and len(done) == 1, [r.body for r in again]
        assert again[0].headers["x-hindsight-event-id"] == again[0].body["event_id"]
        assert again[0].body["data"] == {"document_id": "g", "memory_unit_count": 1}
    finally:
        second.stop()
