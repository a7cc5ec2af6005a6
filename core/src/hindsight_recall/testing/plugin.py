"""pytest plugin (entry point ``pytest11``): fixtures and markers for hindsight-recall plugin authors.

Every fixture is prefixed ``hr_`` so that it cannot clash with a project's own fixtures. They are
class-scoped: one engine (and, for embedded runs, one fresh server) serves a whole suite class.

The engine runs on an event loop the fixtures own (:func:`hr_run`) rather than on pytest-asyncio's,
so the suite works in any project, whatever its asyncio mode and loop scope, or without the plugin.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

#: The variable naming a server for backend ``<name>``; ``{}`` is the upper-cased name.
DATABASE_URL_ENV = "HINDSIGHT_TEST_DATABASE_URL_{}"


def database_url_env(backend_name: str) -> str:
    """The environment variable that points the suite for ``backend_name`` at a server.

    :param backend_name: the entry-point name, e.g. ``pg_search`` (gives ``..._PG_SEARCH``).
    """
    return DATABASE_URL_ENV.format(backend_name.upper())


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "hindsight_backend(name): the text-search backend a suite targets")


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
    request: pytest.FixtureRequest, hr_backend_name: str, hr_plugin_manager: Any
) -> str | None:
    """The server URL from the class's ``database_url_env`` (default ``HINDSIGHT_TEST_DATABASE_URL_<NAME>``).

    Unset, it is ``None`` (the embedded server) for a backend whose ``runs_on_embedded_server`` flag
    is true, and skips the class otherwise, naming the variable to set.
    """
    variable = getattr(request.cls, "database_url_env", None) or database_url_env(hr_backend_name)
    url = os.environ.get(variable, "").strip()
    if url:
        return url
    backend = hr_plugin_manager.get("text_search", hr_backend_name)
    # The protocol's default (False) is the safe side: an undeclared backend asks for a server.
    if backend.runs_on_embedded_server:
        return None
    pytest.skip(
        f"the {hr_backend_name!r} text-search backend needs a PostgreSQL server with its extension and "
        f"pgvector: set {variable} to its URL to run this suite"
    )


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
