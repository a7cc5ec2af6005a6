"""The MCP server: ``recall``, ``retain``, ``list_banks`` and ``bank_stats`` as tools over one engine.

Built on the official ``mcp`` SDK (2.x, ``MCPServer``). Tool results are structured JSON (the
same dicts the engine returns); an error a caller can fix (a bad argument, an unknown bank, an
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
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, suppress
from importlib.metadata import version
from inspect import signature
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from ..errors import BankNotFound, RetainError
from ..retain.memories import parse_memory
from ..types import Budget, FactType, Memory, TagsMatch

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from ..engine import Engine

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Long-term memory. Call `recall` with a question to get the stored memories most relevant to it "
    "(ranked, packed into max_tokens); call `retain` to store new memories verbatim in a bank; "
    "`list_banks` shows the banks."
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
                                             "that memory. Default: derived from document_id, context, timestamp "
                                             "and content, so sending the same memory twice stores it once.")
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


def memory_from_item(item: MemoryItem, index: int) -> Memory:
    """Validate one retain item into a :class:`Memory`; errors name ``memories[index].<field>``.

    :param item: the item as the tool received it.
    :param index: its position in the call, for error messages.
    """
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
    obj["id"] = item.id if item.id is not None else _content_id(item)
    try:
        return parse_memory(obj)[1]
    except RetainError as exc:
        raise RetainError(None, f"memories[{index}].{exc.field}", exc.why) from None


def _content_id(item: MemoryItem) -> str:
    """A stable id for an item without one: the same memory sent twice is one memory."""
    key = json.dumps([item.document_id, item.context, item.timestamp, item.content], ensure_ascii=False)
    return "m-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


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

    def __init__(self, engine: Engine, owned: bool) -> None:
        self.engine, self.owned = engine, owned
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
        from ..errors import describe_error
        from ..settings import redact

        log.error("the engine did not open: %s", describe_error(error) or redact(f"{type(error).__name__}: {error}"))


def build_server(engine: Engine, *, owned: bool = False) -> MCPServer[Any]:
    """The MCP server with its tools over ``engine``.

    :param engine: the engine the tools call.
    :param owned: open the engine when the server starts and close it when it stops (stdio); else
        the caller opens it before the first tool call and closes it after the last.
    """
    slot = _EngineSlot(engine, owned)
    server: MCPServer[Any] = MCPServer(
        "hindsight-recall", version=version("hindsight-recall"), instructions=INSTRUCTIONS,
        log_level="WARNING", lifespan=slot.lifespan,
    )
    reading = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=reading)
    async def recall(
        bank_id: Annotated[str, Field(description="The bank to search.")],
        query: Annotated[str, Field(description="The question, in natural language.")],
        budget: Annotated[Budget, Field(description="How hard to search.")] = Budget.MID,
        max_tokens: Annotated[int, Field(ge=1, description="Pack the results into this many tokens.")] = 4096,
        types: Annotated[list[FactType] | None, Field(description="Fact types to search (default: all).")] = None,
        tags: Annotated[list[str] | None, Field(description="Only memories with these tags (see tags_match).")]
        = None,
        tags_match: Annotated[TagsMatch, Field(description="How tags filter: any and all also keep untagged "
                                                           "memories; the _strict forms do not.")] = TagsMatch.ANY,
        query_timestamp: Annotated[str | None, Field(description="ISO-8601 'now' for relative dates and "
                                                                 "recency (default: the current time).")] = None,
        limit: Annotated[int | None, Field(ge=1, description="Keep at most this many results.")] = None,
        include_entities: Annotated[int | None, Field(ge=0, description="Token budget for the entities map; "
                                                                        "null leaves it out.")] = 500,
        include_chunks: Annotated[int | None, Field(ge=0, description="Token budget for the source chunks; "
                                                                      "null (default) leaves them out.")] = None,
        trace: Annotated[bool, Field(description="Include the trace of every recall phase.")] = False,
    ) -> dict[str, Any]:
        """Find the memories of a bank most relevant to a question, ranked, within max_tokens."""
        with _tool_errors():
            return await (await slot.get()).recall(
                bank_id, query, budget=budget, max_tokens=max_tokens, types=types and [t.value for t in types],
                tags=tags, tags_match=tags_match, query_timestamp=query_timestamp, limit=limit,
                include_entities=include_entities, include_chunks=include_chunks, trace=trace,
            )

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False))
    async def retain(
        bank_id: Annotated[str, Field(description="The bank to store into; created if new.")],
        memories: Annotated[list[MemoryItem], Field(min_length=1, description="The memories to store.")],
    ) -> dict[str, Any]:
        """Store memories in a bank verbatim (all or nothing); returns their ids."""
        with _tool_errors():
            items = [memory_from_item(item, i) for i, item in enumerate(memories)]
            stats = await (await slot.get()).retain(bank_id, items, progress=False)
        return {"bank_id": bank_id, "memories": stats.memories, "ids": [m.id for m in items],
                "links": stats.links, "seconds": round(stats.seconds, 4)}

    @server.tool(annotations=reading)
    async def list_banks() -> dict[str, Any]:
        """List the banks with their memory counts."""
        with _tool_errors():
            return {"banks": await (await slot.get()).list_banks()}

    @server.tool(annotations=reading)
    async def bank_stats(
        bank_id: Annotated[str, Field(description="The bank.")],
    ) -> dict[str, Any]:
        """What a bank holds: memories by type, entities, chunks, documents, links and its settings."""
        with _tool_errors():
            stats = await (await slot.get()).bank_stats(bank_id)
            if stats is None:
                raise BankNotFound(bank_id)
            return stats

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    async def reflect(
        bank_id: Annotated[str, Field(description="The bank to reflect in.")],
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
    ) -> dict[str, Any]:
        """Answer a question from a bank's memories with the configured chat model, citing the memories used.

        One recall, one answer: the model reads what recall returns and nothing else. Without a
        chat model configured (HINDSIGHT_API_LLM_*), the call fails and says what to set.
        """
        from ..reflect import reflector_for

        with _tool_errors():
            result = await reflector_for(await slot.get()).reflect(
                bank_id, query, budget=budget.value, context=context, max_tokens=max_tokens, tags=tags,
                tags_match=tags_match.value, response_schema=response_schema, include_facts=include_based_on,
                include_trace=include_trace,
            )
        return {k: v for k, v in result.items()
                if (k != "based_on" or include_based_on) and (k != "trace" or include_trace)}

    tools = (recall, retain, list_banks, bank_stats, reflect)
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

    def __init__(self, server: MCPServer[Any], host: str, max_request_bytes: int) -> None:
        # The SDK's app builds the session manager, with DNS-rebinding protection when host is a loopback
        # address; only its lifespan and its handler are used, so no path of its own routing applies.
        self._standalone = server.streamable_http_app(stateless_http=True, json_response=True, host=host,
                                                      max_request_body_size=max_request_bytes)
        self._handler = StreamableHTTPASGIApp(server.session_manager)
        self._manager = server.session_manager

    def running(self) -> AbstractAsyncContextManager[None]:
        """Run the session manager: enter once, in the host's lifespan, after the engine is open."""
        return self._manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # served on its own: the SDK's app runs the session manager
            await self._standalone(scope, receive, send)
        else:
            await self._handler(scope, receive, send)


def mcp_app(engine: Engine, *, host: str = "127.0.0.1",
            max_request_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> McpHttpApp:
    """The MCP tools over ``engine`` as an ASGI app for streamable HTTP; the host opens and closes the engine.

    :param engine: the engine, opened by the host (in its lifespan) before the first request.
    :param host: the address the host binds; for a loopback address, requests whose Host or Origin
        header names another host are refused (DNS-rebinding protection).
    :param max_request_bytes: a larger request body is refused with 413 (the SDK's default: 4 MiB).
    """
    return McpHttpApp(build_server(engine), host, max_request_bytes)


async def serve_stdio(engine: Engine) -> None:
    """Serve the tools over stdin/stdout until the client closes stdin; opens and closes ``engine``.

    :param engine: an engine not yet opened.
    """
    await build_server(engine, owned=True).run_stdio_async()
