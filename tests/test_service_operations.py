"""Async operations: ``async: true`` retains queued in PostgreSQL, upstream's operation routes, size limits.

Driven through upstream's Python client (``hindsight-client==1.1.0``) and httpx against a real service;
the crash, shutdown and two-process tests run ``hindsight-recall serve`` as processes on one database.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")

MAX_SYNC = 100
CHUNK = 40


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True, service_max_sync_retain_items=MAX_SYNC, service_operation_chunk_items=CHUNK,
                 service_operation_workers=2)


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(headers=EXTRAS, base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture
def client(server: Any) -> Iterator[Any]:
    with hindsight_client.Hindsight(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def sql(server: Any) -> Iterator[Any]:
    """A direct connection to the service's database, for tests that reach past the API."""
    import psycopg

    url = server.engine.db.url
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


def new_bank() -> str:
    return f"ops-{uuid.uuid4().hex[:10]}"


def items(n: int, prefix: str = "Fact", per_document: int | None = None) -> list[dict[str, Any]]:
    """``n`` items; without ``per_document`` all in the one document a retain generates, else in
    documents of ``per_document`` items each."""
    made = [{"content": f"{prefix} number {i}: the lighthouse keeper logged ship {i} at dawn."} for i in range(n)]
    if per_document:
        for i, item in enumerate(made):
            item["document_id"] = f"{prefix}-{i // per_document}"
    return made


def queue(http: httpx.Client, bank_id: str, body_items: list[dict[str, Any]], **extra: Any) -> str:
    response = http.post(f"/v1/default/banks/{bank_id}/memories", json={"items": body_items, "async": True, **extra})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["async"] is True and body["items_count"] == len(body_items)
    return str(body["operation_id"])


