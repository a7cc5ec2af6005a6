"""Memory routes: retain, import, list, get, edit, delete, clear, tags and recall."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine import Engine
from ..engine.banks import validate_bank_id
from ..engine.memories import TIME_FIELDS
from ..engine.webhooks import Retained
from ..errors import DocumentChanged, QueryTooLong, RetainError
from ..jsonl import parse_datetime, parse_memory
from ..limits import key_problem
from ..recall.trace import phase_sink
from ..types import FACT_TYPES, Memory, TagsMatch, Usage
from . import async_retain, facts, retain_body
from .base import bank_of, body_of, choice_query, endpoint, engine_of, int_query, text_query, texts_query, wake_worker
from .errors import ServiceError
from .items import appended, build_memories, item_tags, placements
from .ops import Admission
from .schemas import UNSUPPORTED, ImportBody, RecallBody, RetainBody, UpdateMemoryBody
from .wire import answer

#: how many times a retain appending to a document numbers its items again after another write changed it
APPEND_ATTEMPTS = 5
#: upstream's unlimited (-1) source-fact budget, as a token count
UNLIMITED = 2**31 - 1


@dataclass(frozen=True)
class Stored:
    """What a synchronous retain stored: its items, the memories they became, what the model cost."""

    items: int
    memory_ids: list[str]
    #: tokens of the model's calls; ``None`` when the items were stored verbatim (no retain model)
    usage: Usage | None
    #: whether a webhook event was written with the memories
    told: bool

    def answer(self, bank_id: str) -> dict[str, Any]:
        """Upstream's RetainResponse, with ours: ``verbatim`` and the number of ``memories``."""
        return {"success": True, "bank_id": bank_id, "items_count": self.items, "async": False,
                "usage": None if self.usage is None else self.usage.as_json(), "verbatim": self.usage is None,
                "memories": len(self.memory_ids)}


async def retain_now(engine: Engine, bank_id: str, body: RetainBody) -> Stored:
    """Store a retain's items before answering, a re-sent document replacing its memories and an appended one
    numbered again when another write appended first; ``retain.completed`` for any webhook written with the
    memories, in their transaction. With a retain model, the items' facts are extracted first (nothing is
    written when that fails) and become the memories, all in one transaction."""
    retain_body.check_sync_size(body, engine.settings)
    now = datetime.now(UTC)
    found = await facts.extract(engine, bank_id, body, range(len(body.items)), now) if engine.facts.configured else None
    for attempt in range(1, APPEND_ATTEMPTS + 1):
        existing = await engine.document_memory_ids(bank_id, appended(body))
        if found is None:
            memories, replaced = build_memories(bank_id, body, existing)
            events = Retained(bank_id, [(m.document_id, m.tags) for m in memories])
        else:
            where, replaced = placements(bank_id, body, existing)
            memories = [m for ms in facts.fact_memories(bank_id, body, where, found, now) for m in ms]
            events = Retained(bank_id, [(document, item_tags(body, index)) for index, document, _ in where])
        try:
            await engine.retain(bank_id, memories, progress=False, replace_documents=replaced,
                                document_sizes={d: len(ids) for d, ids in existing.items()}, within=events)
            break
        except DocumentChanged:  # another write appended to the same document first: number again
            if attempt == APPEND_ATTEMPTS:
                raise
    return Stored(len(body.items), [m.id for m in memories], None if found is None else found.usage,
                  bool(events.recorded))


@endpoint
async def retain(request: Request) -> Response:
    """Store the items, all or nothing: verbatim, or as the facts the retain model finds in them; a re-sent
    document replaces its memories. With ``async: true`` the retain is queued as an operation and the
    answer carries its id."""
    bank_id = bank_of(request)
    engine = engine_of(request)
    body = await retain_body.retain_body(request, engine.settings)
    if isinstance(body, retain_body.Queued):
        return await async_retain.submit(request, engine, bank_id, body)
    stored = await retain_now(engine, bank_id, body)
    if stored.told:
        wake_worker(request)
    return answer(request, "RetainResponse", stored.answer(bank_id))


