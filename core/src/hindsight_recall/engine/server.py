"""The embedded PostgreSQL server, for what runs one beside the engine: a ``serve`` process of its own, a
benchmark's server. The engine starts and joins it by itself when it opens."""

from __future__ import annotations

from ..store.embedded import start, stop, stop_server

__all__ = ["start", "stop", "stop_server"]
