"""Sessions: the test suite, the demo, and one compliance session per text-search extension."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

# torch below 2.14 is the CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
TORCH = "torch==2.13.0"
CORE = ["-e", "core", "-e", "backends/native", "-e", "rerankers/local"]
PLUGINS = [*(f"backends/{n}" for n in ("vchord", "pg_textsearch", "pgroonga", "pg_search")),
           *(f"rerankers/{n}" for n in ("tei", "cohere", "jina"))]
TEST_DEPS = ["pytest>=8", "pytest-asyncio>=0.24", "pglast>=6"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def install(session: nox.Session, *extra: str) -> None:
    session.install(TORCH)
    session.install(*CORE, *(arg for path in PLUGINS if os.path.isdir(path) for arg in ("-e", path)), *extra)


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Run the whole test suite against the embedded PostgreSQL server."""
    install(session, *TEST_DEPS)
    session.run("pytest", *session.posargs, env=OFFLINE)


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """Load the sample bank into the embedded server and answer the demo questions."""
    install(session)
    session.run("hindsight-recall", "demo", env=OFFLINE)