@endpoint
async def import_memories(request: Request) -> Response:
    """Ours: memories in this project's JSONL format (ids, types, dates, links), each naming its bank;
    all banks in one transaction, as ``hindsight-recall retain FILE`` does."""

    body: ImportBody = await body_of(request, ImportBody)
    batches: dict[str, list[Any]] = {}
    lines: dict[str, list[int]] = {}
    for number, obj in enumerate(body.memories, start=1):
        bank, memory = parse_memory(obj, number)
        if not bank:
            raise ServiceError(422, "invalid_memory", f"line {number}: bank: every memory needs a 'bank' field")
        batches.setdefault(validate_bank_id(bank), []).append(memory)
        lines.setdefault(bank, []).append(number)
    stats = await engine_of(request).retain_many(batches, lines=lines, progress=False)
    return answer(request, None, {"success": True, "memories": stats.memories, "banks": stats.banks,
                         "seconds": round(stats.seconds, 3), "links": stats.links})


def list_item(memory: dict[str, Any]) -> dict[str, Any]:
    """A memory in upstream's list-row shape (entities as one comma-joined string)."""
    return {**memory, "fact_type": memory["type"], "context": memory["context"] or "",
            "date": memory["occurred_start"] or memory["mentioned_at"] or "",
            "entities": ", ".join(memory["entities"]), "state": "valid",
            "source_memory_ids": memory["source_ids"]}


def invalidated_item(record: dict[str, Any]) -> dict[str, Any]:
    """An invalidated memory (as :meth:`~hindsight_recall.engine.memories.Memories.find` reads it) in the list-row
    shape."""
    line = record["memory"]
    memory = {"id": line["id"], "text": line["text"], "type": line.get("type", "world"),
              "context": line.get("context"), "occurred_start": line.get("occurred_start"),
              "occurred_end": line.get("occurred_end"), "mentioned_at": line.get("mentioned_at"),
              "tags": line.get("tags", []), "metadata": line.get("metadata", {}),
              "document_id": line.get("document_id"), "chunk_id": None, "proof_count": line.get("proof_count", 1),
              "entities": line.get("entities", []), "source_ids": line.get("sources", []),
              "created_at": None, "updated_at": record["invalidated_at"]}
    return {**list_item(memory), "state": "invalidated", "invalidation_reason": record["reason"],
            "invalidated_at": record["invalidated_at"]}


def date_query(request: Request, name: str) -> datetime | None:
    """An ISO-8601 query parameter (``Z`` allowed, naive read as UTC): 400 naming it when unreadable."""
    value = text_query(request, name, max_chars=64)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ServiceError(400, "invalid_request", f"{name}: {value!r} is not an ISO-8601 date such as "
                                                   "2024-05-01T12:00:00Z") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def date_range(request: Request) -> tuple[datetime | None, datetime | None]:
    """``start_date`` and ``end_date`` (:func:`date_query`); 400 unless the start comes before the end."""
    start, end = date_query(request, "start_date"), date_query(request, "end_date")
    if start is not None and end is not None and start >= end:
        raise ServiceError(400, "invalid_request", "start_date: must be before end_date")
    return start, end


def _entity_query(request: Request) -> uuid.UUID | None:
    value = text_query(request, "entity_id", max_chars=64)
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ServiceError(400, "invalid_request", f"entity_id: {value!r} is not a UUID") from None


@endpoint
async def list_memories(request: Request) -> Response:
    """A page of the bank's memories with upstream's filters; a bank that does not exist (say, just
    deleted) lists no memories, as upstream's clients expect. ``state=invalidated`` lists the
    invalidated ones (type and ``q`` filter them; they have no links, entities rows or chunks)."""
    bank_id = bank_of(request)
    fact_type = choice_query(request, "type", FACT_TYPES)
    if text_query(request, "consolidation_state") is not None:
        raise ServiceError(400, "unsupported_field", "consolidation_state: hindsight-recall does not consolidate "
                                                     "memories, so none has a consolidation state")
    state = choice_query(request, "state", ("valid", "invalidated"), "valid")
    limit, offset = int_query(request, "limit", 100), int_query(request, "offset", 0)
    time_field = choice_query(request, "time_field", TIME_FIELDS)
    start, end = date_range(request)
    filters: dict[str, Any] = dict(
        fact_type=fact_type, search=text_query(request, "q"), document_id=text_query(request, "document_id"),
        entity_id=_entity_query(request), tags=texts_query(request, "tags"),
        tags_match=choice_query(request, "tags_match", tuple(m.value for m in TagsMatch), "any"),
        time_field=time_field, start=start, end=end, limit=limit, offset=offset)
    engine = engine_of(request)
    if state == "invalidated":
        records, total = await engine.memories.invalidated(bank_id, fact_type=fact_type, search=filters["search"],
                                                          limit=limit, offset=offset)
        rows = [invalidated_item(r) for r in records]
    else:
        items, total = await engine.list_memories(bank_id, **filters)
        rows = [list_item(m) for m in items]
    return answer(request, "ListMemoryUnitsResponse", {"items": rows, "total": total, "limit": limit, "offset": offset})


