"""The event loop stays free while heavy requests are served: ``/health/live`` answers promptly, probed
from a thread of its own, while a large async retain body is checked and while an export's archive
is built (their CPU work runs in worker threads, a part at a time)."""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall import Engine
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.service import ServerThread
from sqlalchemy import text

#: what a liveness probe may take while the server works (it answers in about a millisecond when idle)
PROMPT = 0.5


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    """A server (no worker: a queued retain is checked and stored, never run) that has settled: once its
    date finder is loaded, what start-up made is set aside from the collector's passes (in this process)."""
    frozen = gc.get_freeze_count()
    started = serve(service_operation_workers=0)
    deadline = time.monotonic() + 60
    while gc.get_freeze_count() == frozen and time.monotonic() < deadline:
        time.sleep(0.1)
    return started


def _cancel(url: str, bank: str, operation: str) -> None:
    """Cancel a retain queued only to be checked: left pending on the run's database, the next module's
    queue worker would spend minutes storing it while that module's own operations wait."""
    answer = httpx.delete(f"{url}/v1/default/banks/{bank}/operations/{operation}", timeout=30)
    assert answer.status_code == 200, answer.text


@contextlib.contextmanager
def probing(url: str) -> Iterator[list[float]]:
    """``/health/live`` asked every 10 ms from a thread of its own; yields the latencies seen."""
    seen: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            while not stop.is_set():
                started = time.perf_counter()
                assert c.get("/health/live").status_code == 200
                seen.append(time.perf_counter() - started)
                time.sleep(0.01)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    time.sleep(0.1)
    try:
        yield seen
    finally:
        stop.set()
        thread.join(timeout=60)


def test_a_large_async_retain_body_is_checked_off_the_event_loop(server: Any, bank: str) -> None:
    # built as text: 200,000 dicts alive in this process would slow every collection the server makes
    items = ",".join(f'{{"content": "item {i} of a long import", "tags": ["bulk"]}}' for i in range(200_000))
    body = f'{{"items": [{items}], "async": true}}'.encode()
    with httpx.Client(base_url=server.url, timeout=120, headers=EXTRAS) as http, probing(server.url) as seen:
        response = http.post(f"/v1/default/banks/{bank}/memories", content=body,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    _cancel(server.url, bank, response.json()["operation_id"])
    assert response.json()["items_count"] == 200_000
    assert len(seen) > 3 and max(seen) < PROMPT, f"/health/live took up to {max(seen):.2f} s"


async def _big_bank(engine: Engine, bank: str, size: int) -> None:
    """A bank of ``size`` memories in one document: one retained, copied in SQL (no embeddings needed)."""
    await engine.retain(bank, [{"id": "m0", "text": "The ferry to the island left at dawn with forty "
                                "passengers and a cargo of slate.", "document_id": "log", "tags": ["sea"],
                                "context": "harbour log", "metadata": {"source": "logbook"}}])
    async with engine.db.connect() as conn:
        columns = [c for c in (await conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'memory_units' "
            "AND table_schema = current_schema() AND is_generated = 'NEVER' AND column_name NOT IN "
            "('id', 'external_id', 'embedding', 'text', 'position')"))).scalars()]
        listed = ", ".join(columns)
        await conn.execute(text(
            f"INSERT INTO memory_units (id, external_id, text, position, {listed}) "
            f"SELECT gen_random_uuid(), 'm' || g, text || ' ' || g, g, {listed} "
            "FROM memory_units, generate_series(1, :size) AS g WHERE bank_id = :bank AND external_id = 'm0'"
        ), {"bank": bank, "size": size - 1})
        await conn.execute(text("ANALYZE memory_units"))  # as autovacuum would: the export's plan reads the counts


async def test_an_export_is_built_off_the_event_loop(server: Any, engine: Engine, bank: str) -> None:
    await _big_bank(engine, bank, 100_000)
    with httpx.Client(base_url=server.url, timeout=300, headers=EXTRAS) as http, probing(server.url) as seen:
        response = http.post(f"/v1/default/banks/{bank}/transfer/export")
    assert response.status_code == 202, response.text
    assert len(seen) > 3 and max(seen) < PROMPT, f"/health/live took up to {max(seen):.2f} s"
    with httpx.Client(base_url=server.url, timeout=300, headers=EXTRAS) as http:
        status = http.get(f"/v1/default/banks/{bank}/operations/{response.json()['operation_id']}").json()
        archive = http.get(status["result_metadata"]["download_url"])
    assert status["result_metadata"]["fact_count"] == 100_000
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(archive.content)) as zf:
        (document,) = [json.loads(zf.read(n)) for n in zf.namelist() if n.startswith("documents/")]
    assert len(document["facts"]) == 100_000 and document["facts"][0]["text"].startswith("The ferry")


def test_a_large_body_s_errors_name_their_items(server: Any, bank: str) -> None:
    """Checked a part at a time, a large body is refused as a small one is, naming the item at fault."""
    items = [{"content": f"item {i}", "document_id": "d"} for i in range(5000)]
    path = f"/v1/default/banks/{bank}/memories"
    with httpx.Client(base_url=server.url, timeout=120, headers=EXTRAS) as http:
        for broken, extra, status, message in (
            ({4321: {"content": 5}}, {}, 422, "items.4321.content.str: Input should be a valid string"),
            ({}, {"colour": "red"}, 422, "colour: Extra inputs are not permitted"),
            ({4000: {"content": "x", "strategy": "s"}}, {}, 400, "items.4000.strategy"),
            ({4999: {"content": " "}}, {}, 422, "items.4999.content: must not be empty"),
            ({3001: {"content": "x", "timestamp": "soonish"}}, {}, 422, "items.3001.timestamp"),
            ({}, {"operation_id": "nope"}, 422, "operation_id: must be a valid UUID"),
        ):
            sent = [broken.get(i, item) for i, item in enumerate(items)]
            answer = http.post(path, json={"items": sent, "async": True, **extra})
            assert answer.status_code == status, answer.text
            assert message in answer.json()["message"], answer.text
        queued = http.post(path, json={"items": items, "async": True}).json()
        operation = http.get(f"{path.rsplit('/', 1)[0]}/operations/{queued['operation_id']}").json()
        _cancel(server.url, bank, queued["operation_id"])
        assert queued["items_count"] == 5000 and operation["status"] == "pending"
