"""Upstream Hindsight's MCP tools, each making the engine calls of the HTTP route that does the same thing.

A tool's result is that route's JSON body, so a memory, a bank or an operation reads the same over
MCP as over HTTP (the same ids, the same fields), and a route's error comes back as a tool error
with the route's message; a write is recorded in the audit log as the route's would be (see
:mod:`.mcp_calls`). The ``/mcp`` endpoint already passed the service's authentication.

The bank is the ``bank_id`` argument when given, else the session's: ``/mcp/{bank_id}/`` in the
URL or an ``X-Bank-Id`` header, else ``HINDSIGHT_API_MCP_BANK_ID`` (upstream's
``HINDSIGHT_MCP_BANK_ID`` is read too; default ``default``, as upstream).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from mcp_types import ToolAnnotations
from pydantic import Field

from ..types import Budget, TagsMatch
from . import mcp_answers as answers
from . import operations
from .mcp_calls import ToolCalls
from .reflect import reflection

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

READING = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITING = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DELETING = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

BankArg = Annotated[str | None, Field(description="The bank (default: the session's bank).")]
Limit = Annotated[int, Field(ge=1, le=10_000, description="At most this many items.")]
Offset = Annotated[int, Field(ge=0, le=2**31 - 1, description="Items to skip, for paging.")]


def register(server: MCPServer[Any], calls: ToolCalls) -> list[Callable[..., Any]]:
    """Add upstream's tools that need no LLM to ``server``; returns them (for argument checking)."""

    @server.tool(annotations=WRITING)
    async def sync_retain(
        content: Annotated[str, Field(
            description="The text, stored verbatim or as the facts the retain model finds in it.")],
        context: Annotated[str, Field(description="Where it comes from or what it is about.")] = "general",
        timestamp: Annotated[str | None, Field(description="When it happened (ISO-8601).")] = None,
        tags: Annotated[list[str] | None, Field(description="Labels recall's tags filter matches.")] = None,
        metadata: Annotated[dict[str, str] | None, Field(description="String keys to string values.")] = None,
        document_id: Annotated[str | None, Field(description="The document it belongs to.")] = None,
        bank_id: BankArg = None,
        strategy: Annotated[str | None, Field(
            description="Not supported: this server has no extraction strategies.")] = None,
    ) -> dict[str, Any]:
        """Store one text and wait until it is stored and recallable; returns the ids of its memories."""
        document = document_id or str(uuid.uuid4())
        sent = {"items": [retain_item(content, context, timestamp, tags, metadata, document, strategy)]}
        async with calls.writing(bank_id, "retain", "POST", "/memories", sent) as call:
            stored = await answers.retain_now(call, sent)
        return {"status": "completed", "message": "Memory stored successfully", "memory_ids": stored.memory_ids}

    @server.tool(annotations=READING)
    async def list_banks(
        query: Annotated[str | None, Field(description="Only banks whose id contains this text.")] = None,
        limit: Limit = 100, offset: Offset = 0,
    ) -> dict[str, Any]:
        """List the banks, with their names, missions and memory counts."""
        async with calls.engine() as engine:
            page, total = await engine.banks.page(search=answers.text("q", query), limit=limit, offset=offset)
        return {"banks": page, "total": total, "limit": limit, "offset": offset}

    @server.tool(annotations=WRITING)
    async def create_bank(
        bank_id: Annotated[str, Field(description="The new bank's id.")],
        name: Annotated[str | None, Field(description="A display name.")] = None,
        mission: Annotated[str | None, Field(description="Who the agent is and what it is for.")] = None,
    ) -> dict[str, Any]:
        """Create a bank (or update an existing one's name and mission); returns its profile."""
        body = {k: v for k, v in {"name": name, "mission": mission}.items() if v is not None}
        async with calls.writing(bank_id, "create_bank", "PUT", "", body, renames=True) as call:
            call.answer = await answers.write_bank(call, body)
        return call.answer  # type: ignore[no-any-return]

    @server.tool(annotations=READING)
    async def get_bank(bank_id: BankArg = None) -> dict[str, Any]:
        """A bank's profile: name, mission and disposition."""
        async with calls.reading(bank_id) as call:
            return await answers.bank_profile(call.engine, call.bank)

    @server.tool(annotations=WRITING)
    async def update_bank(
        name: Annotated[str | None, Field(description="A new display name.")] = None,
        mission: Annotated[str | None, Field(description="A new mission.")] = None,
        config_updates: Annotated[dict[str, Any] | None, Field(description="Bank settings to change "
                                                                           "(as PATCH /config takes them).")] = None,
        bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """Change a bank's name, mission or settings; returns its profile."""
        if config_updates:
            sent = {"updates": config_updates}
            async with calls.writing(bank_id, "update_bank_config", "PATCH", "/config", sent) as call:
                call.answer = await answers.configure(call, sent)
        body = {k: v for k, v in {"name": name, "mission": mission}.items() if v is not None}
        if body:  # as PUT, which merges the fields given into the profile
            async with calls.writing(bank_id, "create_bank", "PUT", "", body, renames=True) as call:
                call.answer = await answers.write_bank(call, body)
            return call.answer  # type: ignore[no-any-return]
        async with calls.reading(bank_id) as call:
            return await answers.bank_profile(call.engine, call.bank)

    @server.tool(annotations=DELETING)
    async def delete_bank(bank_id: BankArg = None) -> dict[str, Any]:
        """Delete a bank with everything in it."""
        async with calls.writing(bank_id, "delete_bank", "DELETE", "", renames=True) as call:
            call.answer = await answers.delete_bank(call)
        return call.answer  # type: ignore[no-any-return]

    @server.tool(annotations=READING)
    async def get_bank_stats(bank_id: BankArg = None) -> dict[str, Any]:
        """Counts of what a bank holds, in upstream's shape."""
        async with calls.reading(bank_id) as call:
            return await answers.bank_stats(call.engine, call.bank)

    @server.tool(annotations=READING)
    async def list_memories(
        type: Annotated[str | None, Field(description="world, experience or observation.")] = None,
        q: Annotated[str | None, Field(description="Only memories whose text contains this.")] = None,
        limit: Limit = 100, offset: Offset = 0, bank_id: BankArg = None,
        tags: Annotated[list[str] | None, Field(description="Only memories with these tags.")] = None,
        tags_match: Annotated[TagsMatch, Field(description="How tags filter.")] = TagsMatch.ANY,
    ) -> dict[str, Any]:
        """A page of a bank's memories, newest first, with the total."""
        async with calls.reading(bank_id) as call:
            return await answers.memory_page(call, kind=type, search=q, tags=tags,
                                             tags_match=tags_match.value if tags else None, limit=limit,
                                             offset=offset)

    @server.tool(annotations=READING)
    async def get_memory(memory_id: str, bank_id: BankArg = None) -> dict[str, Any]:
        """One memory with its entities, tags and dates."""
        async with calls.reading(bank_id) as call:
            return await answers.memory(call.engine, call.bank, memory_id)

    @server.tool(annotations=WRITING)
    async def update_memory(
        memory_id: str,
        text: Annotated[str | None, Field(description="The corrected text (re-embedded and re-linked).")] = None,
        context: str | None = None,
        occurred_start: Annotated[str | None, Field(description="ISO-8601.")] = None,
        occurred_end: Annotated[str | None, Field(description="ISO-8601.")] = None,
        mentioned_at: Annotated[str | None, Field(description="ISO-8601.")] = None,
        fact_type: Annotated[str | None, Field(description="world, experience or observation.")] = None,
        entities: Annotated[list[str] | None, Field(description="The entities it names (replaces them).")] = None,
        resolve_entities: bool = True,
        bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """Correct a memory: its text, context, dates, type or entities."""
        changes = {"text": text, "context": context, "occurred_start": occurred_start, "occurred_end": occurred_end,
                   "mentioned_at": mentioned_at, "fact_type": fact_type, "entities": entities}
        body: dict[str, Any] = {k: v for k, v in changes.items() if v is not None}
        if entities is not None:
            body["resolve_entities"] = resolve_entities
        async with calls.writing(bank_id, "update_memory", "PATCH", f"/memories/{memory_id}", body) as call:
            call.answer = await answers.edit_memory(call, memory_id, body)
        return call.answer  # type: ignore[no-any-return]

    @server.tool(annotations=WRITING)
    async def invalidate_memory(
        memory_id: str,
        reason: Annotated[str | None, Field(description="Why it is no longer true.")] = None,
        restore: Annotated[bool, Field(description="Make an invalidated memory valid again.")] = False,
        bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """Retire a memory that is no longer true (recall stops returning it), or restore one."""
        body: dict[str, Any] = {"state": "valid" if restore else "invalidated"}
        if reason is not None:
            body["reason"] = reason
        async with calls.writing(bank_id, "update_memory", "PATCH", f"/memories/{memory_id}", body) as call:
            call.answer = await answers.edit_memory(call, memory_id, body)
        return call.answer  # type: ignore[no-any-return]

    @server.tool(annotations=DELETING)
    async def clear_memories(
        type: Annotated[str | None, Field(description="Only this fact type (default: all).")] = None,
        bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """Delete a bank's memories (of one type, or all); the bank and its settings stay."""
        async with calls.writing(bank_id, "clear_memories", "DELETE", "/memories") as call:
            call.answer = await answers.cleared(call, type)
        return call.answer  # type: ignore[no-any-return]

    @server.tool(annotations=READING)
    async def list_documents(
        q: Annotated[str | None, Field(description="Only documents whose id contains this.")] = None,
        limit: Limit = 100, offset: Offset = 0, bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """A page of a bank's documents with their memory counts, and the total."""
        async with calls.reading(bank_id) as call:
            return await call.engine.documents.page(
                call.bank, search=answers.text("q", q), tags=None, tags_match="any_strict", time_field=None,
                start=None, end=None, limit=limit, offset=offset)

    @server.tool(annotations=READING)
    async def get_document(document_id: str, bank_id: BankArg = None) -> dict[str, Any]:
        """One document: its text, tags and memory count."""
        async with calls.reading(bank_id) as call:
            return await answers.document(call.engine, call.bank, document_id)

    @server.tool(annotations=DELETING)
    async def delete_document(document_id: str, bank_id: BankArg = None) -> dict[str, Any]:
        """Delete a document with its memories, chunks and links."""
        async with calls.writing(bank_id, "delete_document", "DELETE", f"/documents/{document_id}") as call:
            call.answer = await answers.delete_document(call, document_id)
        return call.answer  # type: ignore[no-any-return]

    @server.tool(annotations=READING)
    async def list_tags(
        q: Annotated[str | None, Field(description="Only tags containing this.")] = None,
        limit: Limit = 100, offset: Offset = 0, bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """The bank's tags with how many memories carry each."""
        async with calls.reading(bank_id) as call:
            items, total = await call.engine.memories.tags(call.bank, pattern=answers.text("q", q), limit=limit,
                                                           offset=offset)
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    @server.tool(annotations=READING)
    async def list_operations(
        status: Annotated[str | None, Field(description="pending, processing, completed, failed or "
                                                        "cancelled.")] = None,
        type: Annotated[str | None, Field(description="The operation type, e.g. retain.")] = None,
        limit: Annotated[int, Field(ge=1, le=10_000)] = 20, offset: Offset = 0,
        exclude_parents: bool = False, bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """The bank's asynchronous operations, newest first."""
        async with calls.reading(bank_id) as call:
            wanted, kind = operations.filters(status, type)
            return await operations.operations_page(  # no operation here has children: none to exclude
                call.engine, call.bank, status=wanted, kind=kind,
                limit=operations.bounded("limit", str(limit), 20, 1, operations.MAX_LIMIT),
                offset=operations.bounded("offset", str(offset), 0, 0, operations.MAX_OFFSET))

    @server.tool(annotations=READING)
    async def get_operation(operation_id: str, bank_id: BankArg = None) -> dict[str, Any]:
        """One operation's status and progress."""
        async with calls.reading(bank_id) as call:
            return await operations.operation_status(call.engine, call.bank, operations.operation_id_of(operation_id))

    @server.tool(annotations=DELETING)
    async def cancel_operation(operation_id: str, bank_id: BankArg = None) -> dict[str, Any]:
        """Cancel an operation that has not finished."""
        async with calls.writing(bank_id, "cancel_operation", "DELETE", f"/operations/{operation_id}") as call:
            call.answer = await operations.changed(call.engine, call.bank, operations.operation_id_of(operation_id),
                                                   operations.CANCEL)
        return call.answer  # type: ignore[no-any-return]

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    async def reflect(
        query: Annotated[str, Field(min_length=1, description="The question or topic to reflect on.")],
        context: Annotated[str | None, Field(description="Why the reflection is needed; appended to the "
                                                         "query.")] = None,
        budget: Annotated[Budget, Field(description="How hard the recall searches.")] = Budget.LOW,
        max_tokens: Annotated[int, Field(ge=1, description="The most tokens the answer may take.")] = 4096,
        response_schema: Annotated[dict[str, Any] | None, Field(description="A JSON Schema; the result's "
                                                                            "structured_output fits it.")] = None,
        tags: Annotated[list[str] | None, Field(description="Only memories with these tags (see tags_match).")]
        = None,
        tags_match: Annotated[TagsMatch, Field(description="How tags filter, as in recall.")] = TagsMatch.ANY,
        apply_all_directives: Annotated[bool, Field(description="Accepted for upstream's clients; this server "
                                                                "has no directives.")] = False,
        include_based_on: Annotated[bool, Field(description="Include the memories the answer cites.")] = False,
        include_trace: Annotated[bool, Field(description="Include the recall and model calls.")] = False,
        bank_id: BankArg = None,
    ) -> dict[str, Any]:
        """Answer a question from a bank's memories with the configured chat model, citing the memories used.

        One recall, one answer: the model reads what recall returns and nothing else. Without a chat
        model configured (HINDSIGHT_API_LLM_*), the call fails and says what to set.
        """
        include: dict[str, Any] = {"facts": {} if include_based_on else None,
                                   "tool_calls": {} if include_trace else None}
        body = {"query": query, "context": context, "budget": budget.value, "max_tokens": max_tokens,
                "response_schema": response_schema, "tags": tags, "tags_match": tags_match.value,
                "include": include}
        sent = {k: v for k, v in body.items() if v is not None}
        async with calls.reading(bank_id) as call:
            return await reflection(call.engine, call.bank, json.dumps(sent))

    return [reflect, sync_retain, list_banks, create_bank, get_bank, update_bank, delete_bank, get_bank_stats,
            list_memories, get_memory, update_memory, invalidate_memory, clear_memories, list_documents, get_document,
            delete_document, list_tags, list_operations, get_operation, cancel_operation]


def retain_item(content: str, context: str | None, timestamp: str | None, tags: list[str] | None,
          metadata: dict[str, str] | None, document_id: str | None, strategy: str | None) -> dict[str, Any]:
    """One retain item in the HTTP body's shape, without the fields left unset."""
    fields = {"content": content, "context": context, "timestamp": timestamp, "tags": tags, "metadata": metadata,
              "document_id": document_id, "strategy": strategy}
    return {k: v for k, v in fields.items() if v is not None}


def recall_body(query: str, *, budget: Budget, max_tokens: int, types: list[str] | None, tags: list[str] | None,
                tags_match: TagsMatch, **rest: Any) -> dict[str, Any]:
    """The HTTP recall body for the ``recall`` tool's arguments (``include_*`` as upstream's booleans
    with ``max_*_tokens``, or as token budgets)."""
    include: dict[str, Any] = {}
    for name, limit_name, default in (("entities", "max_entity_tokens", 500), ("chunks", "max_chunk_tokens", 8192),
                                      ("source_facts", "max_source_facts_tokens", 4096)):
        wanted, budget_tokens = rest.pop(f"include_{name}", None), rest.pop(limit_name, default)
        if wanted is True:
            include[name] = {"max_tokens": budget_tokens}
        elif wanted is None or wanted is False:
            include[name] = None
        else:
            include[name] = {"max_tokens": wanted}
    body = {"query": query, "budget": budget.value, "max_tokens": max_tokens, "types": types, "tags": tags,
            "tags_match": tags_match.value, "include": include, **rest}
    return {k: v for k, v in body.items() if v is not None}