def _memory_id(request: Request) -> str:
    memory_id: str = request.path_params["memory_id"]
    if problem := key_problem(memory_id):
        raise ServiceError(400, "invalid_request", f"memory_id: {problem}")
    return memory_id


def _not_found(bank_id: str, memory_id: str) -> ServiceError:
    return ServiceError(404, "memory_not_found", f"Memory unit '{memory_id}' not found in bank {bank_id!r}")


@endpoint
async def get_memory(request: Request) -> Response:
    bank_id, memory_id = bank_of(request), _memory_id(request)
    return answer(request, None, await _current(engine_of(request), bank_id, memory_id))


async def _current(engine: Engine, bank_id: str, memory_id: str) -> dict[str, Any]:
    """The memory as ``GET`` answers it, valid or invalidated; 404 when it is neither."""
    found = await engine.memories.find(bank_id, memory_id)
    if found is None:
        raise _not_found(bank_id, memory_id)
    state, memory = found
    return {**(list_item(memory) if state == "valid" else invalidated_item(memory)), "history": []}


@endpoint
async def memory_history(request: Request) -> Response:
    """Upstream's observation history: the changes consolidation made to an observation. Nothing here
    consolidates and an edit keeps no snapshot, so every memory's history is empty; 404 for no memory."""
    bank_id, memory_id = bank_of(request), _memory_id(request)
    if await engine_of(request).get_memory(bank_id, memory_id) is None:
        raise _not_found(bank_id, memory_id)
    return answer(request, None, [])


def edit_from(body: UpdateMemoryBody) -> Callable[[Memory], Memory]:
    """The body's changes as an edit of the stored memory: the fields given, dates cleared by ``""``
    or ``null``. The body is checked here, before anything is read (400 naming the field)."""
    changes: dict[str, Any] = {}
    try:
        if body.text is not None:
            if not body.text.strip():
                raise ServiceError(400, "invalid_request", "text: must not be empty")
            changes["text"] = body.text
        if body.context is not None:
            changes["context"] = body.context or None
        for name in ("occurred_start", "occurred_end", "mentioned_at"):
            if name in body.model_fields_set:
                value = getattr(body, name)
                changes[name] = parse_datetime(value, name) if value else None
    except RetainError as exc:
        raise ServiceError(400, "invalid_request", f"{exc.field}: {exc.why}") from None
    if body.fact_type is not None:
        changes["type"] = body.fact_type
    if body.entities is not None:
        changes["entities"] = tuple(dict.fromkeys(e.strip() for e in body.entities if e.strip()))
    if body.tags is not None:
        changes["tags"] = tuple(dict.fromkeys(t.strip() for t in body.tags if t.strip()))
    return lambda memory: dataclasses.replace(memory, **changes)


@endpoint
async def update_memory(request: Request) -> Response:
    """Edit a memory (upstream's ``update_memory``): text, context, dates, type, entities and (ours) tags;
    ``state`` invalidates it (recall no longer sees it) or restores it. One transaction: see
    :meth:`~hindsight_recall.engine.Engine.update_memory`. Observations are refused (as upstream: they
    are derived)."""
    bank_id, memory_id = bank_of(request), _memory_id(request)
    body: UpdateMemoryBody = await body_of(request, UpdateMemoryBody)
    engine = engine_of(request)
    edit = edit_from(body)  # the body's own errors first, before anything is read
    try:
        await engine.update_memory(bank_id, memory_id, edit, state=body.state, reason=body.reason)
    except RetainError as exc:
        raise ServiceError(400, "invalid_request", f"{exc.field}: {exc.why}") from None
    return answer(request, None, await _current(engine, bank_id, memory_id))


@endpoint
async def clear_memories(request: Request) -> Response:
    """Delete the bank's memories, or those of one ``type``, with their links and the chunks and entities
    no remaining memory uses; the bank and its profile and settings stay. An unknown bank clears none."""
    bank_id = bank_of(request)
    fact_type = choice_query(request, "type", FACT_TYPES)
    deleted = await engine_of(request).clear_memories(bank_id, fact_type)
    scope = f" of type '{fact_type}'" if fact_type else ""
    return answer(request, "DeleteResponse", {
        "success": True, "message": f"Cleared {deleted} memory unit(s){scope} from bank '{bank_id}'",
        "deleted_count": deleted})


