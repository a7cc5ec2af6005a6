"""Retains as queued operations: ``async: true`` queues the request and answers at once; a worker runs it.

A queued retain runs in chunks of whole documents, about SERVICE_OPERATION_CHUNK_ITEMS items each,
each chunk one transaction that records its progress too; with a retain model, a chunk's facts are
extracted just before its transaction, so a chunk that committed is never extracted again. Running it
again (after a crash, a shutdown or a retry) writes the same memories: documents without an id get ids
derived from the operation, and what the first run found of the documents it appends to is kept in the
operation's plan, so a resumed run neither duplicates nor loses anything. The request is checked whole
before it is queued (:mod:`.retain_body`), and a size limit keeps synchronous retains short
(SERVICE_MAX_SYNC_RETAIN_ITEMS).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..engine.operations import Operation, chained
from ..engine.webhooks import Retained
from ..types import Usage
from . import facts
from .base import wake_worker
from .errors import ServiceError
from .items import appended, build_memory, item_tags, placements
from .retain_body import Queued
from .schemas import RetainBody
from .wire import answer

#: the operation type of a queued retain (upstream's name for the work of a retain)
RETAIN = "retain"


async def submit(request: Request, engine: Engine, bank_id: str, body: Queued) -> Response:
    """Queue the retain and answer with its operation id (see :func:`queue`) and wake the worker."""
    try:
        payload = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise ServiceError(400, "malformed_json", "the request body is not UTF-8") from None
    queued = await queue(engine, bank_id, body, payload)
    wake_worker(request)
    return answer(request, "RetainResponse", queued)


async def queue(engine: Engine, bank_id: str, body: Queued, payload: str) -> dict[str, Any]:
    """Queue the retain whose request is ``payload`` (what the worker reads; ``body``, what
    :func:`~.retain_body.read` found in it) and answer with its operation id; a client-chosen id already
    used by this bank's retain answers that operation again (nothing new is queued), by anything else 409.
    The MCP tools queue through this too."""
    operation_id = body.operation_id or uuid.uuid4()
    replay = await engine.operations.submit(bank_id, operation_id, RETAIN, payload, body.items, body.document_id,
                                            chosen=body.operation_id is not None)
    items = replay if replay is not None else body.items
    return {"success": True, "bank_id": bank_id, "items_count": items, "async": True,
            "operation_id": str(operation_id), "operation_ids": None, "usage": None}


def name_documents(body: RetainBody, operation_id: uuid.UUID) -> None:
    """Give items without a document id the id a synchronous retain would generate, derived from the
    operation: all of them one document when no item names one, else one each."""
    shared = not any(item.document_id for item in body.items)
    for index, item in enumerate(body.items):
        if not item.document_id:
            item.document_id = str(uuid.uuid5(operation_id, "shared" if shared else f"item-{index}"))


def spans(where: Sequence[tuple[int, str, int]], chunk_items: int) -> list[tuple[int, int]]:
    """``where`` (see :func:`~.items.placements`: each document's memories together) cut into runs of
    whole documents of at most ``chunk_items`` memories, unless one document alone has more."""
    out: list[tuple[int, int]] = []
    start = end = 0
    while end < len(where):
        document_end = end
        while document_end < len(where) and where[document_end][1] == where[end][1]:
            document_end += 1
        if end > start and document_end - start > chunk_items:
            out.append((start, end))
            start = end
        end = document_end
    if end > start:
        out.append((start, end))
    return out


async def run(engine: Engine, op: Operation, worker_id: str, chunk_items: int) -> tuple[dict[str, Any], int]:
    """Do the queued retain from where it stopped, as ``worker_id``; returns what goes in the operation's
    result, and how many webhook events this run wrote.

    Each run of whole documents (:func:`spans`) is one transaction, and the progress recorded with it
    is in that transaction too, and so are its items' ``retain.completed`` events (each item's event id
    derived from the operation, the same in every run): a document is never half written, nor a run
    written and not counted or not told of. Raises :class:`~hindsight_recall.engine.operations.Lost` once
    the operation is no longer the worker's.
    """
    queue = engine.operations
    payload, plan = await queue.payload(op)
    if payload is None:
        raise ValueError("the operation has no stored request")
    body = RetainBody.model_validate_json(payload)
    name_documents(body, op.operation_id)
    if plan is None:
        named = sorted({item.document_id for item in body.items if item.document_id})
        found = await engine.document_memory_ids(op.bank_id, named)
        # what each document had before: the appended ones' memories (placed after them), and every
        # document's count (its history: a replaced document's memories were removed)
        plan = {"existing": {d: found.get(d, []) for d in appended(body)},
                "before": {d: len(found.get(d, [])) for d in named}}
        await queue.record_plan(op, worker_id, plan)
    existing_ids: Mapping[str, list[str]] = plan.get("existing", {})
    where, replaced = placements(op.bank_id, body, existing_ids)
    done, removed, told, written, usage = min(op.processed, len(where)), 0, 0, 0, Usage()
    verbatim = not engine.facts.configured
    await queue.progress(op, worker_id, "retaining", done)
    for start, end in spans(where, chunk_items):
        if end <= done:  # committed by an earlier run (a run stopped inside a document redoes it whole)
            continue
        span = where[start:end]
        if verbatim:
            part = [build_memory(op.bank_id, body, *place, op.created_at) for place in span]
        else:  # the chunk's facts, asked for now: a chunk committed before is never asked for again
            extracted = await facts.extract(engine, op.bank_id, body, [index for index, _, _ in span], op.created_at)
            part = [m for ms in facts.fact_memories(op.bank_id, body, span, extracted, op.created_at) for m in ms]
            usage += extracted.usage
        documents = sorted({document for _, document, _ in span} & set(replaced))
        counted = queue.progress_within(op, worker_id, "retaining", end)
        events = Retained(op.bank_id, [(document, item_tags(body, index)) for index, document, _ in span],
                          str(op.operation_id), [event_id(op.operation_id, index) for index, _, _ in span])
        stats = await engine.retain_many({op.bank_id: part}, progress=False,
                                         replace_documents={op.bank_id: documents}, within=chained(counted, events))
        removed += stats.removed
        told += events.recorded
        written += len(part)
    result: dict[str, Any] = {"items_count": len(body.items), "memories": len(where) if verbatim else written,
                              "replaced_memories_removed": removed, "verbatim": verbatim}
    if not verbatim:
        result["usage"] = usage.as_json()
    return result, told


def event_id(operation_id: uuid.UUID, index: int) -> uuid.UUID:
    """The ``retain.completed`` event id of a queued retain's item ``index``: the same in every run of it."""
    return uuid.uuid5(operation_id, f"retain.completed/{index}")
