"""How ``bench scale`` times recall on one server: latency per configuration and budget, phases,
concurrent recalls, and the default cross-encoder's cost; each question asks the bank paired with it.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..recall import cost
from ._cpu import PhaseCpu, Stretch, describe
from .synthetic import BenchQuery

#: bank settings of each measured configuration
CONFIGS: dict[str, dict[str, bool]] = {
    "all arms": {"enable_graph_retrieval": True, "enable_temporal_retrieval": True},
    "semantic + keyword": {"enable_graph_retrieval": False, "enable_temporal_retrieval": False},
}
WARMUP = 5
#: a question and the bank it asks
Job = tuple[BenchQuery, str]


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


async def recall_once(engine: Any, bank_id: str, q: BenchQuery, budget: str,
                  trace: bool = False) -> tuple[float, dict[str, Any]]:
    # no temporal_window: the date finder reads the window from the question, as for a user
    started = time.perf_counter()
    body = await engine.recall(bank_id, q.text, budget=budget, trace=trace)
    return time.perf_counter() - started, body


async def configure(engine: Any, bank_ids: list[str], values: dict[str, Any]) -> None:
    for bank_id in bank_ids:
        await engine.banks.configure(bank_id, values)


async def latency(engine: Any, bank_ids: list[str], jobs: list[Job], budgets: list[str],
                   echo: Callable[[str], None], tag: str, postmaster: Sequence[int] | None = None) -> dict[str, Any]:
    """Per configuration and budget: latency percentiles, phases, and CPU per recall (the whole pass's
    process and server CPU over its recalls; phases and arms from a third, metered pass).

    :param postmaster: the database server's postmaster pid, to count its CPU (None: not counted).
    """
    from tqdm import tqdm  # late: only long runs show bars

    out: dict[str, Any] = {}
    for label, overrides in CONFIGS.items():
        await configure(engine, bank_ids, overrides)
        out[label] = {}
        for budget in budgets:
            totals: list[float] = []
            phases: dict[str, list[float]] = {}
            by_kind: dict[str, list[float]] = {}
            arms: set[str] = set()
            results = 0
            bar = tqdm(jobs, desc=f"{label} {budget}", unit="query", disable=not sys.stderr.isatty(),
                       file=sys.stderr)
            stretch = Stretch(cost.Meter(postmaster))
            for q, bank_id in bar:
                seconds, body = await recall_once(engine, bank_id, q, budget)
                totals.append(seconds)
                by_kind.setdefault(q.kind, []).append(seconds)
                results += len(body["results"])
            cpu = stretch.per_recall(len(jobs))
            for q, bank_id in jobs:  # phases from a second, traced pass: the trace's own cost stays out
                traced = (await recall_once(engine, bank_id, q, budget, trace=True))[1]
                for name, value in phase_seconds(traced).items():
                    phases.setdefault(name, []).append(value)
                    if name.startswith("retrieval_"):
                        arms.add(name.removeprefix("retrieval_"))
            metered = PhaseCpu(postmaster)
            for q, bank_id in jobs:  # the meter's reads stay out of the passes above
                await metered.recall(functools.partial(recall_once, engine, bank_id, q, budget))
            out[label][budget] = {
                **percentiles(totals), "arms": sorted(arms), "mean_results": round(results / len(jobs), 1),
                "by_kind": {k: percentiles(v) for k, v in by_kind.items()},
                "phases": {k: percentiles(v) for k, v in phases.items()},
                "cpu_ms_per_recall": cpu, "cpu": metered.summary(),
            }
            row = out[label][budget]
            echo(f"{tag} {label:18s} {budget:4s} p50 {row['p50']:7.1f} ms  p95 {row['p95']:7.1f} ms  "
                 f"p99 {row['p99']:7.1f} ms  CPU/recall {_cpu_line(cpu)}  arms: {', '.join(row['arms'])}")
            echo("\n".join(f"{tag}   {line}" for line in describe(row["cpu"]).splitlines()))
    await configure(engine, bank_ids, CONFIGS["all arms"])
    return out


async def _worker(engine: Any, jobs: Iterator[Job], latencies: list[float],
                  errors: Counter[str]) -> None:
    """Recall the next job until none is left; the workers share one iterator, so each job runs once."""
    for q, bank_id in jobs:
        try:
            latencies.append((await recall_once(engine, bank_id, q, "mid"))[0])
        except Exception as exc:  # counted and reported: pool exhaustion shows up here
            errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1


async def concurrency(engine: Any, jobs: list[Job], levels: list[int], echo: Callable[[str], None], tag: str,
                      postmaster: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Recalls per second with ``level`` tasks at once, per level: first a warm-up of two recalls per task,
    not measured, so that the level's pooled connections are open and the timed pass is the steady state
    (on Citus, a connection's first statements on a worker load its metadata)."""
    rows: list[dict[str, Any]] = []
    for level in levels:
        warm_up = iter([jobs[i % len(jobs)] for i in range(2 * level)])
        await asyncio.gather(*(_worker(engine, warm_up, [], Counter()) for _ in range(level)))
        queue = iter([jobs[i % len(jobs)] for i in range(max(len(jobs), 4 * level))])
        latencies: list[float] = []
        errors: Counter[str] = Counter()
        stretch = Stretch(cost.Meter(postmaster))
        started = time.perf_counter()
        await asyncio.gather(*(_worker(engine, queue, latencies, errors) for _ in range(level)))
        wall = time.perf_counter() - started
        row = {"concurrency": level, "requests": len(latencies) + sum(errors.values()),
               "throughput_per_s": round(len(latencies) / wall, 2), **percentiles(latencies),
               "errors": dict(errors), "cpu_ms_per_recall": stretch.per_recall(len(latencies))}
        rows.append(row)
        echo(f"{tag} concurrency {level:3d}: {row['throughput_per_s']:6.1f} recalls/s, "
             f"p50 {row['p50']:.1f} ms, "
             f"p95 {row['p95']:.1f} ms, {sum(errors.values())} errors, "
             f"CPU/recall {_cpu_line(row['cpu_ms_per_recall'])}")
    return rows


