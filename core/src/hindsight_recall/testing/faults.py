"""kill -9 in the middle of a write: the write paths, a driver process that runs one and kills itself at a
chosen statement, and what must hold afterwards.

Each :class:`WritePath` prepares a bank (in the test's process), then a driver process
(``python -m hindsight_recall.testing.faults SPEC``) opens an engine on the same database, runs the write
and SIGKILLs itself just before its ``kill_at``-th statement or commit (counted from the write's start);
if the write returns first, it prints ``ACK``. The test then checks the bank against the state before
(``old``) and after a full run of the same write on a twin bank (``new``): a write is whole or absent,
an acknowledged one is whole, and nothing is left behind (:func:`~.snapshot.orphans`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection

from .snapshot import document_texts

#: a bank's state as far as the fault checks compare it: document (or ``None``) -> (its memories as
#: sorted (type, text, context) triples, its text), plus its invalidated memories and whether it exists
State = dict[str, Any]


def texts(prefix: str, n: int) -> list[str]:
    """``n`` distinct sentences (distinct words too, so their links and term counts differ)."""
    places = ("harbour", "lighthouse", "quay", "ferry", "dock", "pier", "beacon", "reef", "bay", "cove")
    return [f"{prefix} {i}: the {places[i % 10]} keeper logged vessel {i * 13} near buoy {i % 7}." for i in range(n)]


def memories(prefix: str, n: int, document: str | None = None, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "text": t, "entities": [f"Vessel {i % 5}"], "document_id": document,
             "chunk": t if document else None, **extra} for i, t in enumerate(texts(prefix, n))]


async def state(conn: AsyncConnection, bank_ids: list[str]) -> State:
    """What the checks compare, over ``bank_ids`` (memory and document ids left out: they are derived
    from the bank id, and a twin bank has another)."""
    out: State = {}
    for number, bank_id in enumerate(bank_ids):
        exists = await conn.scalar(text("SELECT count(*) FROM banks WHERE bank_id = :b"), {"b": bank_id})
        out[f"{number}:exists"] = bool(exists)
        rows = await conn.execute(text(
            "SELECT u.document_id, u.fact_type, u.text, u.context FROM memory_units u WHERE u.bank_id = :b"),
            {"b": bank_id})
        groups: dict[str, list[Any]] = {}
        for row in rows:
            groups.setdefault(f"{number}:{row.document_id}", []).append((row.fact_type, row.text, row.context))
        documents = await document_texts(conn, bank_id)
        for key, found in groups.items():
            document = key.split(":", 1)[1]
            out[key] = (sorted(found), documents.get(document))
        invalidated = await conn.execute(text(
            "SELECT memory->>'text', reason FROM invalidated_memories WHERE bank_id = :b"), {"b": bank_id})
        out[f"{number}:invalidated"] = sorted(tuple(r) for r in invalidated)
    return out


@dataclass
class WritePath:
    """One write path: how its bank is prepared, the write itself, and the banks it changes.

    :param setup: ``(engine, bank, work dir) -> params`` in the test's process; the params are JSON.
    :param write: ``(engine, bank, params)``: the write, as the driver runs it.
    :param banks: ``(bank, params) -> the banks whose state is compared``.
    :param finish: for a write acknowledged before it runs (a queued retain): ``(engine, bank, params)``
        completes it after the kill, as a restarted server would.
    :param request: the same write as an HTTP request, ``(client, bank, params) -> response``: the driver
        then sends it to the service app in its own process (the route, then the engine), and ``write``
        is only what the twin bank gets.
    """

    setup: Callable[[Any, str, Path], Awaitable[dict[str, Any]]]
    write: Callable[[Any, str, dict[str, Any]], Awaitable[Any]]
    banks: Callable[[str, dict[str, Any]], list[str]] = lambda bank, params: [bank]
    finish: Callable[[Any, str, dict[str, Any]], Awaitable[None]] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    request: Callable[[Any, str, dict[str, Any]], Awaitable[Any]] | None = None


async def _bank_of(engine: Any, bank: str, n: int = 120, **extra: Any) -> dict[str, Any]:
    await engine.retain(bank, memories("m", n // 2) + memories("d", n - n // 2, document="doc", **extra))
    return {}


async def _retain(engine: Any, bank: str, params: dict[str, Any]) -> Any:
    return await engine.retain(bank, memories("new", 20) + memories("n", 80, document="fresh"))


async def _replace_setup(engine: Any, bank: str, work: Path) -> dict[str, Any]:
    await engine.retain(bank, _document(bank, texts("Old line", 120)), replace_documents=["manual"])
    return {}


def _document(bank: str, lines: list[str]) -> list[Any]:
    from ..service.items import build_memories
    from ..service.schemas import RetainBody

    return build_memories(bank, RetainBody(items=[{"content": t, "document_id": "manual"} for t in lines]), {})[0]


def _new_lines() -> list[str]:
    lines = texts("Old line", 120)
    return [*lines[:30], *texts("New line", 50), *lines[70:]]  # a middle part rewritten, the rest shifted


async def _replace(engine: Any, bank: str, params: dict[str, Any]) -> Any:
    return await engine.retain(bank, _document(bank, _new_lines()), replace_documents=["manual"])


async def _post_replace(client: Any, bank: str, params: dict[str, Any]) -> Any:
    items = [{"content": t, "document_id": "manual"} for t in _new_lines()]
    return await client.post(f"/v1/default/banks/{bank}/memories", json={"items": items})


async def _post_merge(client: Any, bank: str, params: dict[str, Any]) -> Any:
    return await client.post(f"/v1/default/banks/{bank}/transfer/import",
                             params={"mode": "merge", "document_conflict": "replace"},
                             files={"file": ("a.zip", Path(params["archive"]).read_bytes())})


async def _edit_setup(engine: Any, bank: str, work: Path, *, invalidated: bool = False) -> dict[str, Any]:
    await _bank_of(engine, bank, 80)
    if invalidated:
        await engine.update_memory(bank, "m-7", lambda m: m, state="invalidated", reason="doubtful")
    return {}


async def _archive(engine: Any, work: Path, name: str, build: Callable[[str], Awaitable[None]]) -> str:
    """An archive of a bank ``build`` fills, made once per work dir."""
    path = work / f"{name}.zip"
    if not path.exists():
        source = f"fault-source-{name}-{uuid.uuid4().hex[:8]}"
        await build(source)
        transfer_id, _ = await engine.transfers.export(source)
        from ..store import transfer

        async with engine.db.connect() as conn:
            path.write_bytes(b"".join([part async for part in transfer.archive_parts(conn, source, transfer_id)]))
        await engine.delete_bank(source)
    return str(path)


async def _import_setup(engine: Any, bank: str, work: Path) -> dict[str, Any]:
    async def build(source: str) -> None:
        await _bank_of(engine, source, 100)
        await engine.retain(source, [{"id": "o", "text": "Vessels log often.", "type": "observation",
                                      "sources": ["m-1", "d-2"]}])
        await engine.update_memory(source, "m-3", lambda m: m, state="invalidated", reason="wrong")

    return {"archive": await _archive(engine, work, "restore", build)}


async def _merge_setup(engine: Any, bank: str, work: Path) -> dict[str, Any]:
    async def build(source: str) -> None:
        await engine.retain(source, memories("k", 60, document="keep") + memories("x", 60, document="extra"))

    await engine.retain(bank, memories("old", 50, document="keep") + memories("stay", 20))
    return {"archive": await _archive(engine, work, "merge", build)}


async def _submit(engine: Any, bank: str, work: Path) -> dict[str, Any]:
    from ..service.schemas import RetainBody
    from ..store import operations

    await engine.retain(bank, _document(bank, texts("Old line", 60)), replace_documents=["manual"])
    items = [{"content": t, "document_id": "manual"} for t in texts("New line", 70)]
    items += [{"content": t, "document_id": f"part-{i // 30}"} for i, t in enumerate(texts("Part", 120))]
    body = RetainBody(items=items)
    operation_id = uuid.uuid4()
    async with engine.db.connect() as conn:
        await operations.submit(conn, bank, operation_id, "retain", body.model_dump_json(by_alias=True), len(items),
                                None)
    return {"operation": str(operation_id)}


async def _work_queue(engine: Any, bank: str, params: dict[str, Any]) -> None:
    """Run a queue worker until the bank's operation has ended (as a server's would)."""
    from ..service.worker import Worker
    from ..store import operations

    worker = Worker(engine)
    running = asyncio.create_task(worker.run())
    try:
        while True:
            async with engine.db.connect() as conn:
                op = await operations.get(conn, bank, uuid.UUID(params["operation"]))
            if op is not None and op.status in operations.TERMINAL:
                assert op.status == "completed", op.error_message
                return
            await asyncio.sleep(0.1)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await worker.stop()


_edited_text = "Vessel 91 was logged twice, by two keepers."


def _edited(memory: Any) -> Any:
    return dataclasses.replace(memory, text=_edited_text)


PATHS: dict[str, WritePath] = {
    "retain": WritePath(lambda e, b, w: _bank_of(e, b, 40), _retain),
    "replace": WritePath(_replace_setup, _replace),
    "forget": WritePath(lambda e, b, w: _bank_of(e, b, 120),
                        lambda e, b, p: e.forget(b, [f"m-{i}" for i in range(0, 60, 2)] + ["d-3", "d-50"])),
    "delete_document": WritePath(lambda e, b, w: _bank_of(e, b, 120), lambda e, b, p: e.delete_document(b, "doc")),
    "clear": WritePath(lambda e, b, w: _bank_of(e, b, 120), lambda e, b, p: e.clear_memories(b, "world")),
    "edit": WritePath(_edit_setup, lambda e, b, p: e.update_memory(b, "m-7", _edited)),
    "invalidate": WritePath(_edit_setup, lambda e, b, p: e.update_memory(b, "m-7", lambda m: m,
                                                                          state="invalidated", reason="wrong")),
    "restore": WritePath(lambda e, b, w: _edit_setup(e, b, w, invalidated=True),
                         lambda e, b, p: e.update_memory(b, "m-7", _edited, state="valid")),
    "import": WritePath(_import_setup, lambda e, b, p: e.transfers.restore(Path(p["archive"]), record_on=f"{b}-new",
                                                                     target=f"{b}-new"),
                        banks=lambda b, p: [f"{b}-new"]),
    "merge": WritePath(_merge_setup, lambda e, b, p: e.transfers.merge(b, Path(p["archive"]), "replace")),
    "clone": WritePath(lambda e, b, w: _bank_of(e, b, 100), lambda e, b, p: e.transfers.clone(b, f"{b}-clone"),
                       banks=lambda b, p: [b, f"{b}-clone"]),
    "delete_bank": WritePath(lambda e, b, w: _bank_of(e, b, 120), lambda e, b, p: e.delete_bank(b)),
    "async_retain": WritePath(_submit, _work_queue, finish=_work_queue,
                              settings={"service_operation_chunk_items": 30, "service_operation_lease": 1}),
    # the same writes through the HTTP routes
    "http_replace": WritePath(_replace_setup, _replace, request=_post_replace),
    "http_edit": WritePath(_edit_setup, lambda e, b, p: e.update_memory(b, "m-7", _edited),
                           request=lambda c, b, p: c.patch(f"/v1/default/banks/{b}/memories/m-7",
                                                           json={"text": _edited_text})),
    "http_merge": WritePath(_merge_setup, lambda e, b, p: e.transfers.merge(b, Path(p["archive"]), "replace"),
                            request=_post_merge),
    "http_clear": WritePath(lambda e, b, w: _bank_of(e, b, 120), lambda e, b, p: e.clear_memories(b, "world"),
                            request=lambda c, b, p: c.delete(f"/v1/default/banks/{b}/memories",
                                                             params={"type": "world"})),
}


@dataclass
class _TwoSteps:
    """A replace written the way that is not whole: the new memories, then (another transaction) the
    forgetting of the stale ones. Only the test that shows the checks would see it uses this."""

    def first(self, bank: str) -> tuple[list[Any]]:
        return (_document(bank, _new_lines()),)

    async def write(self, engine: Any, bank: str, params: dict[str, Any]) -> None:
        await engine.retain(bank, *self.first(bank))
        ids = {m.id for m in self.first(bank)[0]}
        stale = [i for i in (await engine.document_memory_ids(bank, ["manual"]))["manual"] if i not in ids]
        await engine.forget(bank, stale)


TWO_STEP_REPLACE = _TwoSteps()


# --- the driver process ---------------------------------------------------------------------------------


def count_statements(engine: Any, at: int | None, seen: list[int]) -> Callable[[], None]:
    """Count the statements and commits the engine's connections run from now on (in ``seen[0]``);
    SIGKILL this process just before the ``at``-th. Returns what stops the counting."""

    def tick(*_: Any) -> None:
        seen[0] += 1
        if at is not None and seen[0] >= at:
            os.kill(os.getpid(), signal.SIGKILL)

    hooks = [(pool.sync_engine, name) for pool in (engine.db.engine, engine.db.direct)
             for name in ("before_cursor_execute", "commit")]
    for target, name in hooks:
        event.listen(target, name, tick)

    def stop() -> None:
        for target, name in hooks:
            event.remove(target, name, tick)

    return stop


async def drive(spec: dict[str, Any]) -> None:
    from .. import Engine, load_settings

    path = PATHS.get(spec["path"])
    settings = load_settings(database_url=spec["url"], reranker_provider="rrf", **(path.settings if path else {}))
    seen = [0]
    if path is not None and path.request is not None:
        settings = settings.model_copy(update={"service_operation_workers": 0})  # the app's queue stays idle
        await _drive_http(settings, path, spec, seen)
    else:
        async with Engine(settings) as engine:
            count_statements(engine, spec.get("kill_at"), seen)
            write = path.write if path is not None else TWO_STEP_REPLACE.write
            await write(engine, spec["bank"], spec["params"])
    print(json.dumps({"ack": True, "statements": seen[0]}), flush=True)


async def _drive_http(settings: Any, path: WritePath, spec: dict[str, Any], seen: list[int]) -> None:
    """The write as a request to the service app, served in this process (its lifespan opens the engine)."""
    import httpx

    from ..service.app import create_app

    app = create_app(settings)
    inner = app
    while not hasattr(inner, "router"):  # inside the ASGI layers around it: the Starlette app, with the lifespan
        inner = inner.app
    assert path.request is not None
    async with inner.router.lifespan_context(inner):
        while not inner.state.service.ready:
            if inner.state.service.failure:
                raise RuntimeError(inner.state.service.failure)
            await asyncio.sleep(0.05)
        count_statements(inner.state.engine, spec.get("kill_at"), seen)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fault",
                                     timeout=600) as client:
            response = await path.request(client, spec["bank"], spec["params"])
        if response.status_code >= 300:
            raise RuntimeError(f"{response.status_code}: {response.text[:2000]}")


if __name__ == "__main__":
    asyncio.run(drive(json.loads(sys.argv[1])))
