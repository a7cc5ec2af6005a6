"""Running the service on uvicorn: one process, one event loop, one engine.

The loop is uvloop's where it is installed (:mod:`..event_loop`), and uvicorn parses HTTP with httptools.

On SIGTERM or SIGINT uvicorn stops listening (new connections are refused), lets requests in flight
finish for up to SERVICE_SHUTDOWN_TIMEOUT seconds, then the lifespan closes the engine and its pool.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from ..errors import ConfigError
from ..event_loop import new_runner
from ..settings import Settings


def configure_logging(level: str) -> None:
    """Service logs, uvicorn's and the access log on stderr at ``level``, one line each; other
    libraries stay at the command line's level (warnings)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("hindsight_recall", "uvicorn"):
        logging.getLogger(name).setLevel(getattr(logging, level.upper(), logging.INFO))


def serve(settings: Settings) -> None:
    """Serve until stopped; raise :class:`ConfigError` if the engine could not start.

    :param settings: core settings, including HOST, PORT and the SERVICE_* limits.
    """
    import uvicorn

    from .app import create_app

    app = create_app(settings)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, lifespan="on", access_log=False, log_config=None,
        timeout_graceful_shutdown=math.ceil(settings.service_shutdown_timeout), server_header=False,
        proxy_headers=False,
    )
    server = uvicorn.Server(config)

    async def main() -> None:
        watcher = asyncio.create_task(_stop_on_failure(server, app.state))
        try:
            await server.serve()
        finally:
            watcher.cancel()

    with new_runner() as runner:
        runner.run(main())
    if app.state.failure:
        raise ConfigError(app.state.failure)


async def _stop_on_failure(server: Any, state: Any) -> None:
    """A service whose engine failed to start exits instead of answering 503 for ever."""
    while not state.failure:
        await asyncio.sleep(0.2)
    server.should_exit = True