def operation(http: httpx.Client, bank_id: str, operation_id: str) -> dict[str, Any]:
    response = http.get(f"/v1/default/banks/{bank_id}/operations/{operation_id}")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def wait_for(http: httpx.Client, bank_id: str, operation_id: str, statuses: tuple[str, ...] = ("completed",),
             timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = operation(http, bank_id, operation_id)
        if found["status"] in statuses:
            return found
        assert found["status"] not in ("failed", "cancelled") or found["status"] in statuses, found
        assert time.monotonic() < deadline, f"still {found['status']}: {found}"
        time.sleep(0.1)


def total(http: httpx.Client, bank_id: str) -> int:
    """The bank's memories (none when the bank does not exist)."""
    response = http.get(f"/v1/default/banks/{bank_id}/memories/list", params={"limit": 1})
    if response.status_code == 404 and response.json()["code"] == "bank_not_found":
        return 0
    return int(response.json()["total"])


def occupy(sql: Any, bank_id: str) -> uuid.UUID:
    """A live operation of another worker in the bank: the bank's queued operations wait behind it."""
    ghost = uuid.uuid4()
    sql.execute("INSERT INTO banks (bank_id, internal_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (bank_id, uuid.uuid4()))
    sql.execute("INSERT INTO operations (bank_id, operation_id, operation_type, status, worker_id, lease_until) "
                "VALUES (%s, %s, 'retain', 'processing', 'elsewhere', now() + interval '1 hour')", (bank_id, ghost))
    return ghost


def free(sql: Any, bank_id: str, ghost: uuid.UUID) -> None:
    sql.execute("DELETE FROM operations WHERE bank_id = %s AND operation_id = %s", (bank_id, ghost))


# ---- the main path ------------------------------------------------------------------------------

def test_async_retain_answers_at_once_and_completes(client: Any, http: httpx.Client) -> None:
    bank_id = new_bank()
    facts = [{"content": "Dana repairs vintage motorcycles in Porto.", "tags": ["hobby"]},
             {"content": "Dana's workshop is next to the river.", "timestamp": "2024-02-01T00:00:00Z"}]
    response = client.retain_batch(bank_id, facts, retain_async=True)
    assert response.var_async is True and response.items_count == 2 and response.operation_id
    done = wait_for(http, bank_id, response.operation_id)
    assert done["operation_type"] == done["task_type"] == "retain" and done["id"] == response.operation_id
    assert done["completed_at"] and done["error_message"] is None and done["retry_count"] == 0
    assert done["progress"]["processed"] == done["progress"]["total"] == 2
    assert done["result_metadata"]["memories"] == 2
    assert done["task_payload"] is None
    with_payload = http.get(f"/v1/default/banks/{bank_id}/operations/{response.operation_id}",
                            params={"include_payload": "true"}).json()
    assert [i["content"] for i in with_payload["task_payload"]["items"]] == [f["content"] for f in facts]
    bad = http.get(f"/v1/default/banks/{bank_id}/operations/{response.operation_id}", params={"include_payload": "x"})
    assert bad.status_code == 422 and bad.json()["message"].startswith("include_payload")
    recalled = client.recall(bank_id, "Who repairs motorcycles?", budget="low")
    assert recalled.results[0].text == "Dana repairs vintage motorcycles in Porto."
    assert client.list_memories(bank_id).total == 2


async def test_async_client_calls(server: Any) -> None:
    client = hindsight_client.Hindsight(base_url=server.url, timeout=120)
    bank_id = new_bank()
    queued = await client.aretain(bank_id, "Eli keeps bees on a rooftop in Lyon.", retain_async=True)
    assert queued.var_async is True
    api = client.operations
    deadline = time.monotonic() + 60
    while (status := await api.get_operation_status(bank_id, queued.operation_id)).status != "completed":
        assert time.monotonic() < deadline and status.status in ("pending", "processing"), status
        time.sleep(0.1)
    assert status.operation_type == "retain" and status.completed_at
    listed = await api.list_operations(bank_id)
    assert listed.bank_id == bank_id and listed.total == 1
    assert [op.id for op in listed.operations] == [queued.operation_id]
    assert listed.operations[0].status == "completed" and listed.operations[0].items_count == 1
    deleted = await api.delete_operation(bank_id, queued.operation_id)
    assert deleted.success and deleted.operation_id == queued.operation_id
    gone = await api.get_operation_status(bank_id, queued.operation_id)
    assert gone.status == "not_found"
    await client.aclose()


def test_a_big_async_retain_runs_in_chunks_of_whole_documents(http: httpx.Client, client: Any) -> None:
    bank_id = new_bank()
    n = CHUNK * 7 + 3
    operation_id = queue(http, bank_id, items(n, per_document=CHUNK))
    seen = set()
    deadline = time.monotonic() + 120
    while (found := operation(http, bank_id, operation_id))["status"] != "completed":
        if found["progress"]:
            seen.add(found["progress"]["processed"])
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert found["progress"] == {**found["progress"], "processed": n, "total": n, "stage": "completed"}
    assert seen <= {0, *range(CHUNK, n, CHUNK), n}  # progress moves a whole chunk at a time
    assert total(http, bank_id) == n
    assert client.recall(bank_id, "ship 123 at dawn", budget="low").results


def test_one_document_is_written_whole_however_big(http: httpx.Client) -> None:
    bank_id = new_bank()
    n = CHUNK * 3 + 1
    operation_id = queue(http, bank_id, items(n))  # one generated document
    seen = set()
    while (found := operation(http, bank_id, operation_id))["status"] != "completed":
        if found["progress"]:
            seen.add(found["progress"]["processed"])
        seen.add(total(http, bank_id))
        time.sleep(0.01)
    assert seen <= {0, n} and total(http, bank_id) == n  # never a part of it


def test_a_document_replaced_in_the_background_is_all_old_or_all_new(http: httpx.Client) -> None:
    bank_id = new_bank()
    old = [{"content": f"Old line {i} of the manual.", "document_id": "manual"} for i in range(CHUNK * 2)]
    assert http.post(f"/v1/default/banks/{bank_id}/memories", json={"items": old, "async": False}).status_code == 200
    new = [{"content": f"New line {i} of the manual.", "document_id": "manual"} for i in range(CHUNK * 3)]
    operation_id = queue(http, bank_id, new)
    states = set()
    while operation(http, bank_id, operation_id)["status"] != "completed":
        listed = http.get(f"/v1/default/banks/{bank_id}/memories/list", params={"limit": 1000}).json()["items"]
        states.add(frozenset(m["text"].split()[0] for m in listed))
    listed = http.get(f"/v1/default/banks/{bank_id}/memories/list", params={"limit": 1000}).json()["items"]
    assert sorted(m["text"] for m in listed) == sorted(i["content"] for i in new)
    assert states <= {frozenset({"Old"}), frozenset({"New"})}, states


def test_documents_behave_as_in_a_synchronous_retain(http: httpx.Client) -> None:
    bank_id = new_bank()
    path = f"/v1/default/banks/{bank_id}/memories"
    first = [{"content": f"Chapter {i} of the logbook.", "document_id": "log"} for i in range(5)]
    assert http.post(path, json={"items": first}).status_code == 200
    again = [{"content": f"Revised chapter {i}.", "document_id": "log"} for i in range(3)]
    wait_for(http, bank_id, queue(http, bank_id, again))
    listed = http.get(f"/v1/default/banks/{bank_id}/memories/list", params={"document_id": "log"}).json()
    assert sorted(m["text"] for m in listed["items"]) == [f"Revised chapter {i}." for i in range(3)]
    more = [{"content": "An appendix.", "document_id": "log", "update_mode": "append"}]
    wait_for(http, bank_id, queue(http, bank_id, more))
    assert total(http, bank_id) == 4
    loose = [{"content": "A loose note."}, {"content": "Another loose note."}]
    op = wait_for(http, bank_id, queue(http, bank_id, loose))
    assert op["result_metadata"]["memories"] == 2 and total(http, bank_id) == 6


# ---- the operation routes -----------------------------------------------------------------------

def test_cancel_a_pending_operation(http: httpx.Client, sql: Any, client: Any) -> None:
    bank_id = new_bank()
    ghost = occupy(sql, bank_id)
    try:
        operation_id = queue(http, bank_id, items(3))
        time.sleep(1.5)  # a worker looked at the queue at least once
        assert operation(http, bank_id, operation_id)["status"] == "pending"
        cancelled = http.delete(f"/v1/default/banks/{bank_id}/operations/{operation_id}")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json() == {"success": True, "message": f"Operation {operation_id} cancelled",
                                    "operation_id": operation_id}
        again = http.delete(f"/v1/default/banks/{bank_id}/operations/{operation_id}")
        assert again.status_code == 409 and "'cancelled'" in again.json()["message"]
    finally:
        free(sql, bank_id, ghost)
    time.sleep(1.5)
    assert operation(http, bank_id, operation_id)["status"] == "cancelled"
    assert total(http, bank_id) == 0  # a cancelled operation never started
    listed = client.list_memories(bank_id)
    assert listed.total == 0


def test_retry_a_failed_operation(http: httpx.Client, sql: Any) -> None:
    bank_id = new_bank()
    ghost = occupy(sql, bank_id)
    operation_id = queue(http, bank_id, items(4))
    kept = sql.execute("SELECT payload FROM operations WHERE operation_id = %s", (operation_id,)).fetchone()[0]
    sql.execute("UPDATE operations SET payload = '{\"items\": 7}' WHERE operation_id = %s", (operation_id,))
    early = http.post(f"/v1/default/banks/{bank_id}/operations/{operation_id}/retry")
    assert early.status_code == 409 and "'pending'" in early.json()["message"]
    free(sql, bank_id, ghost)
    failed = wait_for(http, bank_id, operation_id, ("failed",))
    assert "items" in failed["error_message"] and failed["completed_at"]
    sql.execute("UPDATE operations SET payload = %s WHERE operation_id = %s", (kept, operation_id))
    retried = http.post(f"/v1/default/banks/{bank_id}/operations/{operation_id}/retry")
    assert retried.status_code == 200, retried.text
    assert retried.json()["message"] == f"Operation {operation_id} queued for retry"
    done = wait_for(http, bank_id, operation_id)
    assert done["error_message"] is None and done["attempts"] == 2 and total(http, bank_id) == 4
    assert http.post(f"/v1/default/banks/{bank_id}/operations/{operation_id}/retry").status_code == 409


def test_delete_only_ended_operations(http: httpx.Client, sql: Any) -> None:
    bank_id = new_bank()
    ghost = occupy(sql, bank_id)
    try:
        operation_id = queue(http, bank_id, items(2))
        pending = http.delete(f"/v1/default/banks/{bank_id}/operations/{operation_id}/delete")
        assert pending.status_code == 409 and "'pending'" in pending.json()["message"]
    finally:
        free(sql, bank_id, ghost)
    wait_for(http, bank_id, operation_id)
    deleted = http.delete(f"/v1/default/banks/{bank_id}/operations/{operation_id}/delete")
    assert deleted.json() == {"success": True, "message": f"Operation {operation_id} deleted",
                              "operation_id": operation_id}
    assert http.delete(f"/v1/default/banks/{bank_id}/operations/{operation_id}/delete").status_code == 404
    assert total(http, bank_id) == 2  # the memories stay


def test_list_filters_and_pages(http: httpx.Client, sql: Any) -> None:
    bank_id = new_bank()
    done = [queue(http, bank_id, items(1, f"Done {i}")) for i in range(3)]
    for operation_id in done:
        wait_for(http, bank_id, operation_id)
    ghost = occupy(sql, bank_id)
    try:
        waiting = queue(http, bank_id, items(1, "Waiting"))
        path = f"/v1/default/banks/{bank_id}/operations"
        everything = http.get(path).json()
        assert everything["total"] == 5 and everything["limit"] == 20 and everything["offset"] == 0
        ids = [op["id"] for op in everything["operations"]]
        assert ids == [waiting, str(ghost), *reversed(done)]  # newest first
        assert http.get(path, params={"status": "pending"}).json()["operations"][0]["id"] == waiting
        assert http.get(path, params={"status": "completed"}).json()["total"] == 3
        assert http.get(path, params={"type": "consolidation"}).json()["total"] == 0
        page = http.get(path, params={"limit": 2, "offset": 2, "exclude_parents": "true"}).json()
        assert page["total"] == 5 and [op["id"] for op in page["operations"]] == [done[2], done[1]]
    finally:
        free(sql, bank_id, ghost)
    wait_for(http, bank_id, waiting)


def test_unknown_operations_read_as_upstream(http: httpx.Client, client: Any) -> None:
    bank_id = new_bank()
    queue(http, bank_id, items(1))
    unknown = str(uuid.uuid4())
    found = operation(http, bank_id, unknown)
    assert found["status"] == "not_found" and found["operation_id"] == unknown
    path = f"/v1/default/banks/{bank_id}/operations/{unknown}"
    for response in (http.delete(path), http.post(f"{path}/retry"), http.delete(f"{path}/delete")):
        assert response.status_code == 404 and response.json()["code"] == "operation_not_found"
    for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/retry"), ("DELETE", "/delete")):
        response = http.request(method, f"/v1/default/banks/{bank_id}/operations/not-a-uuid{suffix}")
        assert response.status_code == 400 and "Invalid operation_id format" in response.json()["message"]
    missing = http.get(f"/v1/default/banks/{new_bank()}/operations")
    assert missing.status_code == 404 and missing.json()["code"] == "bank_not_found"


@pytest.mark.parametrize(("params", "status", "field"), [
    ({"limit": "0"}, 400, "limit"), ({"limit": "101"}, 400, "limit"), ({"limit": str(10**30)}, 400, "limit"),
    ({"offset": str(2**63)}, 400, "offset"), ({"limit": "abc"}, 422, "limit"), ({"offset": "-1"}, 422, "offset"),
    ({"limit": "²"}, 422, "limit"), ({"status": "running"}, 422, "status"), ({"type": "a\x00b"}, 400, "type"),
    ({"exclude_parents": "maybe"}, 422, "exclude_parents"),
])
def test_bad_list_parameters_name_the_field(http: httpx.Client, params: dict[str, str], status: int,
                                            field: str) -> None:
    bank_id = new_bank()
    queue(http, bank_id, items(1))
    response = http.get(f"/v1/default/banks/{bank_id}/operations", params=params)
    assert response.status_code == status and response.json()["message"].startswith(field), response.text


def test_operations_are_bank_scoped(http: httpx.Client) -> None:
    mine, other = new_bank(), new_bank()
    operation_id = queue(http, mine, items(2))
    theirs = queue(http, other, items(1))
    wait_for(http, mine, operation_id)
    wait_for(http, other, theirs)
    assert operation(http, other, operation_id)["status"] == "not_found"
    for response in (http.delete(f"/v1/default/banks/{other}/operations/{operation_id}"),
                     http.post(f"/v1/default/banks/{other}/operations/{operation_id}/retry"),
                     http.delete(f"/v1/default/banks/{other}/operations/{operation_id}/delete")):
        assert response.status_code == 404
    listed = http.get(f"/v1/default/banks/{other}/operations").json()["operations"]
    assert operation_id not in {op["id"] for op in listed}
    assert operation(http, mine, operation_id)["status"] == "completed" and total(http, other) == 1


def test_deleting_a_bank_deletes_its_operations(http: httpx.Client) -> None:
    bank_id = new_bank()
    operation_id = queue(http, bank_id, items(1))
    wait_for(http, bank_id, operation_id)
    assert http.delete(f"/v1/default/banks/{bank_id}").status_code == 200
    assert operation(http, bank_id, operation_id)["status"] == "not_found"


# ---- submission ---------------------------------------------------------------------------------

def test_a_client_chosen_operation_id_is_idempotent(http: httpx.Client, client: Any) -> None:
    bank_id = new_bank()
    chosen = str(uuid.uuid4())
    first = client.retain_batch(bank_id, items(2), retain_async=True, operation_id=chosen)
    second = client.retain_batch(bank_id, items(2), retain_async=True, operation_id=chosen)
    assert first.operation_id == second.operation_id == chosen
    wait_for(http, bank_id, chosen)
    assert http.get(f"/v1/default/banks/{bank_id}/operations").json()["total"] == 1 and total(http, bank_id) == 2
    elsewhere = http.post(f"/v1/default/banks/{new_bank()}/memories",
                          json={"items": items(1), "async": True, "operation_id": chosen})
    assert elsewhere.status_code == 409 and elsewhere.json()["code"] == "operation_id_in_use"
    bad = http.post(f"/v1/default/banks/{bank_id}/memories", json={"items": items(1), "async": True,
                                                                    "operation_id": "nope"})
    assert bad.status_code == 422 and bad.json()["message"].startswith("operation_id")


@pytest.mark.parametrize(("item", "code"), [
    ({"content": ""}, "invalid_memory"),
    ({"content": "ok", "timestamp": "not a date"}, "invalid_memory"),
    ({"content": "ok", "strategy": "deep"}, "unsupported_field"),
    ({"content": [{"type": "image", "source": {}}]}, "unsupported_content"),
])
def test_bad_async_retains_are_refused_before_queueing(http: httpx.Client, item: dict[str, Any], code: str) -> None:
    bank_id = new_bank()
    response = http.post(f"/v1/default/banks/{bank_id}/memories", json={"items": [item], "async": True})
    assert response.status_code in (400, 422) and response.json()["code"] == code, response.text
    assert http.get(f"/v1/default/banks/{bank_id}/operations").status_code == 404  # nothing was queued


def test_nul_bytes_are_queued_as_the_synchronous_path_takes_them(http: httpx.Client) -> None:
    bank_id = new_bank()
    body = {"items": [{"content": "tab\x00separated", "context": "c\x00d"}]}
    sync = http.post(f"/v1/default/banks/{bank_id}/memories", json=body)
    queued = http.post(f"/v1/default/banks/{bank_id}/memories", json={**body, "async": True})
    assert queued.status_code == 200, queued.text
    ended = wait_for(http, bank_id, queued.json()["operation_id"], ("completed", "failed"))
    assert ended["status"] == ("completed" if sync.status_code == 200 else "failed")


def test_a_big_synchronous_retain_is_refused_at_once(http: httpx.Client) -> None:
    bank_id = new_bank()
    path = f"/v1/default/banks/{bank_id}/memories"
    refused = http.post(path, json={"items": items(MAX_SYNC + 1)})
    assert refused.status_code == 413 and refused.json()["code"] == "too_many_items"
    message = refused.json()["message"]
    assert "HINDSIGHT_API_SERVICE_MAX_SYNC_RETAIN_ITEMS" in message and str(MAX_SYNC) in message
    assert '"async": true' in message and total(http, bank_id) == 0
    assert http.post(path, json={"items": items(MAX_SYNC)}).status_code == 200
    wait_for(http, bank_id, queue(http, bank_id, items(MAX_SYNC + 1, "Queued")))
    assert total(http, bank_id) == 2 * MAX_SYNC + 1


def test_version_says_the_worker_runs(http: httpx.Client) -> None:
    assert http.get("/version").json()["features"]["worker"] is True


async def test_a_server_without_workers_runs_no_operations() -> None:
    from hindsight_recall.service.app import create_app
    from hindsight_recall.service.worker import Worker
    from hindsight_recall.settings import load_settings

    settings = load_settings(reranker_provider="rrf", service_operation_workers=0)
    app = create_app(settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", headers=EXTRAS) as c:
        assert (await c.get("/version")).json()["features"]["worker"] is False
    worker = Worker(app.app.state.engine)
    assert worker.slots == 0
    await asyncio.wait_for(worker.run(), 1)  # returns at once: it never looks at the queue


# ---- processes: crashes, shutdown, two servers on one queue ----------------------------------------

PROCESS_CHUNK = 50


@pytest.fixture(scope="module")
def shared_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One database for several ``serve`` processes: the run's Citus cluster, else an embedded server
    started here (so that killing a ``serve`` leaves it running)."""
    given = os.environ.get("HINDSIGHT_TEST_DATABASE_URL")
    if given:
        yield given
        return
    import shutil
    import tempfile

    from hindsight_recall.store import embedded

    work = Path(tempfile.mkdtemp(prefix="hindsight-operations-"))
    url = embedded.start(work / "data")
    try:
        yield url
    finally:
        embedded.stop(work / "data")
        shutil.rmtree(work, ignore_errors=True)


def serve(url: str, tmp_path: Path, name: str, **settings: str) -> Any:
    from hindsight_recall.testing.service import ServeProcess

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HINDSIGHT_API_", "HINDSIGHT_RECALL_"))}
    env.update({"HINDSIGHT_API_DATABASE_URL": url, "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
                "HINDSIGHT_API_SERVICE_OPERATION_LEASE": "3",
                "HINDSIGHT_API_SERVICE_OPERATION_CHUNK_ITEMS": str(PROCESS_CHUNK), **settings})
    return ServeProcess(env, (tmp_path / f"{name}.log").open("w"))


def wait_until_running(http: httpx.Client, bank_id: str, operation_id: str) -> dict[str, Any]:
    """Until the operation has committed at least one chunk."""
    deadline = time.monotonic() + 120
    while True:
        found = operation(http, bank_id, operation_id)
        if found["status"] == "processing" and found["progress"]["processed"] >= PROCESS_CHUNK:
            return found
        assert found["status"] in ("pending", "processing") and time.monotonic() < deadline, found
        time.sleep(0.05)


def row(url: str, operation_id: str) -> dict[str, Any]:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row) as conn:
        found = conn.execute("SELECT status, processed, attempts, worker_id, lease_until > now() AS leased "
                             "FROM operations WHERE operation_id = %s", (operation_id,)).fetchone()
    assert found is not None
    return dict(found)


def test_two_servers_drain_one_queue_running_each_operation_once(shared_url: str, tmp_path: Path) -> None:
    servers = [serve(shared_url, tmp_path, name) for name in ("a", "b")]
    try:
        for server in servers:
            server.start()
        clients = [httpx.Client(headers=EXTRAS, base_url=s.url, timeout=60) for s in servers]
        queued: list[tuple[str, str]] = []
        banks = [new_bank() for _ in range(8)]
        for round_ in range(3):
            for number, bank_id in enumerate(banks):
                http = clients[(number + round_) % 2]
                queued.append((bank_id, queue(http, bank_id, items(30, f"Round {round_}"))))
        ended = [wait_for(clients[0], bank_id, operation_id, timeout=300) for bank_id, operation_id in queued]
        assert [op["attempts"] for op in ended] == [1] * len(queued)  # no operation ran twice
        pids = {str(s.process.pid) for s in servers}
        ran_by = {op["result_metadata"]["worker_id"].split(":")[1] for op in ended}
        assert ran_by == pids, "both servers worked the queue"
        assert all(total(clients[1], bank_id) == 90 for bank_id in banks)
    finally:
        for server in servers:
            server.stop()


def test_a_killed_servers_operation_is_taken_again_after_its_lease(shared_url: str, tmp_path: Path) -> None:
    import signal

    first = serve(shared_url, tmp_path, "killed").start()
    bank_id, n = new_bank(), PROCESS_CHUNK * 30
    try:
        with httpx.Client(headers=EXTRAS, base_url=first.url, timeout=60) as http:
            operation_id = queue(http, bank_id, items(n, per_document=PROCESS_CHUNK))
            wait_until_running(http, bank_id, operation_id)
    finally:
        first.stop(signal.SIGKILL)
    stranded = row(shared_url, operation_id)
    assert stranded["status"] == "processing" and stranded["attempts"] == 1 and stranded["processed"] < n
    second = serve(shared_url, tmp_path, "survivor").start()
    try:
        with httpx.Client(headers=EXTRAS, base_url=second.url, timeout=60) as http:
            done = wait_for(http, bank_id, operation_id, timeout=300)
            assert done["attempts"] == 2 and total(http, bank_id) == n
            assert done["result_metadata"]["worker_id"].split(":")[1] == str(second.process.pid)
    finally:
        second.stop()


def test_sigterm_during_a_big_async_retain_stops_at_once_and_it_resumes(shared_url: str, tmp_path: Path) -> None:
    first = serve(shared_url, tmp_path, "stopped").start()
    bank_id, n = new_bank(), PROCESS_CHUNK * 40
    try:
        with httpx.Client(headers=EXTRAS, base_url=first.url, timeout=60) as http:
            operation_id = queue(http, bank_id, items(n, per_document=PROCESS_CHUNK))
            wait_until_running(http, bank_id, operation_id)
    finally:
        seconds = first.stop()
    assert seconds < 10, f"serve took {seconds:.1f} s to stop"
    handed_back = row(shared_url, operation_id)
    assert handed_back["status"] == "pending" and handed_back["worker_id"] is None
    import psycopg

    with psycopg.connect(shared_url) as conn:
        stored = conn.execute("SELECT count(*) FROM memory_units WHERE bank_id = %s", (bank_id,)).fetchone()[0]
    assert stored % PROCESS_CHUNK == 0 and handed_back["processed"] <= stored < n  # whole chunks, nothing half
    second = serve(shared_url, tmp_path, "restarted").start()
    try:
        with httpx.Client(headers=EXTRAS, base_url=second.url, timeout=60) as http:
            done = wait_for(http, bank_id, operation_id, timeout=300)
            assert done["attempts"] == 2 and total(http, bank_id) == n
    finally:
        second.stop()
