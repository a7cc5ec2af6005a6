"""Engine work run from a command: one event loop per command, errors a user can fix as a message."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from .errors import RecallError

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine, turning our errors into a message and a non-zero exit."""
    try:
        return asyncio.run(factory())  # type: ignore[arg-type]
    except RecallError as exc:
        raise click.ClickException(str(exc)) from None


def open_engine(*, long_lived: bool = False) -> Any:
    """The engine of one command; a ``long_lived`` one (``mcp``) loads the date finder ahead of its first query."""
    from .engine import Engine  # late: keeps `--help` and `plugins` fast

    return Engine(warm_date_finder=long_lived)