def _cpu_line(cpu: dict[str, float]) -> str:
    return " + ".join(f"{k.removesuffix('_ms')} {v:.1f}" for k, v in cpu.items() if k != "total_ms") \
        + f" = {cpu['total_ms']:.1f} ms"


async def rerank_cost(engine: Any, bank_ids: list[str], jobs: list[Job], base: Path,
                  echo: Callable[[str], None], tag: str) -> dict[str, Any]:
    """Recall at budget mid with the default local reranker on a random model of the default's shape."""
    from ..recall.rerank import RerankStage
    from ._rerank_cost import DEFAULT_SHAPE, local_reranker, random_cross_encoder

    reranker = local_reranker(random_cross_encoder(base / "random-cross-encoder"), engine.settings)
    if reranker is None:
        echo(f"{tag} reranker cost skipped: pip install hindsight-recall-reranker-local")
        return {"skipped": "the local reranker plugin is not installed"}
    before = engine.rerank
    engine.rerank = RerankStage(reranker, engine.settings)
    # reranking on for this pass, whatever the environment says
    await configure(engine, bank_ids, {**CONFIGS["all arms"], "enable_reranking": True})
    try:
        for q, bank_id in jobs[:WARMUP]:  # loads the model
            await recall_once(engine, bank_id, q, "mid")
        totals = [(await recall_once(engine, bank_id, q, "mid"))[0] for q, bank_id in jobs]
        stage: list[float] = []
        reranked: list[int] = []
        for q, bank_id in jobs:
            body = (await recall_once(engine, bank_id, q, "mid", trace=True))[1]
            stage.append(phase_seconds(body).get("reranking", 0.0))
            for phase in body["trace"]["summary"]["phase_metrics"]:
                if phase["phase_name"] == "reranking" and phase["details"].get("reranker_type") == "local":
                    reranked.append(int(phase["details"].get("candidates_reranked", 0)))
    finally:
        await engine.rerank.close()
        engine.rerank = before
        await configure(engine, bank_ids, {**CONFIGS["all arms"], "enable_reranking": None})
    out = {"model": "random weights, the shape of cross-encoder/ms-marco-MiniLM-L-6-v2", "shape": DEFAULT_SHAPE,
           "cap": engine.settings.reranker_cap("mid"), "recall": percentiles(totals),
           "reranking_phase": percentiles(stage),
           "mean_candidates_reranked": round(sum(reranked) / len(reranked), 1) if reranked else 0.0}
    echo(f"{tag} with the default cross-encoder (mid, {out['mean_candidates_reranked']:.0f} candidates): "
         f"recall p50 {out['recall']['p50']:.1f} ms, p95 {out['recall']['p95']:.1f} ms; "
         f"reranking alone p50 {out['reranking_phase']['p50']:.1f} ms")
    return out
