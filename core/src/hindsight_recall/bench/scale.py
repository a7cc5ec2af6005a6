"""``bench scale``: ingest throughput, recall latency per phase, concurrency and size from 10k to 1M memories.

Each bank size gets its own database (a fresh embedded server directory), so sizes never share
indexes. Recall is timed as users call it: the trace off, each query embedded by the configured
embedder, and date windows found by the date finder in the question's text. Latency runs with the
``rrf`` reranker (no cross-encoder); the default cross-encoder's cost on the capped candidates is
measured apart, with a random model of its shape (see ``_rerank_cost``). With ``--embeddings random``
the memories get low-rank synthetic vectors; ``--query-vectors synthetic`` then searches with the
synthetic vector of the question's topic (the model still runs, its cost counts), so similarities
behave as with real data, while ``model`` (the default) searches with the model's own vector.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ..store import banks
from .synthetic import BenchQuery, SyntheticBank, generate, queries

#: bank settings of each measured configuration
CONFIGS: dict[str, dict[str, bool]] = {
    "all arms": {"enable_graph_retrieval": True, "enable_temporal_retrieval": True},
    "semantic + keyword": {"enable_graph_retrieval": False, "enable_temporal_retrieval": False},
}
TABLES = ("memory_units", "memory_links", "unit_entities", "entities", "chunks", "observation_sources")
EMBED_SAMPLE = 1000
WARMUP = 5


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


def int_list(value: str) -> list[int]:
    """Parse ``10000,100k,1M`` into integers."""
    out: list[int] = []
    for item in (v.strip().lower() for v in value.split(",") if v.strip()):
        scale = {"k": 1_000, "m": 1_000_000}.get(item[-1], 1)
        out.append(int(float(item[:-1] if scale > 1 else item) * scale))
    if not out or min(out) < 1:
        raise ValueError(f"{value!r} is not a comma list of positive integers")
    return out


class QueryVectors:
    """The real embedder still runs (its cost counts); known questions get their synthetic vector."""

    name = "bench-query-vectors"

    def __init__(self, inner: Any, vectors: dict[str, list[float]]) -> None:
        self.inner, self.vectors = inner, vectors

    def dimensions(self) -> int:
        return int(self.inner.dimensions())

    async def embed(self, texts: Sequence[str], *, mode: str) -> list[list[float]]:
        real = await self.inner.embed(texts, mode=mode)
        return [self.vectors.get(t, r) for t, r in zip(texts, real, strict=True)]


def percentiles(values: Sequence[float]) -> dict[str, Any]:
    """p50, p95, p99 and mean of seconds, in milliseconds (nearest rank)."""
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0, "n": 0}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]

    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(rank(0.95) * 1000, 2),
            "p99": round(rank(0.99) * 1000, 2), "mean": round(statistics.fmean(ordered) * 1000, 2),
            "n": len(ordered)}


def phase_seconds(body: dict[str, Any]) -> dict[str, float]:
    """Seconds per trace phase; per-arm phases repeat per fact type with one duration, so take the max."""
    out: dict[str, float] = {}
    for phase in body.get("trace", {}).get("summary", {}).get("phase_metrics", []):
        name, seconds = phase["phase_name"], float(phase["duration_seconds"])
        before = out.get(name, 0.0)
        out[name] = max(before, seconds) if name.startswith("retrieval_") else before + seconds
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
    """
    from ..settings import load_settings
    from ._report import markdown, plot

    if options.plot:
        from ._report import require_matplotlib

        require_matplotlib()  # fail before an hour of measuring, not after
    make = make_settings or load_settings
    options.out.mkdir(parents=True, exist_ok=True)
    base = base_dir(make)
    report: dict[str, Any] = {"machine": machine(), "options": {**asdict(options), "out": str(options.out)},
                              "sizes": []}
    for n in options.sizes:
        report["sizes"].append(await _one_size(n, options, echo, make, Path(base) / f"scale-{n}", report))
        # written after every size, so a long run that fails late keeps what it measured
        (options.out / "scale.json").write_text(json.dumps(report, indent=2, default=str))
    (options.out / "scale.md").write_text(markdown(report))
    if options.plot:
        plot(report, options.out / "scale.png")
    echo(f"wrote {options.out / 'scale.json'}, scale.md" + (", scale.png" if options.plot else ""))
    return report


