"""What the bank, memory and document routes answer, for the MCP tools: the engine calls those routes make,
and the bodies they build from them (this project's fields among them, as a caller asking for extras
gets them). The tools' arguments are checked as the routes check their requests, with the same messages.
"""

from __future__ import annotations

import json
from typing import Any

from ..engine import Engine
from ..errors import BankNotFound, QueryTooLong, RetainError
from ..limits import key_problem
from ..recall.trace import phase_sink
from ..types import FACT_TYPES, TagsMatch
from . import async_retain, memories, retain_body
from ._params import checked_text
from .banks import profile_changes
from .base import checked_choice, parse_body
from .errors import ServiceError
from .items import check_supported
from .mcp_calls import Call, ToolCalls
from .memories import edit_from, invalidated_item, list_item, recall_options
from .ops import Admission
from .schemas import BANK_CONFIG, BankConfigBody, CreateBankBody, RecallBody, RetainBody, UpdateMemoryBody

#: the fields of a bank's profile its routes answer
PROFILE = ("bank_id", "name", "disposition", "mission", "background")


def text(name: str, value: str | None) -> str | None:
    """A text argument as a query parameter takes it: none when empty, else checked (400 naming it)."""
    return checked_text(name, value) if value else None


def fact_type(value: str | None) -> str | None:
    """The ``type`` argument: one of the fact types (400 naming them otherwise), or none."""
    return checked_choice("type", text("type", value), FACT_TYPES)


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body)


# ---- memories ---------------------------------------------------------------------------------------------

async def retain_now(call: Call, sent: dict[str, Any]) -> memories.Stored:
    """``POST /memories`` without ``async``: the items stored before the answer (verbatim, or their facts
    with a retain model), a re-sent document replacing its memories; ``retain.completed`` written with them
    for any webhook. The call's answer is the route's."""
    engine, bank = call.engine, call.bank
    body: RetainBody = parse_body(_json(sent), RetainBody)
    check_supported(body.items)
    stored = await memories.retain_now(engine, bank, body)
    call.answer = stored.answer(bank)
    return stored


async def retain_later(call: Call, sent: dict[str, Any]) -> dict[str, Any]:
    """``POST /memories`` with ``async``: the retain queued as an operation, the answer carrying its id."""
    raw = _json(sent)
    body = await retain_body.read(raw, call.engine.settings)
    if not isinstance(body, retain_body.Queued):
        raise ValueError("a queued retain's body says async: true")
    return await async_retain.queue(call.engine, call.bank, body, raw)


async def recalled(calls: ToolCalls, call: Call, sent: dict[str, Any]) -> dict[str, Any]:
    """``POST /memories/recall``: admitted as the route admits a recall (the tools' own bound)."""
    engine = call.engine
    body: RecallBody = parse_body(_json(sent), RecallBody)
    allowed = engine.settings.recall_max_query_tokens
    if allowed and engine.tokens.count(body.query) > allowed:  # the library cuts it; the service refuses
        raise QueryTooLong(engine.tokens.count(body.query), allowed)
    options = recall_options(body)
    async with Admission(calls.service, engine.settings, calls.metrics):
        token = phase_sink.set(calls.metrics.record_phases)
        try:
            return await engine.recall(call.bank, body.query, **options)
        finally:
            phase_sink.reset(token)


def memory_key(memory_id: str) -> str:
    """A memory id as the routes take it in their path: 400 for one that cannot be an index key."""
    if problem := key_problem(memory_id):
        raise ServiceError(400, "invalid_request", f"memory_id: {problem}")
    return memory_id


async def memory(engine: Engine, bank_id: str, memory_id: str) -> dict[str, Any]:
    """``GET /memories/{memory_id}``: the memory, valid or invalidated; 404 when it is neither."""
    found = await engine.memories.find(bank_id, memory_key(memory_id))
    if found is None:
        raise ServiceError(404, "memory_not_found", f"Memory unit '{memory_id}' not found in bank {bank_id!r}")
    state, row = found
    return {**(list_item(row) if state == "valid" else invalidated_item(row)), "history": []}


async def edit_memory(call: Call, memory_id: str, sent: dict[str, Any]) -> dict[str, Any]:
    """``PATCH /memories/{memory_id}``: the memory edited, invalidated or restored, as it is after."""
    memory_key(memory_id)
    body: UpdateMemoryBody = parse_body(_json(sent), UpdateMemoryBody)
    edit = edit_from(body)  # the body's own errors first, before anything is read
    try:
        await call.engine.update_memory(call.bank, memory_id, edit, state=body.state, reason=body.reason)
    except RetainError as exc:
        raise ServiceError(400, "invalid_request", f"{exc.field}: {exc.why}") from None
    return await memory(call.engine, call.bank, memory_id)


