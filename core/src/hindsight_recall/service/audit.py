"""The audit log: every write to a bank recorded (who, what, when), and upstream's routes that read it.

:class:`AuditLog` sits between alias routing and the routes, so the bank it records is the bank's own
id. A write is any request to a bank's route in :data:`ACTIONS` (upstream's action names); reads that
travel as POST (recall, reflect, the model's probe) are not writes. The entry is stored as the answer's
last part goes out, so a caller that has the answer finds its entry (it costs the write one insert). It
holds the request and response bodies (up to :data:`MAX_KEPT_BYTES` each), the answer's status, and who
asked: the client's address, its user agent, the fingerprint of its API key (never the key) and the alias
it named. Failed writes are recorded too. Entries stay after their bank is deleted, so its deletion
stays on record. AUDIT_LOG_ENABLED=false records nothing.

The MCP tools' writes are recorded too, with transport ``mcp``: each as the entry of the route that makes
the same write (its action, method, path, bodies and status), by :func:`record_call`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route

from ..engine import Engine
from ..engine.audit import PERIODS
from ._params import bounded_int, date_query, path_text
from .base import bank_of, choice_query, endpoint, engine_of, text_query
from .errors import ServiceError
from .ops import Message, Receive, Scope, Send
from .wire import answer

log = logging.getLogger("hindsight_recall.service")

B = "/v1/default/banks/{bank_id}"
#: (method, route) -> upstream's name of the write it records
ACTIONS: dict[tuple[str, str], str] = {
    ("PUT", B): "create_bank", ("PATCH", B): "update_bank", ("DELETE", B): "delete_bank",
    ("PUT", f"{B}/profile"): "update_bank", ("POST", f"{B}/background"): "update_bank",
    ("PATCH", f"{B}/config"): "update_bank_config", ("DELETE", f"{B}/config"): "reset_bank_config",
    ("POST", f"{B}/memories"): "retain", ("POST", f"{B}/files/retain"): "file_retain",
    ("DELETE", f"{B}/memories"): "clear_memories",
    ("PATCH", f"{B}/memories/{{memory_id}}"): "update_memory",
    ("DELETE", f"{B}/memories/{{memory_id}}"): "delete_memory",
    ("PATCH", f"{B}/documents/{{document_id:path}}"): "update_document",
    ("DELETE", f"{B}/documents/{{document_id:path}}"): "delete_document",
    ("POST", f"{B}/documents/{{document_id:path}}/reprocess"): "reprocess_document",
    ("DELETE", f"{B}/operations/{{operation_id}}"): "cancel_operation",
    ("POST", f"{B}/operations/{{operation_id}}/retry"): "retry_operation",
    ("DELETE", f"{B}/operations/{{operation_id}}/delete"): "delete_operation",
    ("POST", f"{B}/aliases"): "create_bank_alias", ("PATCH", f"{B}/aliases/{{alias}}"): "set_bank_alias_primary",
    ("DELETE", f"{B}/aliases/{{alias}}"): "delete_bank_alias",
    ("POST", f"{B}/directives"): "create_directive", ("PATCH", f"{B}/directives/{{directive_id}}"): "update_directive",
    ("DELETE", f"{B}/directives/{{directive_id}}"): "delete_directive",
    ("POST", f"{B}/webhooks"): "create_webhook", ("PATCH", f"{B}/webhooks/{{webhook_id}}"): "update_webhook",
    ("DELETE", f"{B}/webhooks/{{webhook_id}}"): "delete_webhook",
    ("PATCH", f"{B}/mental-models/{{mental_model_id}}"): "update_mental_model",
    ("DELETE", f"{B}/mental-models/{{mental_model_id}}"): "delete_mental_model",
    ("POST", f"{B}/mental-models/{{mental_model_id}}/clear"): "clear_mental_model",
    ("PATCH", f"{B}/knowledge-base/nodes/{{node_id}}"): "update_knowledge_node",
    ("DELETE", f"{B}/knowledge-base/nodes/{{node_id}}"): "delete_knowledge_node",
    ("POST", f"{B}/import"): "import_bank_template", ("POST", f"{B}/transfer/import"): "import_bank_transfer",
    ("POST", f"{B}/transfer/export"): "export_bank_transfer", ("POST", f"{B}/clone"): "clone_bank",
    ("POST", f"{B}/document-transfer"): "import_documents",
    ("POST", f"{B}/document-transfer/export"): "export_documents",
    ("DELETE", f"{B}/observations"): "clear_observations",
    ("DELETE", f"{B}/memories/{{memory_id}}/observations"): "clear_memory_observations",
}
#: the most bytes of a request or response body an entry keeps (a larger one is kept as its size)
MAX_KEPT_BYTES = 64 * 1024


def _kept(body: bytearray, size: int, content_type: str) -> Any:
    """A body as an entry keeps it: its JSON, or its size when it is not JSON or too large."""
    if size and size <= MAX_KEPT_BYTES and "json" in content_type:
        try:
            value = json.loads(body)
        except ValueError:
            pass
        else:
            return value if isinstance(value, dict) else {"body": value}
    return {"bytes": size, "content_type": content_type} if size else None


def kept_json(value: Any) -> Any:
    """A JSON body given as its value (not its bytes), as an entry keeps it."""
    if value is None:
        return None
    raw = json.dumps(value).encode()
    return _kept(bytearray(raw), len(raw), "application/json")


def who(scope: Scope) -> dict[str, Any]:
    """Who asked: address, user agent, the API key's fingerprint, the alias named."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()}
    token = headers.get("authorization", "").removeprefix("Bearer ").strip()
    client = scope.get("client")
    return {"client": client[0] if client else None, "user_agent": headers.get("user-agent"),
            "api_key": f"sha256:{hashlib.sha256(token.encode()).hexdigest()[:12]}" if token else None,
            "alias": scope.get("hindsight.alias")}


