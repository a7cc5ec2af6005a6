"""What every MCP tool shares: the engine once it is open, the call's bank, the HTTP routes' answers to errors,
and each write recorded in the audit log.

A tool makes the engine calls the HTTP route that does the same thing makes, so a memory, a bank or an
operation reads the same over MCP as over HTTP (the same ids, the same fields, this project's own among
them), and an error comes back as a tool error with the route's message. The bank is resolved as for
HTTP (an alias names its bank), and a write is recorded in the audit log as its route's entry would be,
with transport ``mcp`` and who asked over streamable HTTP (no one over stdio).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from ..engine import Engine
from ..engine.aliases import AliasResolver
from ..engine.banks import validate_bank_id
from ..errors import InvalidRequest, redact
from .audit import record_call
from .errors import classify
from .metrics import ServiceMetrics
from .ops import ServiceState

log = logging.getLogger("hindsight_recall.service")

#: the bank a streamable-HTTP session names (path or header), for tools called without ``bank_id``
session_bank: ContextVar[str | None] = ContextVar("session_bank", default=None)
#: who asked, for a streamable-HTTP session (see :func:`~.audit.who`): what a write's audit entry keeps
session_asker: ContextVar[dict[str, Any] | None] = ContextVar("session_asker", default=None)
#: who asked over stdio: no address, agent or key
NO_ONE = {"client": None, "user_agent": None, "api_key": None}
#: every bank-scoped route's path starts here (what a write's audit entry names)
BANKS = "/v1/default/banks/"


@dataclass
class Call:
    """One tool call: the engine, the bank's own id, and (a write) the answer its route would give."""

    engine: Engine
    bank: str
    #: the id the call named when it was an alias of :attr:`bank`
    alias: str | None = None
    answer: Any = None


def tool_error(exc: Exception) -> ToolError:
    """``exc`` as the tool error that carries the HTTP route's message for it (a defect is logged here)."""
    if isinstance(exc, ToolError):
        return exc
    error = classify(exc)
    if error.status >= 500 and error.code == "internal_error":
        log.error("an MCP tool call failed: %s", redact(f"{type(exc).__name__}: {exc}"),
                  exc_info=(type(exc), exc, exc.__traceback__))
    return ToolError(redact(error.message))


class ToolCalls:
    """The tools' way to the engine (see the module docstring).

    :param ready: the engine once it is open (a tool error saying why it did not open).
    :param aliases: the resolver of bank aliases.
    :param default_bank: the bank of a call that names none, in a session that names none.
    """

    def __init__(self, ready: Callable[[], Awaitable[Engine]], aliases: AliasResolver, default_bank: str) -> None:
        self._ready, self.aliases, self.default_bank = ready, aliases, default_bank
        #: the recalls the tools have admitted (bounded apart from the HTTP routes')
        self.service, self.metrics = ServiceState(ready=True), ServiceMetrics()

    def bank(self, bank_id: str | None) -> str:
        """The call's bank, else the session's, else the default; checked as HTTP checks a bank id."""
        chosen = bank_id if bank_id is not None else session_bank.get() or self.default_bank
        try:
            return validate_bank_id(chosen)
        except InvalidRequest as exc:
            raise ToolError(str(exc)) from None

    @asynccontextmanager
    async def engine(self) -> AsyncIterator[Engine]:
        """The engine for a call about no one bank; an error in the block is a tool error."""
        engine = await self._ready()
        try:
            yield engine
        except Exception as exc:
            raise tool_error(exc) from None

    @asynccontextmanager
    async def reading(self, bank_id: str | None) -> AsyncIterator[Call]:
        """A read of the bank the call names; an error in the block is a tool error."""
        call = await self._call(bank_id)
        try:
            yield call
        except Exception as exc:
            raise tool_error(exc) from None

    @asynccontextmanager
    async def writing(self, bank_id: str | None, action: str, method: str, path: str, body: Any = None, *,
                      renames: bool = False) -> AsyncIterator[Call]:
        """A write to the bank the call names, recorded in the audit log as ``action`` of the route ``method``
        ``path`` (relative to the bank) sent ``body``; the block sets :attr:`Call.answer`. An error in the
        block is recorded with its status and the route's error body, then raised as a tool error.

        :param renames: the write may change the bank's aliases (a bank created or deleted): the resolver
            reloads them before the answer, as it does after the same HTTP request.
        """
        call = await self._call(bank_id)
        started, status, failure = datetime.now(UTC), 200, None
        try:
            yield call
        except asyncio.CancelledError:  # cut short: no answer, nothing to record
            raise
        except Exception as exc:
            error = classify(exc)
            message = redact(error.message)
            status, failure = error.status, exc
            call.answer = {"code": error.code, "message": message, "detail": message}
        if renames:
            await self.aliases.refresh()
        asker = {**(session_asker.get() or NO_ONE), "alias": call.alias}
        await record_call(call.engine, bank_id=call.bank, action=action, started=started, request=body,
                          response=call.answer, status=status, method=method, path=f"{BANKS}{call.bank}{path}",
                          asker=asker)
        if failure is not None:
            raise tool_error(failure) from None

    async def _call(self, bank_id: str | None) -> Call:
        engine = await self._ready()
        named = self.bank(bank_id)
        try:
            bank = await self.aliases.resolve(named)
        except Exception as exc:
            raise tool_error(exc) from None
        return Call(engine, bank, named if bank != named else None)