async def memory_page(call: Call, *, kind: str | None, search: str | None, tags: list[str] | None,
                      tags_match: str | None, limit: int, offset: int) -> dict[str, Any]:
    """``GET /memories/list``: a page of the bank's valid memories, newest first, with the total."""
    filters: dict[str, Any] = dict(
        fact_type=fact_type(kind), search=text("q", search), document_id=None, entity_id=None,
        tags=[checked_text("tags", t) for t in tags or () if t],
        tags_match=checked_choice("tags_match", tags_match, tuple(m.value for m in TagsMatch), "any"),
        time_field=None, start=None, end=None, limit=limit, offset=offset)
    items, total = await call.engine.list_memories(call.bank, **filters)
    return {"items": [list_item(m) for m in items], "total": total, "limit": limit, "offset": offset}


async def cleared(call: Call, kind: str | None) -> dict[str, Any]:
    """``DELETE /memories``: the bank's memories (of one type) forgotten; the bank and its settings stay."""
    chosen = fact_type(kind)
    deleted = await call.engine.clear_memories(call.bank, chosen)
    scope = f" of type '{chosen}'" if chosen else ""
    return {"success": True, "message": f"Cleared {deleted} memory unit(s){scope} from bank '{call.bank}'",
            "deleted_count": deleted}


# ---- banks ------------------------------------------------------------------------------------------------

def profile(found: dict[str, Any]) -> dict[str, Any]:
    """A bank's profile as its routes answer it."""
    return {k: found[k] for k in PROFILE}


async def write_bank(call: Call, sent: dict[str, Any]) -> dict[str, Any]:
    """``PUT /banks/{bank_id}``: the bank created if needed, its profile, recall toggles and retain's extraction
    settings changed."""
    body: CreateBankBody = parse_body(_json(sent), CreateBankBody)
    given = body.model_dump(exclude_none=True)
    config = {k: v for k, v in given.items() if k in BANK_CONFIG}
    return profile(await call.engine.banks.write(call.bank, profile_changes(given), config, create=True))


async def bank_profile(engine: Engine, bank_id: str) -> dict[str, Any]:
    """``GET /banks/{bank_id}/profile``; 404 for no bank."""
    found = await engine.banks.profile(bank_id)
    if found is None:
        raise BankNotFound(bank_id)
    return profile(found)


async def configure(call: Call, sent: dict[str, Any]) -> dict[str, Any]:
    """``PATCH /config``: overrides merged (keys as field or ``HINDSIGHT_API_*`` names; null removes one)."""
    body: BankConfigBody = parse_body(_json(sent), BankConfigBody)
    values = {k.strip().lower().removeprefix("hindsight_api_"): v for k, v in body.updates.items()}
    overrides = await call.engine.banks.configure(call.bank, values, create=False)
    return {"bank_id": call.bank, "config": {**call.engine.settings.bank_values(), **overrides},
            "overrides": overrides}


async def delete_bank(call: Call) -> dict[str, Any]:
    """``DELETE /banks/{bank_id}``: the bank with everything in it; one that does not exist deletes nothing."""
    engine, bank = call.engine, call.bank
    stats = await engine.bank_stats(bank)
    deleted = 0
    if stats is not None and await engine.delete_bank(bank):
        deleted = stats["memories"] + stats["entities"] + stats["documents"]
    return {"success": True, "message": f"Bank '{bank}' and all associated data deleted successfully",
            "deleted_count": deleted}


async def bank_stats(engine: Engine, bank_id: str) -> dict[str, Any]:
    """``GET /stats``: what the bank holds in upstream's shape (and this project's terms); 404 for no bank."""
    stats = await engine.bank_stats(bank_id)
    if stats is None:
        raise BankNotFound(bank_id)
    activity = await engine.banks.activity(bank_id)
    by_type = {t: stats["by_type"].get(t, 0) for t in FACT_TYPES}
    return {
        "bank_id": bank_id, "total_nodes": stats["memories"], "total_links": stats["links"],
        "total_documents": stats["documents"], "nodes_by_fact_type": by_type,
        "links_by_link_type": activity["links_by_type"], "links_by_fact_type": {}, "links_breakdown": {},
        "pending_operations": 0, "failed_operations": 0, "operations_by_status": {},
        "last_consolidated_at": None, "last_memory_write_at": activity["last_write"],
        "pending_consolidation": 0, "failed_consolidation": 0, "total_observations": by_type["observation"],
        "entities": stats["entities"], "chunks": stats["chunks"],
    }


# ---- documents --------------------------------------------------------------------------------------------

def _no_document(document_id: str) -> ServiceError:
    return ServiceError(404, "document_not_found", f"Document {document_id!r} not found")


async def document(engine: Engine, bank_id: str, document_id: str) -> dict[str, Any]:
    """``GET /documents/{document_id}``: its text, tags and memory count; 404 for no such document."""
    found = await engine.documents.get(bank_id, checked_text("document_id", document_id))
    if found is None:
        raise _no_document(document_id)
    return found


async def delete_document(call: Call, document_id: str) -> dict[str, Any]:
    """``DELETE /documents/{document_id}``: the document with its memories, chunks and links."""
    removed = await call.engine.delete_document(call.bank, checked_text("document_id", document_id))
    if removed is None:
        raise _no_document(document_id)
    return {"success": True, "document_id": document_id, "memory_units_deleted": removed,
            "message": f"Document '{document_id}' and {removed} associated memory units deleted successfully"}