def base_dir(make: Callable[..., Any]) -> Path:
    """Where the size databases and the random cross-encoder go."""
    return Path(make().embedded_data_dir or Path(tempfile.gettempdir()) / "hindsight-bench-scale")


async def _one_size(n: int, options: ScaleOptions, echo: Callable[[str], None], make: Callable[..., Any],
                    data_dir: Path, report: dict[str, Any]) -> dict[str, Any]:
    from ..engine import Engine  # late: keeps the module import cheap

    show = sys.stderr.isatty()
    t0 = time.perf_counter()
    bank = generate(n, seed=options.seed, progress=show)
    generated = time.perf_counter() - t0
    echo(f"[{n:,}] generated in {generated:.1f} s")
    shutil.rmtree(data_dir, ignore_errors=True)  # a fresh server per size: sizes never share indexes
    engine = Engine(make(reranker_provider="rrf", embedded_data_dir=data_dir))
    bank_id = f"scale-{n}"
    result: dict[str, Any] = {"memories": n, "generate_seconds": round(generated, 2)}
    try:
        async with engine:
            result["server"] = await _server(engine)
            report["machine"].setdefault("postgres", result["server"]["version"])
            async with engine.db.connect() as conn:
                await banks.delete_bank(conn, bank_id)
            result["ingest"] = await _ingest(engine, bank, bank_id, options, echo, report)
            result["database"] = await _database(engine, n)
            echo(f"[{n:,}] database {result['database']['bytes_per_memory']:,.0f} bytes per memory")
            if options.embeddings == "random" and options.query_vectors == "synthetic":
                engine.embedder = QueryVectors(engine.embedder, {})
            qs = queries(bank, options.queries, seed=options.seed)
            # Measure recall, not the collector: the generated bank is millions of objects a full
            # collection would walk (pauses of 250 ms and more landed in p99 before).
            del bank
            gc.collect()
            gc.freeze()
            if isinstance(engine.embedder, QueryVectors):
                engine.embedder.vectors.update({q.text: q.vector.tolist() for q in qs})
            for q in qs[:WARMUP]:  # loads the query model and the tokenizer, warms caches
                await _recall(engine, bank_id, q, "mid")
            # other work on the machine skews latency: record how busy it was around the measurement
            result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
            result["recall"] = await _latency(engine, bank_id, qs, options.budgets, echo, n)
            result["concurrency"] = await _concurrency(engine, bank_id, qs, options.concurrency, echo, n)
            if options.reranker:
                result["reranker"] = await _rerank(engine, bank_id, qs, Path(base_dir(make)), echo, n)
            result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
            result["peak_rss_mb"] = peak_rss_mb()
    finally:
        gc.unfreeze()
        if not options.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    return result


