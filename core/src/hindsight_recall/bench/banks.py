"""Recall latency against the number of banks: the same total of memories split over N banks.

Run ``python -m hindsight_recall.bench.banks --total 100000 --banks 100 --data-dir DIR --out FILE``.
The first run into a data directory generates and loads the banks; later runs reuse them, so
two versions of the engine can be timed on the same data (a newer engine migrates the database
on open). Each question goes to one bank, round-robin; the query is embedded by the real model
(its cost counts) but searched with the synthetic vector of its topic. The trace is off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ..store.ann import placement
from .scale import QueryVectors, percentiles
from .synthetic import generate, queries
from .synthetic import split as split  # re-exported: the banks this benchmark loads

WARMUP = 5
PLANS = 15


async def _planning(engine: Any, bank_id: str, vector: list[float]) -> dict[str, float]:
    """Median planning and execution time of the semantic arm's statement for one fact type."""
    async with engine.db.connect() as conn:
        # older schemas (a run of an older release) have no slots, or no index flags at all
        columns = set((await conn.execute(text(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'memory_units'::regclass "
            "AND attname IN ('ann', 'ann_slot')"))).scalars())
        predicate = ""
        if "ann_slot" in columns:
            predicate = (await placement(conn, bank_id)).predicate()
        elif "ann" in columns:
            shared = await conn.scalar(text("SELECT indexed FROM banks WHERE bank_id = :b"), {"b": bank_id})
            predicate = "ann" if shared else ""
        indexed = bool(predicate)
        literal = "[" + ",".join(f"{v:.7g}" for v in vector) + "]"
        out: dict[str, Any] = {}
        # as the arm asks it; for an indexed bank, also the exact scan it would get below the threshold
        for name, ann in [("", f" AND {predicate}" if indexed else ""), *([("exact_", "")] if indexed else [])]:
            if indexed:
                await conn.execute(text("SELECT set_config('hnsw.ef_search', '60', true), "
                                        "set_config('hnsw.iterative_scan', 'strict_order', true)"))
            sql = text(
                "EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) SELECT id FROM memory_units WHERE bank_id = :b "
                f"AND fact_type = 'world'{ann} AND embedding IS NOT NULL "
                "ORDER BY embedding <=> CAST(:v AS vector) LIMIT 60"
            )
            plan, run = [], []
            for _ in range(PLANS):
                doc = (await conn.execute(sql, {"b": bank_id, "v": literal})).scalar()
                doc = doc[0] if isinstance(doc, list) else json.loads(doc)[0]
                plan.append(doc["Planning Time"])
                run.append(doc["Execution Time"])
            out[f"{name}planning_ms"] = round(statistics.median(plan), 3)
            out[f"{name}execution_ms"] = round(statistics.median(run), 3)
        indexes = await conn.scalar(text(
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'memory_units' AND schemaname = current_schema()"))
        rows = await conn.scalar(text(
            "SELECT count(*) FROM memory_units WHERE bank_id = :b AND fact_type = 'world'"), {"b": bank_id})
    return {**out, "indexes_on_memory_units": int(indexes), "bank_indexed": indexed, "world_rows": int(rows)}


async def run(total: int, count: int, data_dir: Path, nq: int, label: str) -> dict[str, Any]:
    """Load (first time) and time ``nq`` recalls over ``count`` banks holding ``total`` memories."""
    from ..engine import Engine
    from ..settings import load_settings

    bank = generate(total, seed=0)
    engine = Engine(load_settings(reranker_provider="rrf", embedded_data_dir=data_dir))
    out: dict[str, Any] = {"label": label, "total": total, "banks": count}
    async with engine:
        parts = split(bank, count)
        async with engine.db.connect() as conn:
            present = int(await conn.scalar(text("SELECT count(*) FROM banks")))
        if present == 0:
            started = time.perf_counter()
            stats = await engine.retain_many({b: m for b, (m, _) in parts.items()},
                                             embeddings={b: v for b, (_, v) in parts.items()}, progress=False)
            out["load"] = {**stats.as_json(), "wall_seconds": round(time.perf_counter() - started, 1)}
        qs = queries(bank, nq, seed=0)
        names = sorted(parts)
        engine.embedder = QueryVectors(engine.embedder, {q.text: q.vector.tolist() for q in qs})
        targets = [names[(k * 7919) % len(names)] for k in range(len(qs))]
        for q, b in list(zip(qs, targets, strict=True))[:WARMUP]:
            await engine.recall(b, q.text, budget="mid", temporal_window=q.window)
        out["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
        times = []
        for q, b in zip(qs, targets, strict=True):
            t0 = time.perf_counter()
            await engine.recall(b, q.text, budget="mid", temporal_window=q.window)
            times.append(time.perf_counter() - t0)
        out["recall"] = percentiles(times)
        out["plan"] = await _planning(engine, targets[0], qs[0].vector.tolist())
        out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument("--banks", type=int, default=1)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, required=True)
    a = parser.parse_args()
    result = asyncio.run(run(a.total, a.banks, a.data_dir, a.queries, a.label))
    print(json.dumps(result, indent=1))
    with a.out.open("a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