class AuditLog:
    """ASGI step recording each write (see the module docstring).

    :param app: the routed application (its ``routes`` name the action).
    :param engine: where entries are stored.
    :param transport: ``http``, or ``mcp`` for the MCP tools' calls.
    """

    def __init__(self, app: Any, engine: Engine, transport: str) -> None:
        self.app, self.engine, self.transport = app, engine, transport

    @property
    def state(self) -> Any:
        return self.app.state

    def _action(self, scope: Scope) -> tuple[str, dict[str, Any]] | None:
        method = scope.get("method", "")
        if scope["type"] != "http" or method in ("GET", "HEAD", "OPTIONS"):
            return None
        if not self.engine.settings.audit_log_enabled:
            return None
        for route in self.app.routes:
            if isinstance(route, Route):
                match, child = route.matches(scope)
                if match == Match.FULL:
                    action = ACTIONS.get((method, route.path))
                    return None if action is None else (action, child.get("path_params", {}))
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._action(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        action, params = found
        started = datetime.now(UTC)
        sent: dict[str, Any] = {"status": 500, "type": "", "size": 0, "body": bytearray()}
        taken: dict[str, Any] = {"size": 0, "body": bytearray()}

        async def reading() -> Message:
            message = await receive()
            chunk = message.get("body", b"")
            taken["size"] += len(chunk)
            if len(taken["body"]) <= MAX_KEPT_BYTES:
                taken["body"] += chunk
            return message

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
                sent["type"] = dict(message.get("headers") or ()).get(b"content-type", b"").decode("latin-1")
            elif message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                sent["size"] += len(chunk)
                if len(sent["body"]) <= MAX_KEPT_BYTES:
                    sent["body"] += chunk
                if not message.get("more_body"):  # recorded before the answer ends: a caller that got it
                    sent["recorded"] = True       # finds the entry
                    await self._record(self._entry(scope, action, params, started, taken, sent))
            await send(message)

        try:
            await self.app(scope, reading, sending)
        except asyncio.CancelledError:  # cut short (a timeout, a shutdown): no answer to record
            raise
        except BaseException:
            if not sent.get("recorded"):
                await self._record(self._entry(scope, action, params, started, taken, sent))
            raise

    def _entry(self, scope: Scope, action: str, params: dict[str, Any], started: datetime, taken: dict[str, Any],
               sent: dict[str, Any]) -> dict[str, Any]:
        request_type = dict(scope.get("headers") or ()).get(b"content-type", b"").decode("latin-1")
        return {"bank_id": params.get("bank_id", ""), "action": action, "transport": self.transport,
                "started_at": started, "ended_at": datetime.now(UTC),
                "request": _kept(taken["body"], int(taken["size"]), request_type),
                "response": _kept(sent["body"], int(sent["size"]), sent["type"]),
                "metadata": {**who(scope), "method": scope["method"], "path": scope["path"],
                             "status_code": sent["status"]}}

    async def _record(self, entry: dict[str, Any]) -> None:
        await _record(self.engine, entry)


async def _record(engine: Engine, entry: dict[str, Any]) -> None:
    try:
        await engine.audit.record(entry)
    except Exception as exc:  # the write itself is done; losing its record is logged, not answered
        log.warning("recording %s of bank %s in the audit log failed: %s", entry["action"], entry["bank_id"], exc)


async def record_call(engine: Engine, *, bank_id: str, action: str, started: datetime, request: Any, response: Any,
                      status: int, method: str, path: str, asker: dict[str, Any]) -> None:
    """Record a write made without a request of its own (an MCP tool's), as its route's entry would be.

    :param request: the body the route would have been sent; :param response: the body it would have answered.
    :param asker: who asked (see :func:`who`: address, user agent, key fingerprint, alias).
    """
    if not engine.settings.audit_log_enabled:
        return
    await _record(engine, {
        "bank_id": bank_id, "action": action, "transport": "mcp", "started_at": started,
        "ended_at": datetime.now(UTC), "request": kept_json(request), "response": kept_json(response),
        "metadata": {**asker, "method": method, "path": path, "status_code": status}})


async def _known_bank(request: Request) -> str:
    bank_id = bank_of(request)
    if not await engine_of(request).audit.known(bank_id):
        raise ServiceError(404, "bank_not_found", f"Bank '{bank_id}' not found")
    return bank_id


@endpoint
async def list_audit_logs(request: Request) -> Response:
    """Newest first; ``action``, ``transport``, ``start_date`` (inclusive), ``end_date`` (exclusive)."""
    options: dict[str, Any] = dict(
        action=text_query(request, "action", max_chars=100), transport=choice_query(request, "transport",
                                                                                      ("http", "mcp", "system")),
        start=date_query(request, "start_date"), end=date_query(request, "end_date"),
        limit=bounded_int(request, "limit", 50, minimum=1, maximum=500), offset=bounded_int(request, "offset", 0))
    bank_id = await _known_bank(request)
    items, total = await engine_of(request).audit.page(bank_id, **options)
    return answer(request, "AuditLogListResponse", {"bank_id": bank_id, "total": total, "limit": options["limit"],
                                                    "offset": options["offset"], "items": items})


@endpoint
async def audit_log_stats(request: Request) -> Response:
    """Entries per UTC day and action over ``period`` (``1d``, ``7d``, ``30d``); another period reads as 7d."""
    action = text_query(request, "action", max_chars=100)
    period = text_query(request, "period") or "7d"
    period = period if period in PERIODS else "7d"
    bank_id = await _known_bank(request)
    start = datetime.now(UTC) - PERIODS[period]
    buckets = await engine_of(request).audit.stats(bank_id, action=action, start=start)
    return answer(request, "AuditLogStatsResponse", {"bank_id": bank_id, "period": period, "trunc": "day",
                                                     "start": start.isoformat(), "buckets": buckets})


@endpoint
async def get_audit_log(request: Request) -> Response:
    """One entry with its request and response bodies."""
    raw = path_text(request, "log_id")
    bank_id = await _known_bank(request)
    try:
        log_id = uuid.UUID(raw)
    except ValueError:
        log_id = None
    found = None
    if log_id is not None:
        found = await engine_of(request).audit.get(bank_id, log_id)
    if found is None:
        raise ServiceError(404, "audit_log_not_found", f"Audit log entry '{raw}' not found")
    return answer(request, "AuditLogEntry", found)


def routes(banks_path: str) -> list[Route]:
    path = f"{banks_path}/audit-logs"
    return [
        Route(path, list_audit_logs, methods=["GET"]),
        Route(f"{path}/stats", audit_log_stats, methods=["GET"]),
        Route(f"{path}/{{log_id}}", get_audit_log, methods=["GET"]),
    ]
