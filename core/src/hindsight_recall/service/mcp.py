"""The MCP server: upstream Hindsight's tools (:mod:`.mcp_tools`) and ``bank_stats`` over one engine.

Built on the official ``mcp`` SDK (2.x, ``MCPServer``). Tool results are structured JSON (the
same bodies the HTTP routes answer); an error a caller can fix (a bad argument, an unknown bank, an
unreachable database) comes back as an MCP tool error whose text is the one-line message the
command line would print, with any database password redacted. Nothing else reaches the client:
a defect is logged with its traceback on the server and answered with a generic message.

Two ways to serve it:

* **stdio** (``hindsight-recall mcp``): :func:`serve_stdio` owns the engine. It answers the
  handshake and ``tools/list`` at once and opens the engine in the background (the model load and
  the embedded server's start take seconds); tool calls wait for it. Only protocol goes to stdout:
  logs go to stderr, and while it serves the SDK points file descriptor 1 at stderr, so child
  processes (the embedded PostgreSQL server) cannot write to the wire either.

* **streamable HTTP** under a host ASGI app (``hindsight-recall serve`` mounts it at ``/mcp``)::

      mcp = mcp_app(engine)                        # the engine need not be open yet

      @asynccontextmanager
      async def lifespan(app):
          async with engine, mcp.running():        # the host opens the engine; then the MCP sessions
              yield

      app = Starlette(routes=[Route("/mcp", mcp), ...], lifespan=lifespan)   # FastAPI: app.router.routes.append

  The returned app answers at whatever path it is mounted on, so ``Route("/mcp", mcp)`` serves
  exactly ``/mcp`` and leaves every other path (and its 404) to the host. Starlette does not run a
  mounted app's lifespan, so the host must enter :meth:`McpHttpApp.running` in its own (once per
  app). Served on its own (e.g. ``uvicorn.run(mcp_app(engine))``), the app runs that itself.
  Sessions are stateless and answered as plain JSON (no server-sent events): any worker can serve
  any request, and nothing is kept between calls.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from importlib.metadata import version
from inspect import signature
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from ..errors import BankNotFound, RetainError
from ..jsonl import parse_memory
from ..types import Budget, FactType, Memory, TagsMatch
from . import mcp_answers, mcp_tools
from .aliases import AliasResolver
from .audit import who
from .items import memory_id
from .mcp_calls import ToolCalls, session_asker, session_bank
from .mcp_tools import BankArg

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from ..engine import Engine

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Long-term memory. Call `recall` with a question to get the stored memories most relevant to it "
    "(ranked, packed into max_tokens); call `retain` (queued) or `sync_retain` (waits) to store new "
    "memories in a bank (verbatim, or as the facts a configured retain model finds); `list_banks` shows the "
    "banks, `list_memories` a bank's memories."
)


class Entity(BaseModel):
    """An entity as upstream Hindsight's retain item names one (only ``text`` is kept)."""

    model_config = ConfigDict(extra="forbid")
    text: str
    type: str | None = None


class MemoryItem(BaseModel):
    """One memory to retain: upstream Hindsight's retain item, plus this project's own fields."""

    model_config = ConfigDict(extra="forbid")
    content: str = Field(validation_alias=AliasChoices("content", "text"),
                         description="The memory's text, stored verbatim (also accepted as 'text').")
    id: str | None = Field(None, description="Your id for it, unique in the bank; retaining an id again updates "
                                             "that memory. Default: as HTTP's retain derives it, the item's place "
                                             "in its document, so re-sending a document replaces its memories.")
    type: FactType = Field(FactType.WORLD, description="world (a fact), experience (the agent's own) or "
                                                       "observation (a summary of other memories).")
    timestamp: str | None = Field(None, description="When it happened or was said (ISO-8601, e.g. "
                                                    "2024-05-01T12:00:00Z); fills occurred_start/occurred_end "
                                                    "and mentioned_at when those are not given.")
    occurred_start: str | None = Field(None, description="ISO-8601 start of what it describes.")
    occurred_end: str | None = Field(None, description="ISO-8601 end of what it describes.")
    mentioned_at: str | None = Field(None, description="ISO-8601 time it was said or learned.")
    context: str | None = Field(None, description="Where it comes from or what it is about.")
    tags: list[str] | None = Field(None, description="Labels that recall's tags filter matches.")
    entities: list[str | Entity] | None = Field(None, description="People, places, things it names.")
    document_id: str | None = Field(None, description="The document it belongs to.")
    metadata: dict[str, str] | None = Field(None, description="String keys to string values, returned as given.")


