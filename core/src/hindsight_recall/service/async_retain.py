"""Retains as queued operations: ``async: true`` queues the request and answers at once; a worker runs it.

A queued retain runs in chunks of whole documents, about SERVICE_OPERATION_CHUNK_ITEMS memories each,
each chunk one transaction that records its progress too. Running it again (after a crash, a shutdown
or a retry) writes the same memories: documents without an id get ids derived from the operation, and
what the first run found of the documents it appends to is kept in the operation's plan, so a resumed
run neither duplicates nor loses anything. A size limit keeps synchronous retains short (SERVICE_MAX_SYNC_RETAIN_ITEMS).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..engine.operations import Operation, chained
from ..engine.webhooks import Retained
from ..errors import RetainError
from ..jsonl import parse_datetime
from ..settings import Settings
from .base import body_of, wake_worker
from .errors import ServiceError
from .items import appended, build_memory, item_tags, item_text, placements
from .schemas import RetainBody
from .wire import answer

#: the operation type of a queued retain (upstream's name for the work of a retain)
RETAIN = "retain"


class _Size(BaseModel):
    """Just enough of a retain body to know how big it is: its items unread, and whether it is queued."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    items: list[Any] = Field(default_factory=list)
    async_: bool = Field(default=False, alias="async")


async def retain_body(request: Request, settings: Settings) -> RetainBody:
    """The retain's body, validated; a synchronous one with more items than a synchronous retain takes is
    refused (413) from its item count, before any item is validated (for 400,000 items: a fifth of a
    second instead of seconds)."""
    raw = await request.body()
    try:
        size = _Size.model_validate_json(raw or b"{}")
    except ValidationError:
        size = None  # the full validation names what is wrong
    if size is not None and not size.async_:
        _refuse_sync(len(size.items), settings)
    return await body_of(request, RetainBody)  # type: ignore[no-any-return]


def _refuse_sync(items: int, settings: Settings) -> None:
    limit = settings.service_max_sync_retain_items
    if items > limit:
        raise ServiceError(413, "too_many_items", f"a synchronous retain takes at most {limit} items "
                           f"(HINDSIGHT_API_SERVICE_MAX_SYNC_RETAIN_ITEMS); this one has {items}: send "
                           "it with \"async\": true to queue it as an operation")


def check_sync_size(body: RetainBody, settings: Settings) -> None:
    """Refuse (413) a synchronous retain too large to answer promptly, pointing to ``async: true``."""
    _refuse_sync(len(body.items), settings)


def precheck(body: RetainBody) -> None:
    """The checks of a synchronous retain that are cheap enough to answer at once (content, dates), with
    its messages; whatever else is wrong with an item fails the operation, naming the item."""
    for index, item in enumerate(body.items):
        if not item_text(item, index).strip():
            raise RetainError(None, f"items.{index}.content", "must not be empty")
        stamp = item.timestamp
        if isinstance(stamp, str) and stamp.strip().lower() != "unset":
            parse_datetime(stamp, f"items.{index}.timestamp")


def operation_uuid(value: str, field: str = "operation_id") -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise ServiceError(422, "invalid_request", f"{field}: must be a valid UUID, got {value!r}") from None


async def submit(request: Request, engine: Engine, bank_id: str, body: RetainBody) -> Response:
    """Queue the retain and answer with its operation id (see :func:`queue`) and wake the worker."""
    chosen = operation_uuid(body.operation_id) if body.operation_id is not None else None
    precheck(body)
    try:
        payload = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise ServiceError(400, "malformed_json", "the request body is not UTF-8") from None
    queued = await queue(engine, bank_id, body, payload, chosen)
    wake_worker(request)
    return answer(request, "RetainResponse", queued)


async def queue(engine: Engine, bank_id: str, body: RetainBody, payload: str, chosen: uuid.UUID | None
                ) -> dict[str, Any]:
    """Queue the retain ``body`` (``payload``, its JSON, is what the worker reads) and answer with its operation
    id; a client-``chosen`` id already used by this bank's retain answers that operation again (nothing new
    is queued), by anything else 409. The MCP tools queue through this too."""
    named = {item.document_id for item in body.items if item.document_id}
    document_id = next(iter(named)) if len(named) == 1 and all(i.document_id for i in body.items) else None
    operation_id = chosen or uuid.uuid4()
    replay = await engine.operations.submit(bank_id, operation_id, RETAIN, payload, len(body.items), document_id,
                                            chosen=chosen is not None)
    items = replay if replay is not None else len(body.items)
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
    done, removed, told = min(op.processed, len(where)), 0, 0
    await queue.progress(op, worker_id, "retaining", done)
    for start, end in spans(where, chunk_items):
        if end <= done:  # committed by an earlier run (a run stopped inside a document redoes it whole)
            continue
        part = [build_memory(op.bank_id, body, *place, op.created_at) for place in where[start:end]]
        documents = sorted({document for _, document, _ in where[start:end]} & set(replaced))
        counted = queue.progress_within(op, worker_id, "retaining", end)
        events = Retained(op.bank_id, [(document, item_tags(body, index)) for index, document, _ in where[start:end]],
                          str(op.operation_id), [event_id(op.operation_id, index) for index, _, _ in where[start:end]])
        stats = await engine.retain_many({op.bank_id: part}, progress=False,
                                         replace_documents={op.bank_id: documents}, within=chained(counted, events))
        removed += stats.removed
        told += events.recorded
    return {"items_count": len(body.items), "memories": len(where), "replaced_memories_removed": removed}, told


def event_id(operation_id: uuid.UUID, index: int) -> uuid.UUID:
    """The ``retain.completed`` event id of a queued retain's item ``index``: the same in every run of it."""
    return uuid.uuid5(operation_id, f"retain.completed/{index}")
