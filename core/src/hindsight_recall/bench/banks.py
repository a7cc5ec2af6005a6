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
import time
from pathlib import Path
from typing import Any

from .scale import QueryVectors, percentiles
from .synthetic import generate, queries
from .synthetic import split as split  # re-exported: the banks this benchmark loads

WARMUP = 5
#: runs of the planned statement; the medians are reported
PLANS = 15


async def run(total: int, count: int, data_dir: Path, nq: int, label: str) -> dict[str, Any]:
    """Load (first time) and time ``nq`` recalls over ``count`` banks holding ``total`` memories."""
    from ..engine import Engine
    from ..settings import load_settings

    bank = generate(total, seed=0)
    engine = Engine(load_settings(reranker_provider="rrf", embedded_data_dir=data_dir))
    out: dict[str, Any] = {"label": label, "total": total, "banks": count}
    async with engine:
        parts = split(bank, count)
        if not await engine.list_banks():
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
        # the semantic arm's statement for one fact type: median planning and execution time
        out["plan"] = await engine.diagnostics.semantic_plan(targets[0], qs[0].vector.tolist(), PLANS)
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