def memories_from_items(bank_id: str, items: list[MemoryItem]) -> list[Memory]:
    """Validate retain items into memories; errors name ``memories[index].<field>``.

    An item without an id gets the one HTTP's retain gives it: the ``n``-th item of its document
    (a document made for the call when it names none), so re-sending a document replaces its memories.
    """
    call_document = str(uuid.uuid4())
    places: dict[str, int] = {}
    memories = []
    for index, item in enumerate(items):
        obj: dict[str, Any] = {"text": item.content, "type": item.type.value}
        for name in ("occurred_start", "occurred_end", "mentioned_at", "context", "document_id", "tags", "metadata"):
            if getattr(item, name) is not None:
                obj[name] = getattr(item, name)
        if item.entities is not None:
            obj["entities"] = [e.text if isinstance(e, Entity) else e for e in item.entities]
        if item.timestamp is not None:
            if item.occurred_start is None and item.occurred_end is None:
                obj["occurred_start"] = obj["occurred_end"] = item.timestamp
            obj.setdefault("mentioned_at", item.timestamp)
        document = obj.setdefault("document_id", item.document_id or call_document)
        place = places[document] = places.get(document, -1) + 1
        obj["id"] = item.id if item.id is not None else memory_id(bank_id, document, place)
        try:
            memories.append(parse_memory(obj)[1])
        except RetainError as exc:
            raise RetainError(None, f"memories[{index}].{exc.field}", exc.why) from None
    return memories


@contextmanager
def _tool_errors() -> Iterator[None]:
    """Turn an error into a :class:`ToolError` with its one-line message, never a traceback."""
    from ..errors import describe_error  # the command line's wording of every error a user can fix

    try:
        yield
    except ToolError:
        raise
    except Exception as exc:
        message = describe_error(exc)
        if message is None:
            log.exception("an MCP tool call failed")
            message = f"internal error ({type(exc).__name__}); the server's log has the details"
        raise ToolError(message) from None


class _EngineSlot:
    """The engine the tools use; when the server owns it, opened in its lifespan without delaying the handshake."""

    def __init__(self, engine: Engine, owned: bool, aliases: AliasResolver) -> None:
        self.engine, self.owned, self.aliases = engine, owned, aliases
        self._opening: asyncio.Future[Engine] | None = None

    @asynccontextmanager
    async def lifespan(self, _server: MCPServer[Any]) -> AsyncIterator[None]:
        if not self.owned:
            yield
            return
        self._opening = opening = asyncio.ensure_future(self.engine.open())
        opening.add_done_callback(_log_failure)
        try:
            yield
        finally:
            opening.cancel()
            with suppress(Exception, asyncio.CancelledError):
                await opening
            await self.aliases.close()
            await self.engine.close()

    async def get(self) -> Engine:
        if self._opening is not None:
            # shielded: a cancelled tool call must not cancel the opening the other calls wait for
            await asyncio.shield(self._opening)
        return self.engine


def _log_failure(opening: asyncio.Future[Engine]) -> None:
    """Say on stderr why the engine did not open (every tool call answers with the same message)."""
    error = None if opening.cancelled() else opening.exception()
    if error is not None:
        from ..errors import describe_error, redact

        log.error("the engine did not open: %s", describe_error(error) or redact(f"{type(error).__name__}: {error}"))


