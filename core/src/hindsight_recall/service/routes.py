"""The memory routes: banks, retain, list, get, delete and recall, in upstream Hindsight 1.1.0's shapes."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..engine import Engine
from ..errors import BankNotFound, QueryTooLong
from ..recall.trace import phase_sink
from ..store import banks, listing
from ..types import FACT_TYPES
from .errors import ServiceError, respond_to
from .items import build_memories, check_supported
from .ops import Admission
from .schemas import BANK_TOGGLES, UNSUPPORTED, BankConfigBody, CreateBankBody, ImportBody, RecallBody, RetainBody

Handler = Callable[[Request], Awaitable[Response]]
#: the disposition upstream gives a bank nobody configured
DISPOSITION = {"skepticism": 3, "literalism": 3, "empathy": 3}
#: upstream's unlimited (-1) source-fact budget, as a token count
UNLIMITED = 2**31 - 1


def endpoint(handler: Handler) -> Handler:
    """Answer any exception of ``handler`` as the JSON error for it (never Starlette's plain-text 500)."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            return respond_to(exc, request.url.path)

    return wrapped


async def body_of(request: Request, model: type[BaseModel]) -> Any:
    """The request body parsed and validated as ``model``: 400 for malformed JSON, 422 for bad fields."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise ServiceError(400, "malformed_json", "the request body is not valid JSON") from None
        raise


def _int_query(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not value.isdigit():
        raise ServiceError(422, "invalid_request", f"{name}: must be a non-negative integer, got {value!r}")
    return int(value)


def engine_of(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


def bank_of(request: Request) -> str:
    return banks.validate_bank_id(request.path_params["bank_id"])


def _profile(bank_id: str, ignored: list[str]) -> JSONResponse:
    headers = {"X-Hindsight-Ignored-Fields": ",".join(ignored)} if ignored else None
    return JSONResponse({"bank_id": bank_id, "name": bank_id, "disposition": DISPOSITION, "mission": "",
                         "background": ""}, headers=headers)


@endpoint
async def list_banks(request: Request) -> Response:
    found = await engine_of(request).list_banks()
    search = (request.query_params.get("q") or "").lower()
    if search:
        found = [b for b in found if search in b["bank_id"].lower()]
    limit, offset = _int_query(request, "limit", 100), _int_query(request, "offset", 0)
    page = [{"bank_id": b["bank_id"], "name": b["bank_id"], "disposition": DISPOSITION, "mission": None,
             "created_at": b["created_at"], "updated_at": None, "fact_count": b["memories"]}
            for b in found[offset:offset + limit]]
    return JSONResponse({"banks": page, "total": len(found), "limit": limit, "offset": offset})


@endpoint
async def get_bank(request: Request) -> Response:
    bank_id = bank_of(request)
    if await engine_of(request).bank_stats(bank_id) is None:
        raise BankNotFound(bank_id)
    return _profile(bank_id, [])


@endpoint
async def put_bank(request: Request) -> Response:
    """Create (or update) a bank. The recall toggles become the bank's settings; profile and LLM fields
    are accepted and named in ``X-Hindsight-Ignored-Fields`` (nothing here reads them)."""
    bank_id = bank_of(request)
    body: CreateBankBody = await body_of(request, CreateBankBody)
    given = body.model_dump(exclude_none=True)
    toggles = {k: v for k, v in given.items() if k in BANK_TOGGLES}
    engine = engine_of(request)
    async with engine.db.connect() as conn:
        await banks.ensure_bank(conn, bank_id)
        if toggles:
            await banks.set_bank_config(conn, bank_id, toggles)
    return _profile(bank_id, sorted(set(given) - set(toggles)))


@endpoint
async def delete_bank(request: Request) -> Response:
    bank_id = bank_of(request)
    engine = engine_of(request)
    stats = await engine.bank_stats(bank_id)
    if stats is None or not await engine.delete_bank(bank_id):
        raise BankNotFound(bank_id)
    return JSONResponse({"success": True, "message": f"Bank '{bank_id}' and all associated data deleted successfully",
                         "deleted_count": stats["memories"] + stats["entities"] + stats["documents"]})


@endpoint
async def bank_stats(request: Request) -> Response:
    bank_id = bank_of(request)
    stats = await engine_of(request).bank_stats(bank_id)
    if stats is None:
        raise BankNotFound(bank_id)
    by_type = {t: stats["by_type"].get(t, 0) for t in FACT_TYPES}
    return JSONResponse({
        "bank_id": bank_id, "total_nodes": stats["memories"], "total_links": stats["links"],
        "total_documents": stats["documents"], "nodes_by_fact_type": by_type, "links_by_link_type": {},
        "links_by_fact_type": {}, "links_breakdown": {}, "pending_operations": 0, "failed_operations": 0,
        "operations_by_status": {}, "pending_consolidation": 0, "failed_consolidation": 0,
        "total_observations": by_type["observation"],
        # ours: what the bank holds in this project's own terms
        "entities": stats["entities"], "chunks": stats["chunks"],
    })


async def _config(request: Request, change: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Response:
    """The bank's settings and overrides, after storing ``change(overrides)`` when given; 404 for no bank."""
    bank_id = bank_of(request)
    engine = engine_of(request)
    async with engine.db.connect() as conn:
        overrides = await banks.bank_config(conn, bank_id)
        if overrides is None:
            raise BankNotFound(bank_id)
        if change is not None:
            overrides = await banks.set_bank_config(conn, bank_id, change(overrides))
    resolved = {**engine.settings.bank_values(), **overrides}
    return JSONResponse({"bank_id": bank_id, "config": resolved, "overrides": overrides})


@endpoint
async def get_config(request: Request) -> Response:
    return await _config(request)


@endpoint
async def patch_config(request: Request) -> Response:
    """Keys as field names or ``HINDSIGHT_API_*`` names; a null value removes an override."""
    body: BankConfigBody = await body_of(request, BankConfigBody)
    values = {k.strip().lower().removeprefix("hindsight_api_"): v for k, v in body.updates.items()}
    return await _config(request, lambda _: values)


@endpoint
async def reset_config(request: Request) -> Response:
    """Remove every override of the bank: it follows the server's settings again."""
    return await _config(request, dict.fromkeys)


@endpoint
async def retain(request: Request) -> Response:
    """Store the items verbatim, all or nothing; a re-sent document replaces its memories."""
    bank_id = bank_of(request)
    body: RetainBody = await body_of(request, RetainBody)
    check_supported(body)
    engine = engine_of(request)
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
    limit, offset = _int_query(request, "limit", 100), _int_query(request, "offset", 0)
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


def memory_routes() -> list[Route]:
    """The bank and memory routes, upstream's paths first, ours after."""
    banks_path = "/v1/default/banks/{bank_id}"
    return [
        Route("/v1/default/banks", list_banks, methods=["GET"]),
        Route(banks_path, get_bank, methods=["GET"]),
        Route(f"{banks_path}/profile", get_bank, methods=["GET"]),
        Route(banks_path, put_bank, methods=["PUT"]),
        Route(banks_path, delete_bank, methods=["DELETE"]),
        Route(f"{banks_path}/stats", bank_stats, methods=["GET"]),
        Route(f"{banks_path}/config", get_config, methods=["GET"]),
        Route(f"{banks_path}/config", patch_config, methods=["PATCH"]),
        Route(f"{banks_path}/config", reset_config, methods=["DELETE"]),
        Route(f"{banks_path}/memories", retain, methods=["POST"]),
        Route(f"{banks_path}/memories/list", list_memories, methods=["GET"]),
        Route(f"{banks_path}/memories/recall", recall, methods=["POST"]),
        Route(f"{banks_path}/memories/{{memory_id}}", get_memory, methods=["GET"]),
        Route(f"{banks_path}/memories/{{memory_id}}", delete_memory, methods=["DELETE"]),
        Route("/v1/default/memories/import", import_memories, methods=["POST"]),
    ]