async def _server(engine: Any) -> dict[str, Any]:
    async with engine.db.connect() as conn:
        version = await conn.scalar(text("SHOW server_version"))
        vector = await conn.scalar(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
        names = ("shared_buffers", "work_mem", "max_parallel_maintenance_workers",
                 "max_parallel_workers_per_gather")
        knobs = {k: await conn.scalar(text(f"SHOW {k}")) for k in names}
    return {"version": f"PostgreSQL {version}, pgvector {vector}", "settings": knobs,
            "embedded": engine.settings.database_url is None}


async def _ingest(engine: Any, bank: SyntheticBank, bank_id: str, options: ScaleOptions,
                  echo: Callable[[str], None], report: dict[str, Any]) -> dict[str, Any]:
    n = len(bank.memories)
    given = {bank_id: bank.vectors} if options.embeddings == "random" else None
    # retain itself vacuums and analyzes after a bulk load (maintenance_seconds), as autovacuum would
    stats = await engine.retain_many({bank_id: bank.memories}, embeddings=given, progress=sys.stderr.isatty())
    out: dict[str, Any] = stats.as_json()
    without = stats.seconds - stats.embedding_seconds
    if options.embeddings == "random":
        if "embedding_rate_per_s" not in report:  # measured once per run, on the first size
            report["embedding_rate_per_s"] = await _embedding_rate(engine, bank)
        rate = float(report["embedding_rate_per_s"])
        out.update(embedding_seconds_estimated=round(n / rate, 1), embedding_estimated=True)
        with_embedding = without + n / rate
    else:
        with_embedding = stats.seconds
    out.update(per_second_without_embedding=round(n / without, 1),
               per_second_with_embedding=round(n / with_embedding, 1),
               links_per_memory=round(stats.links / n, 2))
    echo(f"[{n:,}] retained: {out['per_second_without_embedding']:,.0f}/s without embedding "
         f"(rows {stats.load_seconds:.1f} s, links {stats.link_seconds:.1f} s, "
         f"index flags {stats.index_seconds:.1f} s, HNSW build {stats.index_build_seconds:.1f} s, "
         f"vacuum {stats.maintenance_seconds:.1f} s; "
         f"{stats.links:,} links), {out['per_second_with_embedding']:,.0f}/s with it")
    return out


async def _embedding_rate(engine: Any, bank: SyntheticBank) -> float:
    """Passages per second of the real embedder, on a sample of the bank's texts."""
    sample = [m.text for m in bank.memories[:EMBED_SAMPLE]]
    await engine.embedder.embed(sample[:8], mode="passage")  # load the model outside the timing
    t0 = time.perf_counter()
    await engine.embedder.embed(sample, mode="passage")
    return round(len(sample) / (time.perf_counter() - t0), 1)


async def _database(engine: Any, n: int) -> dict[str, Any]:
    async with engine.db.connect() as conn:
        size = text("SELECT pg_total_relation_size(CAST(:t AS regclass))")
        sizes = {t: int(await conn.scalar(size, {"t": t})) for t in TABLES}
        links = int(await conn.scalar(text("SELECT count(*) FROM memory_links")))
    total = sum(sizes.values())
    return {"bytes": sizes, "total_bytes": total, "bytes_per_memory": round(total / n, 1), "links": links,
            "shared_with_other_banks": engine.settings.database_url is not None}


async def _recall(engine: Any, bank_id: str, q: BenchQuery, budget: str,
                  trace: bool = False) -> tuple[float, dict[str, Any]]:
    # no temporal_window: the date finder reads the window from the question, as for a user
    started = time.perf_counter()
    body = await engine.recall(bank_id, q.text, budget=budget, trace=trace)
    return time.perf_counter() - started, body


async def _latency(engine: Any, bank_id: str, qs: list[BenchQuery], budgets: list[str],
                   echo: Callable[[str], None], n: int) -> dict[str, Any]:
    from tqdm import tqdm  # late: only long runs show bars

    out: dict[str, Any] = {}
    for label, overrides in CONFIGS.items():
        async with engine.db.connect() as conn:
            await banks.set_bank_config(conn, bank_id, dict(overrides))
        out[label] = {}
        for budget in budgets:
            totals: list[float] = []
            phases: dict[str, list[float]] = {}
            by_kind: dict[str, list[float]] = {}
            arms: set[str] = set()
            results = 0
            bar = tqdm(qs, desc=f"{label} {budget}", unit="query", disable=not sys.stderr.isatty(),
                       file=sys.stderr)
            for q in bar:
                seconds, body = await _recall(engine, bank_id, q, budget)
                totals.append(seconds)
                by_kind.setdefault(q.kind, []).append(seconds)
                results += len(body["results"])
            for q in qs:  # phases from a second, traced pass: the trace's own cost stays out of the timings
                for name, value in phase_seconds((await _recall(engine, bank_id, q, budget, trace=True))[1]).items():
                    phases.setdefault(name, []).append(value)
                    if name.startswith("retrieval_"):
                        arms.add(name.removeprefix("retrieval_"))
            out[label][budget] = {
                **percentiles(totals), "arms": sorted(arms), "mean_results": round(results / len(qs), 1),
                "by_kind": {k: percentiles(v) for k, v in by_kind.items()},
                "phases": {k: percentiles(v) for k, v in phases.items()},
            }
            row = out[label][budget]
            echo(f"[{n:,}] {label:18s} {budget:4s} p50 {row['p50']:7.1f} ms  p95 {row['p95']:7.1f} ms  "
                 f"p99 {row['p99']:7.1f} ms  arms: {', '.join(row['arms'])}")
    async with engine.db.connect() as conn:
        await banks.set_bank_config(conn, bank_id, dict(CONFIGS["all arms"]))
    return out


async def _worker(engine: Any, bank_id: str, jobs: Iterator[BenchQuery], latencies: list[float],
                  errors: Counter[str]) -> None:
    """Recall the next job until none is left; the workers share one iterator, so each job runs once."""
    for q in jobs:
        try:
            latencies.append((await _recall(engine, bank_id, q, "mid"))[0])
        except Exception as exc:  # counted and reported: pool exhaustion shows up here
            errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1


async def _concurrency(engine: Any, bank_id: str, qs: list[BenchQuery], levels: list[int],
                       echo: Callable[[str], None], n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for level in levels:
        jobs = iter([qs[i % len(qs)] for i in range(max(len(qs), 4 * level))])
        latencies: list[float] = []
        errors: Counter[str] = Counter()
        started = time.perf_counter()
        await asyncio.gather(*(_worker(engine, bank_id, jobs, latencies, errors) for _ in range(level)))
        wall = time.perf_counter() - started
        row = {"concurrency": level, "requests": len(latencies) + sum(errors.values()),
               "throughput_per_s": round(len(latencies) / wall, 2), **percentiles(latencies),
               "errors": dict(errors)}
        rows.append(row)
        echo(f"[{n:,}] concurrency {level:3d}: {row['throughput_per_s']:6.1f} recalls/s, "
             f"p50 {row['p50']:.1f} ms, "
             f"p95 {row['p95']:.1f} ms, {sum(errors.values())} errors")
    return rows


async def _rerank(engine: Any, bank_id: str, qs: list[BenchQuery], base: Path, echo: Callable[[str], None],
                  n: int) -> dict[str, Any]:
    """Recall at budget mid with the default local reranker on a random model of the default's shape."""
    from ..recall.rerank import RerankStage
    from ._rerank_cost import DEFAULT_SHAPE, local_reranker, random_cross_encoder

    reranker = local_reranker(random_cross_encoder(base / "random-cross-encoder"), engine.settings)
    if reranker is None:
        echo(f"[{n:,}] reranker cost skipped: pip install hindsight-recall-reranker-local")
        return {"skipped": "the local reranker plugin is not installed"}
    before = engine.rerank
    engine.rerank = RerankStage(reranker, engine.settings)
    async with engine.db.connect() as conn:  # reranking on for this pass, whatever the environment says
        await banks.set_bank_config(conn, bank_id, {**CONFIGS["all arms"], "enable_reranking": True})
    try:
        for q in qs[:WARMUP]:  # loads the model
            await _recall(engine, bank_id, q, "mid")
        totals = [(await _recall(engine, bank_id, q, "mid"))[0] for q in qs]
        stage: list[float] = []
        reranked: list[int] = []
        for q in qs:
            body = (await _recall(engine, bank_id, q, "mid", trace=True))[1]
            stage.append(phase_seconds(body).get("reranking", 0.0))
            for phase in body["trace"]["summary"]["phase_metrics"]:
                if phase["phase_name"] == "reranking" and phase["details"].get("reranker_type") == "local":
                    reranked.append(int(phase["details"].get("candidates_reranked", 0)))
    finally:
        await engine.rerank.close()
        engine.rerank = before
        async with engine.db.connect() as conn:
            await banks.set_bank_config(conn, bank_id, {**CONFIGS["all arms"], "enable_reranking": None})
    out = {"model": "random weights, the shape of cross-encoder/ms-marco-MiniLM-L-6-v2", "shape": DEFAULT_SHAPE,
           "cap": engine.settings.reranker_cap("mid"), "recall": percentiles(totals),
           "reranking_phase": percentiles(stage),
           "mean_candidates_reranked": round(sum(reranked) / len(reranked), 1) if reranked else 0.0}
    echo(f"[{n:,}] with the default cross-encoder (mid, {out['mean_candidates_reranked']:.0f} candidates): "
         f"recall p50 {out['recall']['p50']:.1f} ms, p95 {out['recall']['p95']:.1f} ms; "
         f"reranking alone p50 {out['reranking_phase']['p50']:.1f} ms")
    return out
