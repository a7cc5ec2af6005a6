"""The database goes away under load and comes back: killed, stopped, moved to another port, its
connections cut or stalled. Every answer meanwhile is 200 or 503 ``database_unavailable`` with
Retry-After, never 500; no write is half there; the service recovers by itself, and queued retains
pause and resume.

The external server runs behind a TCP proxy of the test's own (the service's URL names the proxy),
so the server can move to another port behind the same URL, and the network between can break.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.settings import Settings
from hindsight_recall.store import embedded
from hindsight_recall.testing import pgserver
from hindsight_recall.testing.service import ServerThread
from hindsight_recall.testing.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

#: items per retain batch of the load (each batch is one request: all of it or none)
BATCH = 20
#: items of the async retain that runs when the fault comes
QUEUED = 3000
#: where each scenario's figures go, one JSON line each (docs/reliability.md quotes them)
REPORT = os.environ.get("HINDSIGHT_AWAY_REPORT")


@dataclass
class Load:
    """Recalls and retains from a few threads against one bank until stopped; every answer kept."""

    url: str
    bank: str
    answers: list[tuple[float, str, int, str, str | None]] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    #: the answers that were not 200, kept whole
    replies: list[httpx.Response] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        self._threads = [threading.Thread(target=self._recalls) for _ in range(3)]
        self._threads.append(threading.Thread(target=self._retains))
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join()

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=f"{self.url}/v1/default/banks/{self.bank}", headers=EXTRAS, timeout=60)

    def _post(self, client: httpx.Client, kind: str, path: str, body: dict[str, Any]) -> httpx.Response | None:
        """The answer, kept; a request that got none is kept as status 0 with the client's reason."""
        try:
            reply = client.post(path, json=body)
        except httpx.TransportError as exc:
            self.answers.append((time.monotonic(), kind, 0, type(exc).__name__, None))
            return None
        code = reply.json().get("code", "") if reply.status_code != 200 else ""
        self.answers.append((time.monotonic(), kind, reply.status_code, code, reply.headers.get("Retry-After")))
        if reply.status_code != 200:
            self.replies.append(reply)
        return reply

    def _recalls(self) -> None:
        with self._client() as client:
            while not self._done.is_set():
                self._post(client, "recall", "/memories/recall", {"query": "Where does Alice work?"})

    def _retains(self) -> None:
        with self._client() as client:
            while not self._done.is_set():
                batch = uuid.uuid4().hex[:12]
                self.sent.append(batch)
                items = [{"content": f"batch {batch} item {i}: Alice logged vessel {i} near the quay.",
                          "document_id": f"doc-{batch}"} for i in range(BATCH)]
                reply = self._post(client, "retain", "/memories", {"items": items})
                if reply is not None and reply.status_code == 200:
                    self.acked.append(batch)

    def statuses(self) -> collections.Counter[tuple[int, str]]:
        return collections.Counter((status, code) for _, _, status, code, _ in self.answers)

    def wait_for_success(self, since: float, timeout: float = 60) -> float:
        """Seconds from ``since`` to the first recall and the first retain both answered 200 after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = {kind: t for t, kind, status, _, _ in list(self.answers) if status == 200 and t > since}
            if {"recall", "retain"} <= ok.keys():
                return max(ok.values()) - since
            time.sleep(0.1)
        raise AssertionError(f"no recovery within {timeout} s: {self.statuses()}")


def _batch_sizes(url: str, bank: str, schema: str = "public") -> dict[str, int]:
    """Memories per retained batch, read straight from the database."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(f'SELECT document_id, count(*) FROM "{schema}".memory_units WHERE bank_id = %s '
                            "GROUP BY document_id", (bank,)).fetchall()
    return {document.removeprefix("doc-"): n for document, n in rows if document and document.startswith("doc-")}


def _check(load: Load, sizes: dict[str, int], scenario: str, recovery: float, fault_seconds: float) -> None:
    """Only 200 and 503 with Retry-After; every acknowledged batch whole, every other whole or absent."""
    statuses = load.statuses()
    figures = {"scenario": scenario, "requests": len(load.answers),
               "by_status": {f"{s} {c}".strip(): n for (s, c), n in sorted(statuses.items())},
               "fault_seconds": round(fault_seconds, 2), "recovery_seconds": round(recovery, 2),
               "batches_acked": len(load.acked), "batches_sent": len(load.sent)}
    print(json.dumps(figures))
    if REPORT:
        with open(REPORT, "a") as handle:
            handle.write(json.dumps(figures) + "\n")
    assert set(statuses) <= {(200, ""), (503, "database_unavailable")}, statuses
    assert all(after for _, _, status, _, after in load.answers if status == 503)
    assert all(sizes.get(batch) == BATCH for batch in load.acked), "an acknowledged retain is missing"
    assert all(sizes.get(batch, 0) in (0, BATCH) for batch in load.sent), "a retain is half-written"
    assert set(sizes) <= set(load.sent)


# ---- an external server behind the test's proxy ----------------------------------------------------------


