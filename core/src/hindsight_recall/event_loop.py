"""The event loop the service and the commands run on: uvloop's where it is installed, else asyncio's.

uvloop is a core dependency except on Windows, which it does not support. Its loop, with uvicorn's
httptools parser, cost a recall 0.3 to 0.75 ms less of the service's CPU than asyncio's loop and h11
(13.2 against 13.9 ms, LoCoMo dev, one client), and 0.6 to 0.85 ms less in process (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def new_runner() -> asyncio.Runner:
    """An :class:`asyncio.Runner` (what :func:`asyncio.run` uses) on the loop :func:`loop_factory` gives."""
    return asyncio.Runner(loop_factory=loop_factory())


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop if it is installed, else None (asyncio's own)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