def build_server(engine: Engine, *, owned: bool = False, aliases: AliasResolver | None = None) -> MCPServer[Any]:
    """The MCP server with its tools over ``engine``.

    :param engine: the engine the tools call.
    :param owned: open the engine when the server starts and close it when it stops (stdio); else
        the caller opens it before the first tool call and closes it after the last.
    :param aliases: the bank aliases the tools resolve (default: a resolver of the server's own).
    """
    aliases = aliases or engine.aliases.resolver()
    slot = _EngineSlot(engine, owned, aliases)
    server: MCPServer[Any] = MCPServer(
        "hindsight-recall", version=version("hindsight-recall"), instructions=INSTRUCTIONS,
        log_level="WARNING", lifespan=slot.lifespan,
    )
    async def opened() -> Engine:
        with _tool_errors():  # an engine that failed to open answers every call with why
            return await slot.get()

    calls = ToolCalls(opened, aliases, engine.settings.mcp_bank_id)
    reading = mcp_tools.READING

    @server.tool(annotations=reading)
    async def recall(
        query: Annotated[str, Field(description="The question, in natural language.")],
        max_tokens: Annotated[int, Field(ge=1, description="Pack the results into this many tokens.")] = 4096,
        budget: Annotated[Budget, Field(description="How hard to search.")] = Budget.MID,
        types: Annotated[list[FactType] | None, Field(description="Fact types to search (default: all).")] = None,
        prefer_observations: Annotated[bool | None, Field(description="Drop facts a returned observation "
                                                                      "summarises.")] = None,
        tags: Annotated[list[str] | None, Field(description="Only memories with these tags (see tags_match).")]
        = None,
        tags_match: Annotated[TagsMatch, Field(description="How tags filter: any and all also keep untagged "
                                                           "memories; the _strict forms do not.")] = TagsMatch.ANY,
        tag_groups: Annotated[list[dict[str, Any]] | None, Field(description="Not supported; use tags.")] = None,
        query_timestamp: Annotated[str | None, Field(description="ISO-8601 'now' for relative dates and "
                                                                 "recency (default: the current time).")] = None,
        min_scores: Annotated[dict[str, float] | None, Field(description="Score floors: semantic, keyword, "
                                                                         "reranker, final.")] = None,
        temporal_window: Annotated[dict[str, str] | None, Field(description="{start, end} (ISO-8601) for the "
                                                                            "temporal arm, instead of reading "
                                                                            "dates from the query.")] = None,
        include_chunks: Annotated[bool | Annotated[int, Field(ge=0)] | None, Field(
            description="Also return source chunks: true (max_chunk_tokens) or a token budget.")] = False,
        max_chunk_tokens: Annotated[int, Field(ge=0)] = 8192,
        include_entities: Annotated[bool | Annotated[int, Field(ge=0)] | None, Field(
            description="Also return the entities map: true (max_entity_tokens) or a token budget; "
                        "false or null leaves it out.")] = True,
        max_entity_tokens: Annotated[int, Field(ge=0)] = 500,
        include_source_facts: Annotated[bool | Annotated[int, Field(ge=0)] | None, Field(
            description="For observations, also return their source facts.")] = False,
        max_source_facts_tokens: Annotated[int, Field(ge=-1)] = 4096,
        bank_id: BankArg = None,
        limit: Annotated[int | None, Field(ge=1, description="Keep at most this many results.")] = None,
        trace: Annotated[bool, Field(description="Include the trace of every recall phase.")] = False,
    ) -> dict[str, Any]:
        """Find the memories of a bank most relevant to a question, ranked, within max_tokens."""
        body = mcp_tools.recall_body(
            query, budget=budget, max_tokens=max_tokens, types=[t.value for t in types] if types else None, tags=tags,
            tags_match=tags_match, prefer_observations=prefer_observations, tag_groups=tag_groups,
            query_timestamp=query_timestamp, min_scores=min_scores, temporal_window=temporal_window, limit=limit,
            trace=trace, include_chunks=include_chunks, max_chunk_tokens=max_chunk_tokens,
            include_entities=include_entities, max_entity_tokens=max_entity_tokens,
            include_source_facts=include_source_facts, max_source_facts_tokens=max_source_facts_tokens)
        async with calls.reading(bank_id) as call:
            return await mcp_answers.recalled(calls, call, body)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def retain(
        content: Annotated[str | None, Field(description="The text, stored verbatim (or as the facts the retain "
                                                         "model finds in it) and queued "
                                                         "(the answer carries the operation id).")] = None,
        context: Annotated[str, Field(description="Where it comes from or what it is about.")] = "general",
        timestamp: Annotated[str | None, Field(description="When it happened (ISO-8601).")] = None,
        tags: Annotated[list[str] | None, Field(description="Labels recall's tags filter matches.")] = None,
        metadata: Annotated[dict[str, str] | None, Field(description="String keys to string values.")] = None,
        document_id: Annotated[str | None, Field(description="The document it belongs to.")] = None,
        bank_id: BankArg = None,
        strategy: Annotated[str | None, Field(
            description="Not supported: this server has no extraction strategies.")] = None,
        update_mode: Annotated[Literal["replace", "append"] | None, Field(
            description="replace (default) or append to the memories of the same document_id.")] = None,
        memories: Annotated[list[MemoryItem] | None, Field(
            min_length=1, description="Instead of content: several memories, stored before the answer "
                                      "(all or nothing), with their ids.")] = None,
    ) -> dict[str, Any]:
        """Store memories in a bank: one text (content) in the background, verbatim or as the facts the retain model
        finds in it, or several memories as given (memories) at once."""
        if (content is None) == (memories is None):
            raise ToolError("give either content (one memory) or memories (a list of them)")
        if content is not None:
            item = mcp_tools.retain_item(content, context, timestamp, tags, metadata, document_id, strategy)
            if update_mode is not None:
                item["update_mode"] = update_mode
            sent = {"items": [item], "async": True}
            async with calls.writing(bank_id, "retain", "POST", "/memories", sent) as call:
                call.answer = await mcp_answers.retain_later(call, sent)
            return {"status": "accepted", "message": "Memory storage initiated",
                    "operation_id": call.answer.get("operation_id")}
        target = calls.bank(bank_id)
        with _tool_errors():
            items = memories_from_items(target, memories or [])
            stats = await (await slot.get()).retain(target, items, progress=False)
        return {"bank_id": target, "memories": stats.memories, "ids": [m.id for m in items],
                "links": stats.links, "seconds": round(stats.seconds, 4)}

    @server.tool(annotations=reading)
    async def bank_stats(bank_id: BankArg = None) -> dict[str, Any]:
        """What a bank holds in this server's own terms: memories by type, entities, chunks, documents,
        links and its settings."""
        with _tool_errors():
            target = calls.bank(bank_id)
            stats = await (await slot.get()).bank_stats(target)
            if stats is None:
                raise BankNotFound(target)
            return stats

    tools: list[Callable[..., Any]] = [recall, retain, bank_stats, *mcp_tools.register(server, calls)]
    server.middleware.append(_refuse_unknown_arguments({t.__name__: frozenset(signature(t).parameters) for t in tools}))
    return server


