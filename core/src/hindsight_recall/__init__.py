"""hindsight-recall: a recall engine for AI-agent memory on PostgreSQL + pgvector."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import (
    BackendNotFound,
    BankNotFound,
    ConfigError,
    DatabaseError,
    InvalidRequest,
    MissingSetting,
    PluginLoadError,
    PoolExhausted,
    RecallError,
    RerankerError,
    RerankerHTTPError,
    RetainError,
)
from .hookspecs import hookimpl
from .types import Budget, FactType, Memory, TagsMatch, TimeWindow

if TYPE_CHECKING:
    from .engine import Engine
    from .plugins import get_plugin_manager
    from .retain.ingest import RetainStats
    from .settings import Settings, load_settings

#: Imported on first use, so that ``import hindsight_recall`` (and the command line's ``--url`` mode,
#: a thin HTTP client) does not load the engine's database and model stack.
_LAZY = {"Engine": ".engine", "RetainStats": ".retain.ingest", "Settings": ".settings",
         "load_settings": ".settings", "get_plugin_manager": ".plugins"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BackendNotFound", "BankNotFound", "Budget", "ConfigError", "DatabaseError", "Engine", "FactType",
    "InvalidRequest", "Memory", "MissingSetting", "PluginLoadError", "PoolExhausted", "RecallError",
    "RerankerError", "RerankerHTTPError", "RetainError", "RetainStats", "Settings", "TagsMatch", "TimeWindow",
    "get_plugin_manager", "hookimpl", "load_settings", "recall", "retain",
]


def retain(bank_id: str, memories: Iterable[Memory | Mapping[str, Any]], **settings: Any) -> RetainStats:
    """Blocking convenience: open an engine, store ``memories`` in ``bank_id``, close it.

    :param bank_id: the bank.
    :param memories: :class:`Memory` objects or dicts in the JSONL format.
    :param settings: setting overrides (field names of :class:`Settings`).
    """

    from .engine import Engine
    from .settings import load_settings

    async def run() -> RetainStats:
        async with Engine(load_settings(**settings), warm_date_finder=False) as engine:  # one call: no recall
            return await engine.retain(bank_id, memories)

    return asyncio.run(run())


def recall(bank_id: str, query: str, *, settings: Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """Blocking convenience: open an engine, recall once, close it. See :meth:`Engine.recall`.

    :param bank_id: the bank.
    :param query: the question.
    :param settings: setting overrides (field names of :class:`Settings`).
    :param options: recall options such as ``budget``, ``max_tokens``, ``tags``, ``trace``.
    """

    from .engine import Engine
    from .settings import load_settings

    async def run() -> dict[str, Any]:
        # one recall: the date finder loads only if its query needs it
        async with Engine(load_settings(**(settings or {})), warm_date_finder=False) as engine:
            return await engine.recall(bank_id, query, **options)

    return asyncio.run(run())
