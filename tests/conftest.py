"""Shared fixtures: one embedded PostgreSQL per test run, engines built from explicit settings."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from hindsight_recall import Engine, load_settings  # noqa: E402
from hindsight_recall.settings import Settings  # noqa: E402
from hindsight_recall.store import embedded  # noqa: E402
from hindsight_recall.testing.http_server import FixtureServer  # noqa: E402
from hindsight_recall.testing.llm_server import stand_in_model  # noqa: E402
from hindsight_recall.testing.service import ServerThread  # noqa: E402

#: tests(citus) sets it: without HINDSIGHT_TEST_DATABASE_URL, the run starts a coordinator and two workers
CITUS_ENV = "HINDSIGHT_TEST_CITUS"
#: with a cluster given by URL, a Citus server (host:port) the growth test may add as a worker
SPARE_WORKER_ENV = "HINDSIGHT_TEST_CITUS_SPARE_WORKER"
#: text-search extensions (comma-separated, e.g. pg_search) the cluster this run starts can also create
CITUS_EXTENSIONS_ENV = "HINDSIGHT_TEST_CITUS_EXTENSIONS"
_CLUSTER = pytest.StashKey[tuple[contextlib.ExitStack, Any]]()


def pytest_configure(config: pytest.Config) -> None:
    """Export the embedding model once; under tests(citus) without a URL, also build (or reuse) Citus
    and start a cluster for the whole run."""
    _export_embedding_model()
    if os.environ.get(CITUS_ENV, "") in ("", "0") or os.environ.get("HINDSIGHT_TEST_DATABASE_URL"):
        return
    from hindsight_recall.testing.pgserver import citus_cluster  # late: only a Citus run needs it

    stack = contextlib.ExitStack()
    extensions = [e.strip() for e in os.environ.get(CITUS_EXTENSIONS_ENV, "").split(",") if e.strip()]
    cluster = stack.enter_context(citus_cluster(workers=2, extensions=extensions))
    config.stash[_CLUSTER] = (stack, cluster)
    os.environ["HINDSIGHT_TEST_DATABASE_URL"] = cluster.url


def _export_embedding_model() -> None:
    """On a fresh machine the first use exports and quantises the bundled model (about 30 s): done here,
    before any test, so that no test that starts a command or a server spends its timeout on it."""
    from hindsight_recall.embeddings import LocalEmbeddings

    LocalEmbeddings(load_settings()).dimensions()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop every server the run started (after failures too)."""
    held = config.stash.get(_CLUSTER, None)
    if held is not None:
        held[0].close()


@pytest.fixture
def citus_grow(request: pytest.FixtureRequest) -> Callable[[], tuple[str, int]]:
    """Adds one worker to the Citus cluster under test; returns its (host, port).

    A cluster this run started gets a new server; a cluster given by URL gets the server named in
    HINDSIGHT_TEST_CITUS_SPARE_WORKER, and without it the test skips.
    """
    held = request.config.stash.get(_CLUSTER, None)
    if held is not None:
        cluster = held[1]

        def grow() -> tuple[str, int]:
            return "127.0.0.1", int(cluster.add_worker().port)

        return grow
    spare = os.environ.get(SPARE_WORKER_ENV, "").strip()
    if not spare:
        pytest.skip(f"needs a worker to add: a cluster this run starts (tests(citus) without a URL), or "
                    f"{SPARE_WORKER_ENV}=host:port naming a Citus server outside the cluster")
    host, port = spare.rsplit(":", 1)

    def add_spare() -> tuple[str, int]:
        import psycopg  # late: only this test adds nodes

        url = os.environ["HINDSIGHT_TEST_DATABASE_URL"]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT citus_add_node(%s, %s)", (host, int(port)))
        return host, int(port)

    return add_spare


@pytest.fixture
def citus_workers(request: pytest.FixtureRequest) -> list[Any]:
    """The workers (:class:`~hindsight_recall.testing.pgserver.Server`, which can be killed and started
    again) of the Citus cluster this run started; a cluster given by URL has none to kill, and the test skips."""
    held = request.config.stash.get(_CLUSTER, None)
    if held is None:
        pytest.skip("needs a Citus cluster this run starts (tests(citus) without HINDSIGHT_TEST_DATABASE_URL_CITUS): "
                    "the test kills one of its workers")
    return list(held[1].workers)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh embedded-server data dir per run, in private folders the server's user is let through."""
    return tmp_path_factory.mktemp("pg") / "data"


