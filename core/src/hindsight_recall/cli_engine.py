"""Engine work run from a command: one event loop per command, errors a user can fix as a message."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from .errors import RecallError
from .event_loop import new_runner

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine, turning our errors into a message and a non-zero exit."""
    try:
        with new_runner() as runner:
            return runner.run(factory())  # type: ignore[arg-type]
    except RecallError as exc:
        raise click.ClickException(str(exc)) from None


def open_engine(*, long_lived: bool = False) -> Any:
    """The engine of one command; a ``long_lived`` one (``mcp``) loads the date finder ahead of its first query.

    The embedded server starts on a thread first, while the engine's modules import: each takes
    about 0.7 s in a new process, and the server runs in processes of its own.
    """
    from .embedded_server import start_ahead
    from .settings import load_settings

    settings = load_settings()
    if settings.database_url is None:
        start_ahead(settings)
    from .engine import Engine  # late: keeps `--help` and `plugins` fast

    return Engine(settings, warm_date_finder=long_lived)

