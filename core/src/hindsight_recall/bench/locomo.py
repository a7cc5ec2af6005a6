"""``bench recall`` (also ``bench locomo``): retrieval quality and latency on any split in the LoCoMo JSONL
format (memories + queries, such as LoCoMo's and LongMemEval's), beside a plain BM25 over the same memories."""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from ..jsonl import read_jsonl
from ..testing.scores import ALL_KS as ALL_KS
from ..testing.scores import KS as KS
from ..testing.scores import score_query as score_query  # re-exported: how bench recall scores a query
from ..types import FACT_TYPES
from ._bm25 import Okapi

#: ``--per-arm`` ablations: fused recall without one stage, as setting changes of the engine's settings
ABLATIONS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "untraced": lambda s: {},  # the default again, without the trace: the latency users see
    "without:context": lambda s: {"recall_context_enabled": False},
    "without:semantic": lambda s: {"recall_rrf_weights": f"{s.recall_rrf_weights},semantic:0",
                                   "recall_score_weights": f"{s.recall_score_weights},semantic:0"},
    "without:keyword": lambda s: {"enable_text_search": False},
    "without:graph": lambda s: {"enable_graph_retrieval": False},
    "without:temporal": lambda s: {"enable_temporal_retrieval": False},
}


def summarise(rows_by_category: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Average every metric per category and overall."""
    out: dict[str, dict[str, float]] = {}
    everything = [r for rows in rows_by_category.values() for r in rows]
    for name, rows in [("ALL", everything), *sorted(rows_by_category.items())]:
        if rows:
            out[name] = {m: round(sum(r[m] for r in rows) / len(rows), 4) for m in rows[0]} | {"n": len(rows)}
    return out


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def run_locomo(
    engine: Any, memories: Path, queries: Path, *, budget: str = "mid", max_tokens: int = 4096,
    out: Path | None = None, echo: Callable[[str], None] = print, per_arm: bool = False, replace: bool = False,
) -> dict[str, Any]:
    """Retain every conversation into a fresh bank, recall each question, print and return the metrics.

    A question is asked at its ``query_timestamp`` when its line has one (relative dates such as "four
    weeks ago" are read against it). Plain Okapi BM25 over the same memories (:mod:`._bm25`) is scored
    beside the engine, per category (``per_category["bm25"]``).

    With ``per_arm``, each arm's own ranking (read from the trace) is scored too, and so is fused
    recall without each stage (:data:`ABLATIONS`), each question asked once per variant in turn, so
    the variants' latencies come from the same moments of the same run.
    Banks of the split that already exist are an error unless ``replace`` is set; then they are deleted.
    """
    batches: dict[str, list[Any]] = defaultdict(list)
    lines: dict[str, list[int]] = defaultdict(list)
    for bank_id, line, memory in read_jsonl(memories):
        batches[bank_id].append(memory)
        lines[bank_id].append(line)
    questions = [json.loads(x) for x in queries.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    arm_rows: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    latencies: list[float] = []
    variants = {name: engine.settings.model_copy(update=update(engine.settings))
                for name, update in ABLATIONS.items()} if per_arm else {}
    variant_latencies: dict[str, list[float]] = defaultdict(list)
    baseline = {bank_id: Okapi((m.id, m.text) for m in ms) for bank_id, ms in batches.items()}
    baseline_rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    skipped = 0
    async with engine:
        existing = [b for b in batches if await engine.banks.exists(b)]
        if existing and not replace:
            raise InvalidRequest("bank", f"{len(existing)} bank(s) of this split already exist "
                                         f"({', '.join(map(repr, existing[:3]))}); pass --replace to delete "
                                         "and reload them", status=409)
        for bank_id in existing:
            await engine.delete_bank(bank_id)
        stats = await engine.retain_many(dict(batches), lines=dict(lines))
        echo(f"retained {stats.memories} memories into {stats.banks} banks in {stats.seconds:.1f} s "
             f"({stats.per_second:.0f}/s, embedding {stats.embedding_seconds:.1f} s, links {stats.link_seconds:.2f} s)")
        priors = await length_priors(engine, list(batches))
        _print_priors(priors, echo)
        run_file = out.open("w", encoding="utf-8") if out else None
        try:
            for i, q in enumerate(questions, start=1):
                started = time.perf_counter()
                body = await engine.recall(q["bank"], q["question"], budget=budget, max_tokens=max_tokens,
                                           include_entities=None, trace=per_arm,
                                           query_timestamp=q.get("query_timestamp"))
                latencies.append(time.perf_counter() - started)
                ranked = [r["id"] for r in body["results"]]
                if run_file:
                    run_file.write(json.dumps({"qid": q["qid"], "ids": ranked}) + "\n")
                if not q.get("evidence"):
                    skipped += 1
                    continue
                category = q.get("category_name", str(q.get("category")))
                rows[category].append(score_query(q["evidence"], ranked))
                if q["bank"] in baseline:
                    baseline_rows[category].append(score_query(q["evidence"], baseline[q["bank"]].rank(q["question"])))
                for arm, arm_ranked in (_arm_rankings(body) if per_arm else {}).items():
                    arm_rows[arm][category].append(score_query(q["evidence"], arm_ranked))
                for name, ranked_without in (await _ablate(engine, variants, q, budget, max_tokens,
                                                           variant_latencies)).items():
                    arm_rows[name][category].append(score_query(q["evidence"], ranked_without))
                if i % 100 == 0:
                    echo(f"  {i}/{len(questions)} queries")
        finally:
            if run_file:
                run_file.close()
    metrics = summarise(rows)
    by_category: dict[str, dict[str, dict[str, float]]] = {"fused": summarise(rows), "bm25": summarise(baseline_rows)}
    metrics["bm25"] = by_category["bm25"].get("ALL", {})
    for arm, arm_metrics in sorted(arm_rows.items()):
        name = arm if arm in ABLATIONS else f"arm:{arm}"
        by_category[name] = summarise(arm_metrics)
        metrics[name] = by_category[name]["ALL"]
    report = {
        "metrics": metrics, "skipped_no_evidence": skipped, "retain": stats.as_json(),
        "latency_ms": {"p50": round(statistics.median(latencies) * 1000, 1) if latencies else 0.0,
                       "p95": round(percentile(latencies, 0.95) * 1000, 1)},
        "budget": budget, "max_tokens": max_tokens, "per_category": by_category, "length_prior": priors,
    }
    if variant_latencies:
        report["variant_latency_ms"] = {name: {"p50": round(statistics.median(v) * 1000, 1),
                                               "p95": round(percentile(v, 0.95) * 1000, 1)}
                                        for name, v in variant_latencies.items()}
    _print_table(report, echo)
    return report


async def length_priors(engine: Any, bank_ids: Sequence[str]) -> dict[str, Any]:
    """The keyword length prior each bank chose (its statistics over every fact type, as a recall of all
    fact types reads them), and whether the backend applies it (``..._NATIVE_NORMALIZATION`` unset).

    :param engine: an open engine.
    :param bank_ids: the banks of the split.
    """
    chosen = {bank_id: await engine.banks.length_prior(bank_id, FACT_TYPES) for bank_id in bank_ids}
    return {"applied": bool(engine.text_search.length_prior), "banks": chosen}


def _print_priors(priors: dict[str, Any], echo: Callable[[str], None]) -> None:
    applied = "applied" if priors["applied"] else "not applied: the backend's own length handling ranks"
    echo(f"keyword length prior per bank ({applied}):")
    for bank_id, p in priors["banks"].items():
        echo(f"  {bank_id:24s} b {p['b']:.3f}  (spread {p['spread']:.3f}, mean length {p['mean_length']:.1f}, "
             f"{p['memories']} memories)")


async def _ablate(engine: Any, variants: dict[str, Any], q: dict[str, Any], budget: str, max_tokens: int,
                  latencies: dict[str, list[float]]) -> dict[str, list[str]]:
    """Recall one question once per ablation, each with its settings swapped in; their rankings."""
    if not variants or not q.get("evidence"):
        return {}
    ranked: dict[str, list[str]] = {}
    default = engine.settings
    try:
        for name, settings in variants.items():
            engine.settings = settings
            started = time.perf_counter()
            body = await engine.recall(q["bank"], q["question"], budget=budget, max_tokens=max_tokens,
                                       include_entities=None, query_timestamp=q.get("query_timestamp"))
            latencies[name].append(time.perf_counter() - started)
            ranked[name] = [r["id"] for r in body["results"]]
    finally:
        engine.settings = default
    return ranked


def _arm_rankings(body: dict[str, Any]) -> dict[str, list[str]]:
    """Each arm's own ranking over all fact types, by its score, from the trace."""
    per_arm: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for block in body["trace"]["retrieval_results"]:
        per_arm[block["method_name"]].extend((r["score"], r["node_id"]) for r in block["results"])
    return {arm: [node for _, node in sorted(hits, key=lambda h: -h[0])] for arm, hits in per_arm.items()}


def _print_table(report: dict[str, Any], echo: Callable[[str], None]) -> None:
    names = [f"hit_any@{k}" for k in KS] + [f"hit_all@{k}" for k in ALL_KS] + ["mrr"]
    echo(f"{'category':18s} {'n':>4s} " + " ".join(f"{n:>10s}" for n in names))
    for category, values in report["metrics"].items():
        if values:
            echo(f"{category:18s} {values['n']:4d} " + " ".join(f"{values[n]:10.3f}" for n in names))
    echo(f"recall latency p50 {report['latency_ms']['p50']} ms, p95 {report['latency_ms']['p95']} ms; "
         f"{report['skipped_no_evidence']} queries without evidence skipped")
    for name, lat in report.get("variant_latency_ms", {}).items():
        echo(f"  {name}: p50 {lat['p50']} ms, p95 {lat['p95']} ms")