@pytest.fixture
def external() -> Iterator[tuple[pgserver.Server, TcpProxy]]:
    # commits durable, as on a real server: a killed server must not lose a retain it acknowledged
    server = pgserver.start_server(pgserver.embedded_installation(), settings={"synchronous_commit": "on"})
    try:
        with TcpProxy(server.port) as proxy:
            yield server, proxy
    finally:
        server.stop()


def _proxied(server: pgserver.Server, proxy: TcpProxy) -> str:
    return f"postgresql://postgres:{server.password}@127.0.0.1:{proxy.port}/postgres"


def _kill(server: pgserver.Server, proxy: TcpProxy) -> None:
    server.kill()
    time.sleep(1.0)
    server.start()


def _stop_cleanly(server: pgserver.Server, proxy: TcpProxy) -> None:
    server.halt("fast")
    time.sleep(1.0)
    server.start()


def _stop_for_a_while(server: pgserver.Server, proxy: TcpProxy) -> None:
    server.halt("fast")
    time.sleep(10.0)  # beyond the engine's own retries: requests meanwhile answer 503
    server.start()


def _move(server: pgserver.Server, proxy: TcpProxy) -> None:
    server.halt("fast")
    server.start(port=pgserver.free_port())
    proxy.target_port = server.port


def _cut(server: pgserver.Server, proxy: TcpProxy) -> None:
    for _ in range(3):
        proxy.cut()
        time.sleep(0.3)


def _stall(server: pgserver.Server, proxy: TcpProxy) -> None:
    proxy.stall()
    time.sleep(4.0)
    proxy.resume()


FAULTS: dict[str, Callable[[pgserver.Server, TcpProxy], None]] = {
    "postmaster killed": _kill, "stopped cleanly": _stop_cleanly, "away for 10 s": _stop_for_a_while,
    "moved to another port": _move,
    "connections cut": _cut, "connections stalled": _stall,
}


@pytest.mark.parametrize("scenario", list(FAULTS))
def test_an_external_database_that_goes_away_answers_503_and_comes_back(
        make_settings: Callable[..., Settings], external: tuple[pgserver.Server, TcpProxy], scenario: str) -> None:
    server, proxy = external
    settings = make_settings(database_url=_proxied(server, proxy), db_acquire_timeout=3, db_command_timeout=10)
    with ServerThread(settings) as service:
        bank = f"away-{uuid.uuid4().hex[:8]}"
        _seed(service.url, bank)
        queued = _queue_retain(service.url, bank)
        with Load(service.url, bank) as load:
            _wait_running(service.url, bank, queued)
            started = time.monotonic()
            FAULTS[scenario](server, proxy)
            ended = time.monotonic()
            recovery = load.wait_for_success(ended)
            time.sleep(1.0)
        _check(load, _batch_sizes(server.url, bank), f"external: {scenario}", recovery, ended - started)
        _wait_completed(service.url, bank, queued)
        ready = httpx.get(f"{service.url}/health/ready", timeout=30)
        assert ready.status_code == 200, ready.text


async def test_connections_probe_a_silent_database_host_unless_the_url_says_otherwise(
        make_settings: Callable[..., Settings], external: tuple[pgserver.Server, TcpProxy]) -> None:
    """TCP keepalives and a user timeout on every connection: a host that vanished without closing them
    fails its requests over within about half a minute; the URL's own values win."""
    from hindsight_recall.store.db import TCP_DEFAULTS, Database
    from hindsight_recall.store.driver import driver_connection

    server, proxy = external
    for query, expected in (("", TCP_DEFAULTS), ("?keepalives_idle=42", {**TCP_DEFAULTS, "keepalives_idle": "42"})):
        db = Database(make_settings(database_url=_proxied(server, proxy) + query))
        await db.open()
        try:
            async with db.connect() as conn:
                parameters = (await driver_connection(conn)).info.get_parameters()
        finally:
            await db.close()
        assert {k: parameters.get(k) for k in TCP_DEFAULTS} == expected


# ---- the embedded server, stopped or killed under the service ---------------------------------------------


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_the_embedded_server_going_away_answers_503_and_comes_back(make_settings: Callable[..., Settings],
                                                                  tmp_path: Path, how: str) -> None:
    import signal

    data_dir = tmp_path / "away" / "data"
    with ServerThread(make_settings(embedded_data_dir=data_dir, database_url=None)) as service:
        bank = f"away-{uuid.uuid4().hex[:8]}"
        _seed(service.url, bank)
        queued = _queue_retain(service.url, bank)
        with Load(service.url, bank) as load:
            time.sleep(1.5)
            started = time.monotonic()
            before = embedded.status(data_dir)
            assert before is not None
            if how == "killed":
                os.kill(before.pid, signal.SIGKILL)
            else:
                assert embedded.stop_server(data_dir)
            deadline = time.monotonic() + 60
            while getattr(embedded.status(data_dir), "pid", before.pid) == before.pid:
                assert time.monotonic() < deadline, "the service did not start the server again"
                time.sleep(0.1)
            ended = time.monotonic()
            recovery = load.wait_for_success(ended)
            time.sleep(1.0)
        status = embedded.status(data_dir)
        assert status is not None
        _check(load, _batch_sizes(status.url(), bank), f"embedded: {how}", recovery, ended - started)
        _wait_completed(service.url, bank, queued)