@pytest.fixture(scope="session")
def make_settings(data_dir: Path) -> Callable[..., Settings]:
    """Settings for tests: the run's embedded server, passthrough reranking unless asked otherwise."""
    url = os.environ.get("HINDSIGHT_TEST_DATABASE_URL")

    def make(**overrides: Any) -> Settings:
        base: dict[str, Any] = {"embedded_data_dir": data_dir, "reranker_provider": "rrf", "database_url": url}
        return load_settings(**{**base, **overrides})

    return make


@pytest.fixture(scope="module")
def serve(make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Callable[..., ServerThread]]:
    """Starts the HTTP service on 127.0.0.1 with settings overrides, on the run's database, or with
    ``own_database=True`` on an embedded server of its own (for a module whose tests count every bank);
    every service it started stops when the module ends."""
    with contextlib.ExitStack() as stack:

        def start(*, own_database: bool = False, **overrides: Any) -> ServerThread:
            if own_database:
                overrides["embedded_data_dir"] = tmp_path_factory.mktemp("service-pg") / "data"
            return stack.enter_context(ServerThread(make_settings(**overrides)))

        yield start


@pytest.fixture(scope="module")
def llm() -> Iterator[FixtureServer]:
    """The module's stand-in chat model (:func:`~hindsight_recall.testing.llm_server.stand_in_model`)."""
    with stand_in_model() as server:
        yield server


@pytest.fixture(scope="session")
async def engine(make_settings: Callable[..., Settings]) -> AsyncIterator[Engine]:
    """A shared engine; tests isolate themselves with unique bank ids."""
    async with Engine(make_settings()) as eng:
        yield eng


@pytest.fixture
def bank() -> str:
    """A bank id no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


ALICE_BANK = [
    {"id": "job", "text": "Alice works as a data engineer at Helios Robotics in Munich.", "type": "world",
     "entities": ["Alice", "Helios Robotics"], "tags": ["work"], "occurred_at": "2023-08-01T00:00:00Z"},
    {"id": "old-job", "text": "Alice used to be an analyst at Northwind Labs.", "type": "world",
     "entities": ["Alice", "Northwind Labs"], "tags": ["work"], "occurred_at": "2022-02-01T00:00:00Z"},
    {"id": "marathon", "text": "Alice ran her first marathon in Hamburg.", "type": "world",
     "entities": ["Alice"], "tags": ["personal"], "occurred_at": "2023-04-23T00:00:00Z"},
    {"id": "pasta", "text": "Bob cooked pasta carbonara for dinner.", "type": "experience",
     "entities": ["Bob"], "occurred_at": "2023-05-02T00:00:00Z"},
    {"id": "reorg", "text": "Northwind Labs reorganised Alice's team under a new manager.", "type": "world",
     "entities": ["Northwind Labs", "Alice"], "tags": ["work"], "occurred_at": "2023-05-15T00:00:00Z",
     "causes": ["left"]},
    {"id": "left", "text": "Alice left Northwind Labs in June.", "type": "world",
     "entities": ["Alice", "Northwind Labs"], "occurred_at": "2023-06-30T00:00:00Z"},
    {"id": "summary", "text": "Alice changed jobs in 2023, moving from Northwind Labs to Helios Robotics.",
     "type": "observation", "sources": ["job", "left"], "entities": ["Alice"]},
    {"id": "untagged", "text": "Alice likes green tea.", "type": "world", "entities": ["Alice"]},
]


@pytest.fixture
async def alice(engine: Engine, bank: str) -> str:
    """A small bank about Alice; returns its id."""
    await engine.retain(bank, ALICE_BANK)
    return bank


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 200 MB tmpfs of its own: a disk that can be filled up or made read-only (needs root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=False)
        embedded.stop_server(mount / "pg" / "data")
        subprocess.run(["umount", "-l", str(mount)], check=False)
