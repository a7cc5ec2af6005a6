"""Plugin discovery, validation and lookup.

Build a manager with :func:`get_plugin_manager`; it registers core's own defaults from
``DEFAULT_PLUGINS`` and then each ``hindsight_recall`` entry point, one at a time, so that one
broken plugin is recorded instead of taking the process down.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .errors import BackendNotFound, PluginLoadError
from .protocols import KINDS, apply_defaults, missing_members, sync_members

if TYPE_CHECKING:
    from .settings import Settings

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
    "hindsight_recall.llm.openai",
)

#: hook name -> plugin kind
HOOK_KINDS: dict[str, str] = {
    "register_text_search_backends": "text_search",
    "register_rerankers": "reranker",
    "register_retrievers": "retriever",
    "register_budget_functions": "budget_function",
    "register_embedding_providers": "embeddings",
    "register_llm_providers": "llm",
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

    def register_plugin(
        self, plugin: ModuleType | object, name: str, distribution: str, version: str, *, entry_point: bool = False
    ) -> None:
        """Register one plugin object and collect what its hooks provide.

        :param plugin: a module or object with ``@hookimpl`` functions.
        :param name: the plugin's name (its entry-point name when loaded from one).
        :param distribution: the distribution that provides it, for messages.
        :param version: that distribution's version.
        :param entry_point: loaded from an entry point: every class it registers must be named ``name``.
        """
        self.pm.register(plugin, name=name)
        self.sources[name] = (distribution, version)
        for hook_name, kind in HOOK_KINDS.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin_name == name:
                    self._call_register_hook(impl, kind, name, distribution, version, entry_point)

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin and everything it registered (used by tests)."""
        self.pm.unregister(name=name)
        self.registrations = [r for r in self.registrations if r.plugin != name]

    def _call_register_hook(
        self, impl: Any, kind: str, plugin: str, dist: str, version: str, entry_point: bool = False
    ) -> None:
        def register(factory: Any) -> None:
            self._validate(kind, factory, plugin, entry_point)
            apply_defaults(factory, KINDS[kind][0])
            self.registrations.append(
                Registration(kind, factory.name, plugin, dist, version, factory=factory)
            )

        try:
            impl.function(register=register)
        except Exception as exc:  # a broken plugin must not take the process down
            self._record_failure(kind, plugin, dist, version, exc)

    def _validate(self, kind: str, factory: Any, plugin: str, entry_point: bool = False) -> None:
        name = check_plugin(kind, factory, f"plugin {plugin!r}: ")
        if entry_point and name != plugin:
            raise PluginLoadError(
                f"plugin {plugin!r}: {kind} class {getattr(factory, '__qualname__', factory)!r} is named {name!r}, "
                f"but its entry point is {plugin!r}; the entry-point name is what users select, so make them equal"
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
                self.register_plugin(plugin, ep.name, dist, version, entry_point=True)
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

    def create(self, kind: str, name: str, settings: Settings, variable: str | None = None) -> Any:
        """Instantiate the registered class ``name`` of ``kind`` as ``cls(settings)``.

        :param kind: the plugin kind, e.g. ``"reranker"``.
        :param name: the selected name.
        :param settings: core settings; the plugin reads its own options from them
            (:func:`~hindsight_recall.settings.plugin_settings`).
        :param variable: the setting that selected it, for the not-found message.
        """
        return self.get(kind, name, variable)(settings)


def check_plugin(kind: str, obj: Any, where: str = "") -> str:
    """Check a plugin class or instance against the protocol of ``kind``; return its name.

    Raises :class:`PluginLoadError` naming every missing member, and every method that must be
    ``async def`` but is not.

    :param kind: the plugin kind, e.g. ``"reranker"``.
    :param obj: the class (or instance) to check.
    :param where: a prefix for the message, e.g. ``"plugin 'x': "``.
    """
    protocol = KINDS[kind][0]
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise PluginLoadError(f"{where}{obj!r} has no string 'name' attribute")
    missing = missing_members(obj, protocol)
    if missing:
        raise PluginLoadError(
            f"{where}{kind} {name!r} does not satisfy the {protocol.__name__} protocol: "
            f"missing {', '.join(missing)}"
        )
    blocking = sync_members(obj, protocol)
    if blocking:
        raise PluginLoadError(
            f"{where}{kind} {name!r} does not satisfy the {protocol.__name__} protocol: "
            f"{', '.join(blocking)} must be 'async def' (a plain function would block the event loop)"
        )
    return name


def adopt(kind: str, obj: Any) -> Any:
    """Check a plugin instance made in code and give it the protocol's defaults; return it.

    :param kind: the plugin kind, e.g. ``"text_search"``.
    :param obj: the instance, e.g. ``TEIReranker(settings, TEISettings(url=...))``.
    """
    if isinstance(obj, type):
        raise PluginLoadError(f"{kind}: pass an instance, not the class {obj.__qualname__!r}")
    check_plugin(kind, obj)
    apply_defaults(obj, KINDS[kind][0])
    return obj


def _env_names(variable: str) -> set[str] | None:
    raw = os.environ.get(variable)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def _env_flag(variable: str) -> bool:
    return os.environ.get(variable, "").lower() in {"1", "true", "yes"}


def get_plugin_manager(
    *, load_entry_points: bool = True, strict: bool | None = None, load: Iterable[str] | None = None,
    disable: Iterable[str] | None = None, trace: bool | None = None,
) -> PluginManager:
    """Build a fresh plugin manager with core's defaults and (optionally) installed plugins.

    Each argument left as ``None`` comes from the environment: ``HINDSIGHT_API_LOAD_PLUGINS`` is an
    allowlist of entry-point names (empty loads none), ``HINDSIGHT_API_DISABLE_PLUGINS`` a
    blocklist, ``HINDSIGHT_API_STRICT_PLUGINS=1`` re-raises plugin failures,
    ``HINDSIGHT_API_TRACE_PLUGINS=1`` logs every hook call.

    :param load_entry_points: also load the ``hindsight_recall`` entry-point group.
    :param strict: re-raise plugin failures.
    :param load: the entry-point names to load (an empty list loads none).
    :param disable: entry-point names to skip.
    :param trace: log every hook call.
    """
    if strict is None:
        strict = _env_flag("HINDSIGHT_API_STRICT_PLUGINS")
    pm = pluggy.PluginManager("hindsight_recall")
    pm.add_hookspecs(hookspecs)
    if trace if trace is not None else _env_flag("HINDSIGHT_API_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda msg: log.warning("plugin trace: %s", msg.rstrip()))
        pm.enable_tracing()
    manager = PluginManager(pm, strict=strict)
    version = _core_version()
    for module_name in DEFAULT_PLUGINS:
        manager.register_plugin(importlib.import_module(module_name), module_name, "hindsight-recall", version)
    if load_entry_points:
        allow = set(load) if load is not None else _env_names("HINDSIGHT_API_LOAD_PLUGINS")
        block = frozenset(disable if disable is not None else _env_names("HINDSIGHT_API_DISABLE_PLUGINS") or ())
        manager.load_entry_points(allow, block)
    return manager


def _core_version() -> str:
    try:
        return metadata.version("hindsight-recall")
    except metadata.PackageNotFoundError:
        return "0+unknown"