@endpoint
async def list_tags(request: Request) -> Response:
    """The bank's tags with how many memories carry each (``q``: a pattern, ``*`` the wildcard). Mental
    models are not kept here, so ``source=mental_models`` lists none. 404 for an unknown bank, as upstream."""
    bank_id = bank_of(request)
    pattern = text_query(request, "q")
    source = choice_query(request, "source", ("memories", "mental_models"), "memories")
    limit, offset = int_query(request, "limit", 100), int_query(request, "offset", 0)
    items, total = await engine_of(request).memories.tags(bank_id, pattern=pattern, limit=limit, offset=offset,
                                                          of_mental_models=source == "mental_models")
    return answer(request, "ListTagsResponse", {"items": items, "total": total, "limit": limit, "offset": offset})


@endpoint
async def delete_memory(request: Request) -> Response:
    """Ours (upstream has no such route): forget one memory with its links and unused chunks."""
    bank_id, memory_id = bank_of(request), _memory_id(request)
    if not await engine_of(request).forget(bank_id, [memory_id]):
        raise _not_found(bank_id, memory_id)
    return answer(request, None, {"success": True, "message": f"Memory unit '{memory_id}' deleted", "deleted_count": 1})


def recall_options(body: RecallBody) -> dict[str, Any]:
    """Every field of upstream's RecallRequest as an :meth:`Engine.recall` option."""
    if body.tag_groups is not None:
        raise ServiceError(400, "unsupported_field", f"tag_groups: {UNSUPPORTED['tag_groups']}")
    include = body.include
    facts = include.source_facts
    options: dict[str, Any] = {
        "types": body.types, "budget": body.budget, "max_tokens": body.max_tokens, "trace": body.trace,
        "query_timestamp": body.query_timestamp, "tags": body.tags, "tags_match": body.tags_match,
        "prefer_observations": bool(body.prefer_observations),
        "include_entities": include.entities.max_tokens if include.entities else None,
        "include_chunks": include.chunks.max_tokens if include.chunks else None,
        "include_source_facts": None if facts is None else UNLIMITED if facts.max_tokens == -1 else facts.max_tokens,
        "source_facts_per_observation": facts.max_tokens_per_observation if facts else -1,
        "min_scores": body.min_scores.model_dump() if body.min_scores else None,
        "temporal_window": (body.temporal_window.start, body.temporal_window.end) if body.temporal_window else None,
        "limit": body.limit,
    }
    if body.reranking is not None:
        options["reranking"] = body.reranking
    return options


@endpoint
async def recall(request: Request) -> Response:
    bank_id = bank_of(request)
    body: RecallBody = await body_of(request, RecallBody)
    engine = engine_of(request)
    allowed = engine.settings.recall_max_query_tokens
    if allowed and engine.tokens.count(body.query) > allowed:  # the library cuts it; the HTTP edge refuses
        raise QueryTooLong(engine.tokens.count(body.query), allowed)
    options = recall_options(body)
    service_metrics = request.app.state.metrics
    async with Admission(request.app.state.service, engine.settings, service_metrics):
        token = phase_sink.set(service_metrics.record_phases)
        try:
            result = await engine.recall(bank_id, body.query, **options)
        finally:
            phase_sink.reset(token)
    return answer(request, "RecallResponse", result)


def routes(banks_path: str) -> list[Route]:
    """Upstream's memory paths first, ours after; ``list`` and ``recall`` before ``{memory_id}``."""
    return [
        Route(f"{banks_path}/memories", retain, methods=["POST"]),
        Route(f"{banks_path}/memories/list", list_memories, methods=["GET"]),
        Route(f"{banks_path}/memories/recall", recall, methods=["POST"]),
        Route(f"{banks_path}/memories", clear_memories, methods=["DELETE"]),
        Route(f"{banks_path}/tags", list_tags, methods=["GET"]),
        Route(f"{banks_path}/memories/{{memory_id}}", get_memory, methods=["GET"]),
        Route(f"{banks_path}/memories/{{memory_id}}", update_memory, methods=["PATCH"]),
        Route(f"{banks_path}/memories/{{memory_id}}", delete_memory, methods=["DELETE"]),
        Route(f"{banks_path}/memories/{{memory_id}}/history", memory_history, methods=["GET"]),
        Route("/v1/default/memories/import", import_memories, methods=["POST"]),
    ]