# ---- helpers ---------------------------------------------------------------------------------------------


def _seed(url: str, bank: str) -> None:
    reply = httpx.post(f"{url}/v1/default/banks/{bank}/memories", timeout=120,
                       json={"items": [{"content": "Alice works at Helios Robotics in Munich."}]})
    assert reply.status_code == 200, reply.text


def _queue_retain(url: str, bank: str) -> str:
    """An async retain big enough to be running when the fault comes; its operation id."""
    items = [{"content": f"queued item {i}: Bob logged ferry {i} at the pier.", "document_id": "queued"}
             for i in range(QUEUED)]
    reply = httpx.post(f"{url}/v1/default/banks/{bank}/memories", timeout=120, json={"items": items, "async": True})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["operation_id"])


def _wait_running(url: str, bank: str, operation: str, timeout: float = 60) -> None:
    """Until the queued retain runs, so that the fault finds it half done."""
    deadline = time.monotonic() + timeout
    while (status := _operation(url, bank, operation)["status"]) != "processing":
        assert status == "pending" and time.monotonic() < deadline, status
        time.sleep(0.1)
    time.sleep(1.0)


def _operation(url: str, bank: str, operation: str) -> dict[str, Any]:
    reply = httpx.get(f"{url}/v1/default/banks/{bank}/operations/{operation}", timeout=30)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def _wait_completed(url: str, bank: str, operation: str, timeout: float = 180) -> None:
    """The queued retain paused while the database was away and completed after, with all its items."""
    deadline = time.monotonic() + timeout
    while True:
        body = _operation(url, bank, operation)
        if body["status"] == "completed":
            break
        assert body["status"] in ("pending", "processing"), body
        assert time.monotonic() < deadline, f"the queued retain did not complete: {body}"
        time.sleep(0.5)
    listed = httpx.get(f"{url}/v1/default/banks/{bank}/documents/queued", timeout=30)
    assert listed.status_code == 200, listed.text
    assert listed.json()["memory_unit_count"] == QUEUED, listed.json()


# ---- the disk under the embedded server fills up -----------------------------------------------------------


def test_a_full_disk_refuses_writes_with_503_naming_it_while_recall_answers(
        make_settings: Callable[..., Settings], small_disk: Path) -> None:
    data_dir = small_disk / "pg" / "data"
    with ServerThread(make_settings(embedded_data_dir=data_dir, database_url=None)) as service:
        bank = f"full-{uuid.uuid4().hex[:8]}"
        _seed(service.url, bank)
        filler = small_disk / "filler"
        with filler.open("wb") as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 2**20)
                handle.flush()
        started = time.monotonic()
        with Load(service.url, bank) as load:
            time.sleep(5.0)
            refused = [reply for reply in load.replies if reply.status_code != 200]
            assert refused, "a retain on a full disk succeeded"
            assert all("disk that holds the database is full" in r.json()["message"] for r in refused), \
                {r.json()["message"] for r in refused}
            recalled = {s for _, kind, s, _, _ in load.answers if kind == "recall"}
            assert recalled == {200}, load.statuses()
            filler.unlink()
            freed = time.monotonic()
            recovery = load.wait_for_success(freed)
            time.sleep(1.0)
        status = embedded.status(data_dir)
        assert status is not None
        _check(load, _batch_sizes(status.url(), bank), "embedded: disk full", recovery, freed - started)


def test_a_queued_retain_that_meets_the_database_away_pauses_and_resumes(
        serve: Callable[..., ServerThread], monkeypatch: pytest.MonkeyPatch) -> None:
    """An operation whose run meets a lost connection goes back to the queue, not to ``failed``, even when
    the database is back by the time the worker records how it ended."""
    from hindsight_recall.service import async_retain

    real, calls = async_retain.run, []

    async def run_once_without_a_database(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            await psycopg.AsyncConnection.connect(f"postgresql://x@127.0.0.1:{pgserver.free_port()}/x")
        return await real(*args, **kwargs)

    monkeypatch.setattr(async_retain, "run", run_once_without_a_database)
    service = serve()
    bank = f"paused-{uuid.uuid4().hex[:8]}"
    items = [{"content": f"queued item {i}: Bob logged ferry {i} at the pier.", "document_id": "queued"}
             for i in range(5)]
    reply = httpx.post(f"{service.url}/v1/default/banks/{bank}/memories", timeout=60, json={"items": items,
                                                                                            "async": True})
    operation = str(reply.json()["operation_id"])
    deadline = time.monotonic() + 60
    while (body := _operation(service.url, bank, operation))["status"] != "completed":
        assert body["status"] in ("pending", "processing") and time.monotonic() < deadline, body
        time.sleep(0.2)
    assert len(calls) == 2 and body["retry_count"] >= 1, body
