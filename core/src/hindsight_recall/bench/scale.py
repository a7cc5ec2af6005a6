"""``bench scale``: ingest throughput, recall latency per phase, concurrency and size from 10k to 1M memories.

Each bank size gets its own database (a fresh embedded server directory), so sizes never share
indexes; with ``database_url`` the sizes go one after the other into banks of the run's own on that
server (a Citus coordinator too), deleted after each size (see ``_scale_banks``). A size can be spread
over several banks; each recall then asks one of them, in turn. With ``compare_embedded`` the same
data also goes into a fresh embedded server, measured in the same run, for a ratio of the two.

Recall is timed as users call it (see ``_scale_recall``): the trace off, each query embedded by the
configured embedder, and date windows found by the date finder in the question's text. Latency runs
with the ``rrf`` reranker (no cross-encoder); the default cross-encoder's cost on the capped candidates is
measured apart, with a random model of its shape (see ``_rerank_cost``). With ``--embeddings random``
the memories get low-rank synthetic vectors; ``--query-vectors synthetic`` then searches with the
synthetic vector of the question's topic (the model still runs, its cost counts), so similarities
behave as with real data, while ``model`` (the default) searches with the model's own vector.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import _scale_recall as timed
from ._cpu import postmaster as postmaster_of
from ._scale_banks import bench_engine, check_database_url, round_robin, run_prefix, share_on_disk, spread
from ._scale_recall import CONFIGS, WARMUP, QueryVectors, percentiles, phase_seconds
from .synthetic import BenchQuery, generate, queries

# bench.banks and bench.upstream take these from here
__all__ = ["CONFIGS", "QueryVectors", "ScaleOptions", "int_list", "machine", "percentiles", "phase_seconds",
           "run_scale"]

#: every table that holds a bank's rows: its size on disk is theirs
TABLES = ("memory_units", "memory_links", "unit_entities", "entities", "chunks", "observation_sources",
          "documents", "term_stats", "length_stats")
EMBED_SAMPLE = 1000
#: the server settings a report shows: what sizes a recall's and a build's work
SERVER_SETTINGS = ("shared_buffers", "work_mem", "max_parallel_maintenance_workers", "max_parallel_workers_per_gather")


@dataclass
class ScaleOptions:
    """What ``bench scale`` measures.

    :param sizes: bank sizes, in memories.
    :param budgets: recall budgets to time.
    :param embeddings: ``random`` (synthetic low-rank vectors) or ``model`` (the real embedder).
    :param concurrency: numbers of concurrent recalls to measure throughput at.
    :param queries: how many questions per budget and configuration.
    :param seed: the generator seed.
    :param out: where the JSON, markdown and PNG go.
    :param plot: write the PNG (needs matplotlib).
    :param keep: keep each size's database directory.
    :param query_vectors: ``model`` (search with the embedder's vector) or ``synthetic`` (the topic's
        vector, with ``embeddings="random"``; the embedder still runs).
    :param reranker: also time the default cross-encoder (a random model of its shape) on the capped
        candidates.
    :param database_url: measure on this server (a Citus coordinator too) instead of a fresh embedded
        one, in banks of the run's own that are deleted after each size.
    :param banks: spread each size over this many banks (contiguous slices); recalls ask them in turn.
    :param compare_embedded: with ``database_url``, also measure a fresh embedded server on the same data.
    """

    sizes: list[int]
    budgets: list[str] = field(default_factory=lambda: ["low", "mid", "high"])
    embeddings: str = "random"
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32])
    queries: int = 60
    seed: int = 0
    out: Path = Path("bench-scale")
    plot: bool = True
    keep: bool = False
    query_vectors: str = "model"
    reranker: bool = True
    database_url: str | None = None
    banks: int = 1
    compare_embedded: bool = False

    def check(self) -> None:
        """Refuse options that cannot run, before anything is generated.

        :raises ValueError: naming the option and the fix.
        """
        if self.banks < 1:
            raise ValueError(f"--banks must be at least 1, got {self.banks}")
        if self.banks > min(self.sizes):
            raise ValueError(f"--banks {self.banks:,} is more than the smallest size ({min(self.sizes):,} memories): "
                             "every bank needs a memory")
        if self.database_url is not None:
            check_database_url(self.database_url)
        elif self.compare_embedded:
            raise ValueError("--compare-embedded needs --database-url: without it the run is on the embedded server")


def int_list(value: str) -> list[int]:
    """Parse ``10000,100k,1M`` into integers."""
    out: list[int] = []
    for item in (v.strip().lower() for v in value.split(",") if v.strip()):
        scale = {"k": 1_000, "m": 1_000_000}.get(item[-1], 1)
        try:
            out.append(int(float(item[:-1] if scale > 1 else item) * scale))
        except ValueError:
            raise ValueError(f"{value!r} is not a comma list of positive integers") from None
    if not out or min(out) < 1:
        raise ValueError(f"{value!r} is not a comma list of positive integers")
    return out


def machine() -> dict[str, Any]:
    """CPU, cores, memory and software versions of this machine."""
    cpu = next((x.split(":", 1)[1].strip() for x in _lines("/proc/cpuinfo") if x.startswith("model name")),
               platform.processor())
    mem = next((int(x.split()[1]) * 1024 for x in _lines("/proc/meminfo") if x.startswith("MemTotal")), 0)
    import numpy

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1),
            "os": platform.platform(),
            "python": platform.python_version(), "numpy": numpy.__version__}


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def run_scale(options: ScaleOptions, echo: Callable[[str], None] = print,
                    make_settings: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Measure every size, write ``scale.json``, ``scale.md`` and ``scale.png`` under ``options.out``.

    :param options: what to measure.
    :param echo: where progress lines go.
    :param make_settings: builds settings from overrides (default
        :func:`~hindsight_recall.settings.load_settings`).
    :raises ValueError: the options cannot run (see :meth:`ScaleOptions.check`).
    """
    from ..errors import redact
    from ..settings import load_settings
    from ._report import comparison, markdown, plot, plot_comparison

    options.check()
    if options.plot:
        from ._report import require_matplotlib

        require_matplotlib()  # fail before an hour of measuring, not after
    make = make_settings or load_settings
    options.out.mkdir(parents=True, exist_ok=True)
    base = base_dir(make)
    prefix = run_prefix()
    url = options.database_url and redact(options.database_url)
    report: dict[str, Any] = {"machine": machine(), "run": prefix, "sizes": [],
                              "options": {**asdict(options), "out": str(options.out), "database_url": url}}
    if options.compare_embedded:
        report.update(embedded={"sizes": []}, comparison=[])
    if url:
        echo(f"on {url}: banks {prefix}-<size>-<n>, deleted after each size (also on failure or Ctrl-C)")
    for n in options.sizes:
        measured = await _one_size(n, options, echo, make, base, f"{prefix}-{n}", report)
        report["sizes"].append(measured[0])
        if options.compare_embedded:
            report["embedded"]["sizes"].append(measured[1])
            report["comparison"].append(comparison(*measured))
            echo(f"[{n:,}] {report['comparison'][-1]['line']}")
        # written after every size, so a long run that fails late keeps what it measured
        (options.out / "scale.json").write_text(json.dumps(report, indent=2, default=str))
    (options.out / "scale.md").write_text(markdown(report))
    if options.plot:
        plot(report, options.out / "scale.png")
        if report.get("comparison"):
            plot_comparison(report, options.out / "scale-compare.png")
    pictures = ", scale.png" + (", scale-compare.png" if report.get("comparison") else "")
    echo(f"wrote {options.out / 'scale.json'}, scale.md" + (pictures if options.plot else ""))
    return report


