"""Plugin discovery, validation and lookup.

Build a manager with :func:`get_plugin_manager`; it registers core's own defaults from
``DEFAULT_PLUGINS`` and then each ``hindsight_recall`` entry point, one at a time, so that one
broken plugin is recorded instead of taking the process down.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from .errors import BackendNotFound, PluginLoadError
from .protocols import KINDS

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hindsight_recall"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "hindsight_recall.recall.arms.semantic",
    "hindsight_recall.recall.arms.keyword",
    "hindsight_recall.recall.arms.graph",
    "hindsight_recall.recall.arms.temporal",
    "hindsight_recall.recall.budget",
    "hindsight_recall.recall.rerank",
    "hindsight_recall.embeddings",
)

#: hook name -> plugin kind
HOOK_KINDS: dict[str, str] = {
    "register_text_search_backends": "text_search",
    "register_rerankers": "reranker",
    "register_retrievers": "retriever",
    "register_budget_functions": "budget_function",
    "register_embedding_providers": "embeddings",
}


@dataclass
class Registration:
    """One class a plugin registered, or the failure of a plugin to load or register."""

    kind: str
    name: str
    plugin: str
    distribution: str
    version: str
    factory: Any = None
    error: str | None = None

    @property
    def status(self) -> str:
        return "error" if self.error else "ok"

    @property
    def description(self) -> str:
        doc = (getattr(self.factory, "__doc__", None) or "").strip()
        return doc.splitlines()[0] if doc else "Undocumented"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "description": self.description if not self.error else None,
        }


@dataclass
class PluginManager:
    """A pluggy manager plus the validated registrations of every kind."""

    pm: pluggy.PluginManager
    registrations: list[Registration] = field(default_factory=list)
    #: plugin name -> (distribution, version)
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)
    strict: bool = False

    def register_plugin(self, plugin: ModuleType | object, name: str, distribution: str, version: str) -> None:
        """Register one plugin object and collect what its hooks provide."""
        self.pm.register(plugin, name=name)
        self.sources[name] = (distribution, version)
        for hook_name, kind in HOOK_KINDS.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin_name == name:
                    self._call_register_hook(impl, kind, name, distribution, version)

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin and everything it registered (used by tests)."""
        self.pm.unregister(name=name)
        self.registrations = [r for r in self.registrations if r.plugin != name]

    def _call_register_hook(self, impl: Any, kind: str, plugin: str, dist: str, version: str) -> None:
        def register(factory: Any) -> None:
            self._validate(kind, factory, plugin)
            self.registrations.append(
                Registration(kind, factory.name, plugin, dist, version, factory=factory)
            )

        try:
            impl.function(register=register)
        except Exception as exc:  # a broken plugin must not take the process down
            self._record_failure(kind, plugin, dist, version, exc)

    def _validate(self, kind: str, factory: Any, plugin: str) -> None:
        protocol = KINDS[kind][0]
        name = getattr(factory, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginLoadError(f"plugin {plugin!r}: {factory!r} has no string 'name' attribute")
        if not isinstance(factory, protocol):
            raise PluginLoadError(
                f"plugin {plugin!r}: {kind} {name!r} does not satisfy the {protocol.__name__} protocol"
            )
        for other in self.registrations:
            if other.kind == kind and other.name == name and not other.error:
                raise PluginLoadError(
                    f"plugin {plugin!r}: {kind} name {name!r} is already registered by "
                    f"{other.plugin!r} ({other.distribution})"
                )

    def _record_failure(self, kind: str, plugin: str, dist: str, version: str, exc: BaseException) -> None:
        if self.strict:
            raise exc
        log.warning("plugin %s (%s %s) failed: %s", plugin, dist, version, exc)
        self.registrations.append(Registration(kind, plugin, plugin, dist, version, error=str(exc)))

    def load_entry_points(self, allow: set[str] | None = None, block: frozenset[str] = frozenset()) -> None:
        """Load every ``hindsight_recall`` entry point not filtered out, one at a time."""
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if (allow is not None and ep.name not in allow) or ep.name in block:
                continue
            if self.pm.has_plugin(ep.name):
                continue
            dist = ep.dist.name if ep.dist else "unknown"
            version = ep.dist.version if ep.dist else "unknown"
            try:
                plugin = ep.load()
            except Exception as exc:
                self._record_failure("plugin", ep.name, dist, version, exc)
                continue
            try:
                self.register_plugin(plugin, ep.name, dist, version)
            except Exception as exc:
                self._record_failure("plugin", ep.name, dist, version, exc)

    def names(self, kind: str) -> list[str]:
        """Names of the working registrations of one kind."""
        return [r.name for r in self.registrations if r.kind == kind and not r.error]

    def get(self, kind: str, name: str, variable: str | None = None) -> Any:
        """Return the registered class ``name`` of ``kind`` or raise :class:`BackendNotFound`."""
        for reg in self.registrations:
            if reg.kind == kind and reg.name == name and not reg.error:
                return reg.factory
        _, setting, install = KINDS[kind]
        failure = next((r.error for r in self.registrations if r.name == name and r.error), None)
        raise BackendNotFound(
            kind=kind,
            name=name,
            variable=variable or setting or kind,
            installed=self.names(kind),
            install_hint=install.format(name=name) if install else None,
            failure=failure,
        )

    def all(self, kind: str) -> list[Any]:
        """Every working class of one kind, in registration order."""
        return [r.factory for r in self.registrations if r.kind == kind and not r.error]


def _env_names(variable: str) -> set[str] | None:
    raw = os.environ.get(variable)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def get_plugin_manager(*, load_entry_points: bool = True, strict: bool | None = None) -> PluginManager:
    """Build a fresh plugin manager with core's defaults and (optionally) installed plugins.

    Environment: ``HINDSIGHT_API_LOAD_PLUGINS`` is an allowlist of entry-point names (empty loads
    none), ``HINDSIGHT_API_DISABLE_PLUGINS`` a blocklist, ``HINDSIGHT_API_STRICT_PLUGINS=1``
    re-raises plugin failures, ``HINDSIGHT_API_TRACE_PLUGINS=1`` logs every hook call.

    :param load_entry_points: also load the ``hindsight_recall`` entry-point group.
    :param strict: re-raise plugin failures (default from the environment).
    """
    if strict is None:
        strict = os.environ.get("HINDSIGHT_API_STRICT_PLUGINS", "").lower() in {"1", "true", "yes"}
    pm = pluggy.PluginManager("hindsight_recall")
    pm.add_hookspecs(hookspecs)
    if os.environ.get("HINDSIGHT_API_TRACE_PLUGINS", "").lower() in {"1", "true", "yes"}:
        pm.trace.root.setwriter(lambda msg: log.warning("plugin trace: %s", msg.rstrip()))
        pm.enable_tracing()
    manager = PluginManager(pm, strict=strict)
    version = _core_version()
    for module_name in DEFAULT_PLUGINS:
        manager.register_plugin(importlib.import_module(module_name), module_name, "hindsight-recall", version)
    if load_entry_points:
        block = frozenset(_env_names("HINDSIGHT_API_DISABLE_PLUGINS") or ())
        manager.load_entry_points(_env_names("HINDSIGHT_API_LOAD_PLUGINS"), block)
    return manager


def _core_version() -> str:
    try:
        return metadata.version("hindsight-recall")
    except metadata.PackageNotFoundError:
        return "0+unknown"
