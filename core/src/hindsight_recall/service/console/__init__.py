"""The browser console at ``/ui``: server-rendered pages over the same engine as the API.

Pages need no JavaScript; every asset is served from this package, so the console works offline.
"""

from __future__ import annotations

from typing import Any

from ...settings import Settings


def console_routes(settings: Settings) -> list[Any]:
    """The console's routes, or none when CONSOLE_ENABLED is false (``/ui`` then answers 404)."""
    if not settings.console_enabled:
        return []
    from .routes import routes  # imported here: the guard imports this package's auth module

    return routes(settings)