def base_dir(make: Callable[..., Any]) -> Path:
    """Where the size databases and the random cross-encoder go."""
    return Path(make().embedded_data_dir or Path(tempfile.gettempdir()) / "hindsight-bench-scale")


async def _one_size(n: int, options: ScaleOptions, echo: Callable[[str], None], make: Callable[..., Any],
                    base: Path, prefix: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    """One size on the measured server, then (``compare_embedded``) on a fresh embedded one."""
    show = sys.stderr.isatty()
    t0 = time.perf_counter()
    bank = generate(n, seed=options.seed, progress=show)
    generated = time.perf_counter() - t0
    echo(f"[{n:,}] generated in {generated:.1f} s")
    parts = spread(bank, options.banks, prefix)
    if len(parts) < options.banks:
        echo(f"[{n:,}] slices of {-(-n // options.banks):,} memories make {len(parts)} banks, not {options.banks}")
    bank_ids = list(parts)
    qs = queries(bank, options.queries, seed=options.seed)
    sample = [m.text for m in bank.memories[:EMBED_SAMPLE]]
    urls = [options.database_url, *([None] if options.compare_embedded else [])]
    results: list[dict[str, Any]] = [{"memories": n, "banks": len(parts), "generate_seconds": round(generated, 2)}
                                     for _ in urls]
    try:
        async with contextlib.AsyncExitStack() as opened:
            engines: list[tuple[Any, str]] = []
            # every server holds its data before any is timed, so the generated bank can go
            for url, result in zip(urls, results, strict=True):
                engine = await opened.enter_async_context(
                    bench_engine(make, url, base / f"scale-{n}", bank_ids, options.keep))
                result["server"] = await _server(engine)
                result["target"] = ("citus" if engine.diagnostics.citus else "server") if url else "embedded"
                # the server's name in every line once a run may measure two
                tag = f"[{n:,} {result['target']}]" if options.database_url else f"[{n:,}]"
                engines.append((engine, tag))
                report["machine"].setdefault("postgres", result["server"]["version"])
                result["ingest"] = await _ingest(engine, parts, options, echo, report, sample, tag)
                result["database"] = await _database(engine, n, bank_ids)
                echo(f"{tag} database {result['database']['bytes_per_memory']:,.0f} bytes per memory")
            # Measure recall, not the collector: the generated bank is millions of objects a full
            # collection would walk (pauses of 250 ms and more landed in p99 before).
            del bank, parts
            gc.collect()
            gc.freeze()
            for (engine, tag), result in zip(engines, results, strict=True):
                await _measure(engine, bank_ids, qs, options, echo, base, tag, result)
    finally:
        gc.unfreeze()
    return results


async def _measure(engine: Any, bank_ids: list[str], qs: list[BenchQuery], options: ScaleOptions,
                   echo: Callable[[str], None], base: Path, tag: str, result: dict[str, Any]) -> None:
    """Recall latency, concurrency and the reranker's cost on one server, into ``result``."""
    if options.embeddings == "random" and options.query_vectors == "synthetic":
        engine.embedder = QueryVectors(engine.embedder, {q.text: q.vector.tolist() for q in qs})
    # each question asks one bank, the same one in every pass
    jobs = list(zip(qs, round_robin(bank_ids, len(qs)), strict=True))
    for q, bank_id in jobs[:WARMUP]:  # loads the query model and the tokenizer, warms caches
        await timed.recall_once(engine, bank_id, q, "mid")
    # other work on the machine skews latency: record how busy it was around the measurement
    result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    echo(f"{tag} load average {result['load_average_before']}: CPU per recall holds under load, latency does not")
    postmaster = await postmaster_of(engine)  # its CPU is counted when the server runs here
    result["recall"] = await timed.latency(engine, bank_ids, jobs, options.budgets, echo, tag, postmaster)
    result["concurrency"] = await timed.concurrency(engine, jobs, options.concurrency, echo, tag, postmaster)
    if options.reranker:
        result["reranker"] = await timed.rerank_cost(engine, bank_ids, jobs, base, echo, tag)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["peak_rss_mb"] = peak_rss_mb()


async def _server(engine: Any) -> dict[str, Any]:
    found = await engine.diagnostics.server(SERVER_SETTINGS)
    return {"version": found.pop("version"), "settings": found.pop("settings"),
            "embedded": engine.settings.database_url is None, **found}


async def _ingest(engine: Any, parts: dict[str, tuple[Sequence[Any], Any]], options: ScaleOptions,
                  echo: Callable[[str], None], report: dict[str, Any], sample: list[str], tag: str) -> dict[str, Any]:
    n = sum(len(memories) for memories, _ in parts.values())
    given = {b: vectors for b, (_, vectors) in parts.items()} if options.embeddings == "random" else None
    # retain itself vacuums and analyzes after a bulk load (maintenance_seconds), as autovacuum would
    stats = await engine.retain_many({b: memories for b, (memories, _) in parts.items()}, embeddings=given,
                                     progress=sys.stderr.isatty())
    out: dict[str, Any] = stats.as_json()
    without = stats.seconds - stats.embedding_seconds
    if options.embeddings == "random":
        if "embedding_rate_per_s" not in report:  # measured once per run, on the first size
            report["embedding_rate_per_s"] = await _embedding_rate(engine, sample)
        rate = float(report["embedding_rate_per_s"])
        out.update(embedding_seconds_estimated=round(n / rate, 1), embedding_estimated=True)
        with_embedding = without + n / rate
    else:
        with_embedding = stats.seconds
    out.update(per_second_without_embedding=round(n / without, 1),
               per_second_with_embedding=round(n / with_embedding, 1),
               links_per_memory=round(stats.links / n, 2))
    echo(f"{tag} retained into {len(parts)} bank{'s' * (len(parts) > 1)}: "
         f"{out['per_second_without_embedding']:,.0f}/s without embedding "
         f"(rows {stats.load_seconds:.1f} s, links {stats.link_seconds:.1f} s, "
         f"index flags {stats.index_seconds:.1f} s, HNSW build {stats.index_build_seconds:.1f} s, "
         f"vacuum {stats.maintenance_seconds:.1f} s; "
         f"{stats.links:,} links), {out['per_second_with_embedding']:,.0f}/s with it")
    return out


async def _embedding_rate(engine: Any, sample: list[str]) -> float:
    """Passages per second of the real embedder, on a sample of the bank's texts."""
    await engine.embedder.embed(sample[:8], mode="passage")  # load the model outside the timing
    t0 = time.perf_counter()
    await engine.embedder.embed(sample, mode="passage")
    return round(len(sample) / (time.perf_counter() - t0), 1)


async def _database(engine: Any, n: int, bank_ids: list[str]) -> dict[str, Any]:
    share = await share_on_disk(engine, bank_ids, TABLES)
    total = sum(share["bytes"].values())
    return {**share, "total_bytes": total, "bytes_per_memory": round(total / n, 1)}
