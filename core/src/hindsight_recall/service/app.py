"""The ASGI application of ``hindsight-recall serve``: one engine, loaded once, behind :class:`~.ops.Guard`.

The server listens at once: ``/health/live`` answers while the engine loads in the background, and
``/health/ready`` (and every memory route) only once the embedding model is loaded and the pool warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..engine import Engine
from ..errors import redact
from ..reflect import close_reflector
from ..settings import Settings, load_settings
from .aliases import AliasRouting
from .audit import AuditLog
from .console import console_routes
from .console.auth import is_console_path
from .errors import http_error
from .metrics import ServiceMetrics
from .ops import Guard, ServiceState
from .routes import api_routes
from .wire import answer
from .worker import Worker

log = logging.getLogger("hindsight_recall.service")

#: the upstream API version whose subset is served
UPSTREAM_API_VERSION = "1.1.0"


@functools.cache
def _version() -> str:
    # read once: each look-up reads the installed packages' metadata files, and every file call lets
    # a busy worker thread hold the interpreter again, so a probe answered while one works was slow
    try:
        return version("hindsight-recall")
    except PackageNotFoundError:  # pragma: no cover - a source checkout without metadata
        return "0"


async def health(request: Request) -> Response:
    """Ready: the engine is loaded and the database answers now (a probe while it is away says so, and
    starts its recovery)."""
    state: ServiceState = request.app.state.service
    if not state.ready:
        return JSONResponse({"status": "unhealthy", "reason": state.failure or "starting"}, status_code=503,
                            headers={"Retry-After": "2"})
    problem = await request.app.state.engine.ping()
    if problem is not None:
        return JSONResponse({"status": "unhealthy", "database": "disconnected", "reason": problem},
                            status_code=503, headers={"Retry-After": "2"})
    return JSONResponse({"status": "healthy", "database": "connected"})


#: when this process started, for the liveness probe's ``uptime_seconds``
STARTED = time.monotonic()


def _server() -> dict[str, str]:
    """Ours beside upstream's version fields: what answers (with the extras header)."""
    return {"server": "hindsight-recall", "server_version": _version()}


async def live(request: Request) -> Response:
    """Upstream's liveness probe: the process answers; no database access."""
    return answer(request, "LivenessResponse", {
        "status": "alive", "version": UPSTREAM_API_VERSION,
        "uptime_seconds": round(time.monotonic() - STARTED, 1), **_server()})


async def version_info(request: Request) -> Response:
    """Upstream's feature flags, true for what this server serves."""
    settings = request.app.state.engine.settings
    return answer(request, "VersionResponse", {
        "api_version": UPSTREAM_API_VERSION,
        "features": {"observations": False, "mcp": request.app.state.mcp,
                     "worker": request.app.state.worker.slots > 0, "bank_config_api": True,
                     "bank_llm_health": True, "file_upload_api": settings.enable_file_upload_api,
                     "document_export_api": True,
                     "document_import_api": True, "audit_log": settings.audit_log_enabled, "llm_trace": False,
                     "store_document_text": True},
        **_server(),
    })


async def metrics(request: Request) -> Response:
    body = await asyncio.to_thread(request.app.state.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def create_app(settings: Settings | None = None) -> Any:
    """The service as an ASGI application.

    :param settings: core settings (default: read from ``HINDSIGHT_API_*``).
    """
    settings = settings or load_settings()
    # the date finder loads once the service is ready (_load): its ~2 s of Python would hold the GIL
    # against the start-up
    engine = Engine(settings, warm_date_finder=False)
    state = ServiceState()
    resolver = engine.aliases.resolver()
    service_metrics = ServiceMetrics()
    service_metrics.watch_pool(engine)
    service_metrics.watch_extraction(engine)
    service_metrics.watch_query_vectors(engine)
    routes: list[Any] = [
        Route("/health", health), Route("/health/ready", health), Route("/health/live", live),
        Route("/version", version_info), Route("/v1/version", version_info), Route("/metrics", metrics),
        *api_routes(), *console_routes(settings),
    ]
    from .mcp import mcp_app

    # the MCP tools over the same engine, streamable HTTP at exactly /mcp
    mcp = mcp_app(engine, host=settings.host, max_request_bytes=settings.service_max_body_bytes, aliases=resolver)
    routes += [Route("/mcp", mcp), Route("/mcp/", mcp), Route("/mcp/{bank_id}/", mcp)]

    worker = Worker(engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loading = asyncio.create_task(_load(engine, state))
        working = asyncio.create_task(_work(loading, state, worker))
        # Starlette runs no lifespan of a routed app: the MCP session manager runs in this one (the
        # guard keeps /mcp answering 503 until the engine is open)
        async with mcp.running():
            try:
                yield
            finally:
                state.ready = False
                working.cancel()
                with contextlib.suppress(BaseException):
                    await working
                await worker.stop()
                if not loading.done():
                    loading.cancel()
                with contextlib.suppress(BaseException):
                    await loading
                await resolver.close()
                await close_reflector(engine)
                await engine.close()

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    app.state.engine, app.state.service, app.state.metrics = engine, state, service_metrics
    app.state.worker = worker
    app.state.mcp = True
    state.routes = [r for r in app.routes if isinstance(r, Route)]
    return Guard(AliasRouting(AuditLog(app, engine, "http"), resolver), settings, state, service_metrics,
                 console=is_console_path)


async def _work(loading: asyncio.Task[None], state: ServiceState, worker: Worker) -> None:
    """Run the queue worker once the engine is open and warm (never when it failed to start)."""
    await loading
    if state.ready:
        await worker.run()


async def _load(engine: Engine, state: ServiceState) -> None:
    """Open and warm the engine; on failure the reason is kept for ``/health`` and the server stops."""
    from ..errors import describe_error

    try:
        await engine.open()
        await engine.warm()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        state.failure = redact(describe_error(exc) or f"{type(exc).__name__}: {exc}")
        log.error("the service could not start: %s", state.failure)
        return
    state.ready = True
    log.info("ready")
    # What start-up loaded (modules, the model's tokenizer, the date finder's data) lives as long as the
    # process: left out of the collector's full passes, which a request making many objects triggers, a
    # pass takes a fraction of the time, and holds every thread, the event loop's too, that much less.
    if not engine.settings.enable_temporal_retrieval:
        gc.freeze()
        return
    from ..recall.pipeline import warm_date_parser

    # the date finder loads in its thread meanwhile (seconds on a busy machine): the queue worker,
    # which starts when this returns, does not wait for it
    loop = asyncio.get_running_loop()
    warm_date_parser().add_done_callback(lambda _: loop.call_soon_threadsafe(gc.freeze))