def _refuse_unknown_arguments(known: Mapping[str, frozenset[str]]) -> ServerMiddleware[Any]:
    """A tool call naming an argument the tool does not have is an error, not silently dropped."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params or {}
        arguments, name = params.get("arguments"), params.get("name")
        if ctx.method == "tools/call" and isinstance(arguments, Mapping) and isinstance(name, str) and name in known:
            unknown = sorted(set(arguments) - known[name])
            if unknown:
                why = f"{unknown[0]}: unknown argument of {name} (known: {', '.join(sorted(known[name])) or 'none'})"
                return CallToolResult(content=[TextContent(type="text", text=why)], is_error=True)
        return await call_next(ctx)

    return middleware


class McpHttpApp:
    """The MCP server as an ASGI app for streamable HTTP, answering at whatever path it is mounted on.

    A host app that mounts it runs :meth:`running` in its own lifespan (see the module docstring).
    """

    def __init__(self, server: MCPServer[Any], host: str, max_request_bytes: int,
                 aliases: AliasResolver | None = None) -> None:
        # The SDK's app builds the session manager, with DNS-rebinding protection when host is a loopback
        # address; only its lifespan and its handler are used, so no path of its own routing applies.
        self._standalone = server.streamable_http_app(stateless_http=True, json_response=True, host=host,
                                                      max_request_body_size=max_request_bytes)
        self._handler = StreamableHTTPASGIApp(server.session_manager)
        self._manager = server.session_manager
        self._aliases = aliases

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the session manager: enter once, in the host's lifespan, after the engine is open."""
        try:
            async with self._manager.run():
                yield
        finally:
            if self._aliases is not None:
                await self._aliases.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # served on its own: the SDK's app runs the session manager
            await self._standalone(scope, receive, send)
            return
        # the session's bank: mounted at /mcp/{bank_id}/, or an X-Bank-Id header (as upstream)
        headers = dict(scope.get("headers") or ())
        named = (scope.get("path_params") or {}).get("bank_id") or headers.get(b"x-bank-id", b"").decode("latin-1")
        token, asker = session_bank.set(named or None), session_asker.set(who(scope))
        try:
            await self._handler(scope, receive, send)
        finally:
            session_asker.reset(asker)
            session_bank.reset(token)


def mcp_app(engine: Engine, *, host: str = "127.0.0.1", max_request_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE,
            aliases: AliasResolver | None = None) -> McpHttpApp:
    """The MCP tools over ``engine`` as an ASGI app for streamable HTTP; the host opens and closes the engine.

    :param engine: the engine, opened by the host (in its lifespan) before the first request.
    :param host: the address the host binds; for a loopback address, requests whose Host or Origin
        header names another host are refused (DNS-rebinding protection).
    :param max_request_bytes: a larger request body is refused with 413 (the SDK's default: 4 MiB).
    :param aliases: the host's bank-alias resolver, if it has one (else the app keeps its own, closed
        when :meth:`McpHttpApp.running` ends).
    """
    own = aliases is None
    aliases = aliases or engine.aliases.resolver()
    return McpHttpApp(build_server(engine, aliases=aliases), host, max_request_bytes, aliases if own else None)


async def serve_stdio(engine: Engine) -> None:
    """Serve the tools over stdin/stdout until the client closes stdin; opens and closes ``engine``.

    :param engine: an engine not yet opened.
    """
    await build_server(engine, owned=True).run_stdio_async()
