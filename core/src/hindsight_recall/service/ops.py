"""What every request passes through: authentication, size limits, the timeout, readiness, metrics and
the access log. One pure ASGI middleware, so a request pays for no extra task or stream hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import Match, Route

from ..settings import Settings
from .errors import ServiceError, error_response, respond_to
from .metrics import ServiceMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("hindsight_recall.access")

#: answered before the engine is ready and without the API key: probes must work unauthenticated
PROBES = frozenset({"/health", "/health/live", "/health/ready", "/version", "/v1/version"})


@dataclass
class ServiceState:
    """What the routes share: readiness, the recalls in flight, and why start-up failed (if it did)."""

    ready: bool = False
    failure: str | None = None
    recalls_in_flight: int = 0
    #: notified whenever a recall's slot comes free
    slot_freed: asyncio.Condition | None = None
    routes: list[Route] = field(default_factory=list)


class Admission:
    """At most ``limit`` recalls admitted at once; one more waits for a slot up to ``Retry-After`` seconds,
    then is refused with 503 and ``Retry-After``.

    Recalls beyond RECALL_MAX_CONCURRENT wait inside the engine; this bound keeps that wait short and
    the queue from growing without limit (backpressure, not buffering). The short wait for a slot keeps
    clients that retry at once (most load generators, many agents) from turning the server's time into
    refusals: refused in a loop, they would leave the recalls in flight too little of the event loop to
    finish, and the server would answer little but 503.
    """

    def __init__(self, state: ServiceState, settings: Settings, metrics: ServiceMetrics) -> None:
        self.state, self.limit, self.metrics = state, settings.service_max_recalls_in_flight, metrics
        self.wait = settings.service_retry_after
        self.retry_after = str(settings.service_retry_after)

    async def __aenter__(self) -> Admission:
        if self.state.recalls_in_flight >= self.limit and not await self._slot_freed():
            self.metrics.rejected.inc()
            raise ServiceError(503, "overloaded", f"{self.limit} recalls are in flight "
                               "(HINDSIGHT_API_SERVICE_MAX_RECALLS_IN_FLIGHT); retry shortly",
                               {"Retry-After": self.retry_after})
        self.state.recalls_in_flight += 1
        self.metrics.in_flight.set(self.state.recalls_in_flight)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.state.recalls_in_flight -= 1
        self.metrics.in_flight.set(self.state.recalls_in_flight)
        async with self._freed():
            self._freed().notify()

    async def _slot_freed(self) -> bool:
        """Wait up to :attr:`wait` seconds for a free slot; whether one came."""
        freed = self._freed()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.wait), freed:
                await freed.wait_for(lambda: self.state.recalls_in_flight < self.limit)
                return True
        return False

    def _freed(self) -> asyncio.Condition:
        if self.state.slot_freed is None:  # made on the event loop that uses it
            self.state.slot_freed = asyncio.Condition()
        return self.state.slot_freed


class Guard:
    """The outermost layer of the service (see the module docstring)."""

    def __init__(self, app: ASGIApp, settings: Settings, state: ServiceState, metrics: ServiceMetrics,
                 console: Callable[[str], bool] | None = None) -> None:
        self.app, self.state, self.metrics = app, state, metrics
        key = settings.service_api_key.get_secret_value() if settings.service_api_key else ""
        self.expected = f"Bearer {key}".encode() if key else b""
        self.max_body = settings.service_max_body_bytes
        self.max_query = settings.service_max_query_bytes
        self.timeout = settings.service_request_timeout or None
        self.log_format = settings.service_access_log
        self.retry_after = str(max(settings.service_retry_after, 1))
        # the console (the paths ``console`` accepts) checks the key itself: the header, or the cookie its
        # login form sets
        self.console = console if settings.console_enabled else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        sent: dict[str, Any] = {"status": 500, "started": False}
        self.metrics.requests_in_flight.inc()

        async def send_tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"], sent["started"] = message["status"], True
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                await error_response(refusal, scope)(scope, receive, send_tracked)
            else:
                async with asyncio.timeout(self.timeout):
                    await self.app(scope, self._limited(scope, receive), send_tracked)
        except TimeoutError:
            late = ServiceError(504, "timeout", f"the request took longer than {self.timeout:g} s "
                                "(HINDSIGHT_API_SERVICE_REQUEST_TIMEOUT)")
            await self._fail(late, scope, receive, send_tracked, sent)
        except asyncio.CancelledError:
            # the server is stopping and its grace period (SERVICE_SHUTDOWN_TIMEOUT) is over: what the
            # request was writing rolled back, so the client is told to send it again
            if sent["started"]:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            cut = ServiceError(503, "shutting_down", "the server stopped before the request finished; nothing "
                               "it would have written was kept: send it again", {"Retry-After": self.retry_after})
            await self._fail(cut, scope, receive, send_tracked, sent)
        except Exception as exc:  # a body over the limit read outside a route, or a defect (logged)
            await self._fail(exc, scope, receive, send_tracked, sent)
        finally:
            self.metrics.requests_in_flight.dec()
            self._record(scope, sent["status"], time.perf_counter() - started)

    def _refusal(self, scope: Scope) -> ServiceError | None:
        """Why a request is answered before it reaches a route: size, authentication, readiness."""
        if len(scope.get("query_string", b"")) > self.max_query:
            return ServiceError(413, "query_string_too_large", f"the query string exceeds {self.max_query} bytes "
                                "(HINDSIGHT_API_SERVICE_MAX_QUERY_BYTES)")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return ServiceError(413, "body_too_large", f"the request body exceeds {self.max_body} bytes "
                                "(HINDSIGHT_API_SERVICE_MAX_BODY_BYTES)")
        path = scope["path"]
        if path in PROBES:
            return None
        console = self.console is not None and self.console(path)
        if self.expected and not console and not hmac.compare_digest(
                dict(scope["headers"]).get(b"authorization", b""), self.expected):
            return ServiceError(401, "unauthorized", "missing or wrong API key: send 'Authorization: Bearer <key>' "
                                "(the server's HINDSIGHT_API_SERVICE_API_KEY)", {"WWW-Authenticate": "Bearer"})
        if not self.state.ready and path != "/metrics":
            why = self.state.failure or "the service is still loading the model and warming the database pool"
            return ServiceError(503, "not_ready", why, {"Retry-After": "2"})
        return None

    def _limited(self, scope: Scope, receive: Receive) -> Receive:
        """``receive``, counting body bytes: a body without a Content-Length is cut off at the limit."""
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise ServiceError(413, "body_too_large", f"the request body exceeds {self.max_body} bytes "
                                       "(HINDSIGHT_API_SERVICE_MAX_BODY_BYTES)")
            return message

        return counted

    async def _fail(self, exc: BaseException, scope: Scope, receive: Receive, send: Send, sent: dict[str, Any]) -> None:
        if sent["started"]:  # the response is half sent: all that is left is to drop the connection
            raise exc
        await respond_to(exc, scope)(scope, receive, send)

    def _route(self, scope: Scope) -> str:
        """The matched route's path template (a bounded metric label); ``unmatched`` for a 404."""
        for route in self.state.routes:
            if route.matches(scope)[0] == Match.FULL:
                return route.path
        return "unmatched"

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        method = scope.get("method", "")
        self.metrics.record_request(method, self._route(scope), status, seconds)
        if self.log_format == "off":
            return
        bank = (scope.get("path_params") or {}).get("bank_id", "-")
        ms = round(seconds * 1000, 2)
        if self.log_format == "json":
            access_log.info(json.dumps({"method": method, "path": scope["path"], "status": status, "ms": ms,
                                        "bank": bank}, ensure_ascii=False))
        else:
            access_log.info("%s %s %d %.2fms bank=%s", method, scope["path"], status, ms, bank)
