"""Sessions: ``tests`` (the whole suite as ``tests(all)``, plus ``tests(<ext>)`` per text-search extension) and ``demo``."""

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
def demo(session: nox.Session) -> None:
    """Load the sample bank into the embedded server and answer the demo questions."""
    install(session)
    session.run("hindsight-recall", "demo", env=OFFLINE)


#: One matrix entry per text-search extension (SPEC §6.2), in the order of docs/backends.md.
EXTENSIONS = ("native", "vchord", "pg_textsearch", "pgroonga", "pg_search")
SUITE = "all"


@nox.session(python="3.11")
@nox.parametrize(
    "target",
    [nox.param(SUITE, id=SUITE, tags=["suite"]),
     *(nox.param(ext, id=ext, tags=["compliance", ext]) for ext in EXTENSIONS)],
)
def tests(session: nox.Session, target: str) -> None:
    """Run the whole suite (all), or one backend's tests and compliance suite against HINDSIGHT_TEST_DATABASE_URL_<EXT>."""
    if target == SUITE:
        install(session, *TEST_DEPS)
        session.run("pytest", *session.posargs, env=OFFLINE)
        return
    groups = nox.project.dependency_groups(nox.project.load_toml("pyproject.toml"), f"tests-{target}")
    session.install(TORCH)
    session.install("-e", "core", "-e", f"backends/{target}", *groups)
    variable = f"HINDSIGHT_TEST_DATABASE_URL_{target.upper()}"
    env = dict(OFFLINE)
    if os.environ.get(variable):
        env[variable] = os.environ[variable]
    else:
        session.log(f"{variable} is unset: the embedded server if {target!r} runs on it, else skips")
    session.run("pytest", f"backends/{target}/tests", "-rs", *session.posargs, env=env)


@nox.session(python="3.11", default=False)
def bench_upstream(session: nox.Session) -> None:
    """Side by side with upstream Hindsight 1.1.0 (installed from PyPI) on the LoCoMo dev banks."""
    install(session)
    # upstream gets its own venv next to this session's, installed once and reused
    upstream = os.path.join(os.path.dirname(session.virtualenv.location), "upstream-hindsight")
    session.run("python", "-m", "hindsight_recall.bench.upstream", "--upstream-venv", upstream,
                "--data", "bench/locomo/dev", *session.posargs, env=OFFLINE)
