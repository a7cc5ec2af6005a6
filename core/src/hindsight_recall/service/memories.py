"""Memory routes: retain, import, list, get, delete and recall."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import BankNotFound, QueryTooLong
from ..recall.trace import phase_sink
from ..store import banks, listing
from ..types import FACT_TYPES
from . import async_retain
from .base import bank_of, body_of, endpoint, engine_of, int_query
from .errors import ServiceError
from .items import build_memories, check_supported
from .ops import Admission
from .schemas import UNSUPPORTED, ImportBody, RecallBody, RetainBody

#: upstream's unlimited (-1) source-fact budget, as a token count
UNLIMITED = 2**31 - 1


@endpoint
async def retain(request: Request) -> Response:
    """Store the items verbatim, all or nothing; a re-sent document replaces its memories. With
    ``async: true`` the retain is queued as an operation and the answer carries its id."""
    bank_id = bank_of(request)
    body: RetainBody = await body_of(request, RetainBody)
    check_supported(body)
    engine = engine_of(request)
    if body.async_:
        return await async_retain.submit(request, engine, bank_id, body)
    async_retain.check_sync_size(body, engine.settings)
    named = {item.document_id for item in body.items if item.document_id}
    existing: dict[str, list[str]] = {}
    if named:
        async with engine.db.connect() as conn:
            for document_id in named:
                existing[document_id] = await listing.document_memory_ids(conn, bank_id, document_id)
    memories, stale = build_memories(bank_id, body, existing)
    if memories:
        await engine.retain(bank_id, memories, progress=False)
    if stale:
        await engine.forget(bank_id, stale)
    return JSONResponse({"success": True, "bank_id": bank_id, "items_count": len(memories), "async": False,
                         "usage": None})


@endpoint
async def import_memories(request: Request) -> Response:
    """Ours: memories in this project's JSONL format (ids, types, dates, links), each naming its bank;
    all banks in one transaction, as ``hindsight-recall retain FILE`` does."""
    from ..retain.memories import parse_memory

    body: ImportBody = await body_of(request, ImportBody)
    batches: dict[str, list[Any]] = {}
    lines: dict[str, list[int]] = {}
    for number, obj in enumerate(body.memories, start=1):
        bank, memory = parse_memory(obj, number)
        if not bank:
            raise ServiceError(422, "invalid_memory", f"line {number}: bank: every memory needs a 'bank' field")
        batches.setdefault(banks.validate_bank_id(bank), []).append(memory)
        lines.setdefault(bank, []).append(number)
    stats = await engine_of(request).retain_many(batches, lines=lines, progress=False)
    return JSONResponse({"success": True, "memories": stats.memories, "banks": stats.banks,
                         "seconds": round(stats.seconds, 3), "links": stats.links})


def _list_item(memory: dict[str, Any]) -> dict[str, Any]:
    """A memory in upstream's list-row shape (entities as one comma-joined string)."""
    return {**memory, "fact_type": memory["type"], "context": memory["context"] or "",
            "date": memory["occurred_start"] or memory["mentioned_at"] or "",
            "entities": ", ".join(memory["entities"]), "state": "valid",
            "source_memory_ids": memory["source_ids"]}


@endpoint
async def list_memories(request: Request) -> Response:
    bank_id = bank_of(request)
    fact_type = request.query_params.get("type") or None
    if fact_type is not None and fact_type not in FACT_TYPES:
        raise ServiceError(422, "invalid_request", f"type: {fact_type!r} is not one of {', '.join(FACT_TYPES)}")
    limit, offset = int_query(request, "limit", 100), int_query(request, "offset", 0)
    engine = engine_of(request)
    if await engine.bank_stats(bank_id) is None:
        raise BankNotFound(bank_id)
    items, total = await engine.list_memories(
        bank_id, fact_type=fact_type, search=request.query_params.get("q") or None,
        document_id=request.query_params.get("document_id") or None, limit=limit, offset=offset)
    return JSONResponse({"items": [_list_item(m) for m in items], "total": total, "limit": limit, "offset": offset})


@endpoint
async def get_memory(request: Request) -> Response:
    bank_id = bank_of(request)
    memory_id = request.path_params["memory_id"]
    found = await engine_of(request).get_memory(bank_id, memory_id)
    if found is None:
        raise ServiceError(404, "memory_not_found", f"Memory unit '{memory_id}' not found in bank {bank_id!r}")
    return JSONResponse({**_list_item(found), "history": []})


@endpoint
async def delete_memory(request: Request) -> Response:
    """Ours (upstream has no such route): forget one memory with its links and unused chunks."""
    bank_id = bank_of(request)
    memory_id = request.path_params["memory_id"]
    if not await engine_of(request).forget(bank_id, [memory_id]):
        raise ServiceError(404, "memory_not_found", f"Memory unit '{memory_id}' not found in bank {bank_id!r}")
    return JSONResponse({"success": True, "message": f"Memory unit '{memory_id}' deleted", "deleted_count": 1})


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
    with Admission(request.app.state.service, engine.settings, service_metrics):
        token = phase_sink.set(service_metrics.record_phases)
        try:
            result = await engine.recall(bank_id, body.query, **options)
        finally:
            phase_sink.reset(token)
    return JSONResponse(result)


def routes(banks_path: str) -> list[Route]:
    """Upstream's memory paths first, ours after; ``list`` and ``recall`` before ``{memory_id}``."""
    return [
        Route(f"{banks_path}/memories", retain, methods=["POST"]),
        Route(f"{banks_path}/memories/list", list_memories, methods=["GET"]),
        Route(f"{banks_path}/memories/recall", recall, methods=["POST"]),
        Route(f"{banks_path}/memories/{{memory_id}}", get_memory, methods=["GET"]),
        Route(f"{banks_path}/memories/{{memory_id}}", delete_memory, methods=["DELETE"]),
        Route("/v1/default/memories/import", import_memories, methods=["POST"]),
    ]
