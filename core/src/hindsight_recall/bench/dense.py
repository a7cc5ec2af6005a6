"""Recall on a densely linked bank, at every budget.

Run ``python -m hindsight_recall.bench.dense --out FILE``. A report of upstream Hindsight's had recall
hang for minutes on a bank of about 1,800 memories and 76,000 links (42 per memory). This bank is at
least as dense: 1,800 memories in six tight topics (every memory gets the most semantic links retain
keeps, 50), each naming three of 40 entities (every entity on about 135 memories) and all dated within
two weeks (dozens of neighbours in time). Each budget is timed with the trace off, counting the recalls
whose arms ran past ``LINK_EXPANSION_TIMEOUT`` and fell back (the warnings recall logs) and any that
failed (a statement past ``DB_COMMAND_TIMEOUT`` fails it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from .scale import QueryVectors, percentiles
from .synthetic import START, generate

MEMORIES = 1_800
TOPICS = 6
ENTITIES = 40
PER_MEMORY = 3
DAYS = 14
#: how far a memory's vector lies from its topic's direction (cosine to a topic neighbour about 0.9)
SPREAD = 0.35
BANK = "dense"


class _Warnings(logging.Handler):
    """Counts the warnings recall logs while in a ``with`` block (an arm past its timeout logs one)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1

    def __enter__(self) -> _Warnings:
        logging.getLogger("hindsight_recall.recall").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("hindsight_recall.recall").removeHandler(self)


def dense_bank(n: int = MEMORIES, seed: int = 0) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray]:
    """Memories, their vectors, each memory's topic, and the topics' directions."""
    rng = np.random.default_rng([seed, 42])
    base = generate(n, seed=seed)
    names = [f"Entity {k:02d}" for k in range(ENTITIES)]
    topics = rng.integers(0, TOPICS, n)
    centres = rng.standard_normal((TOPICS, base.vectors.shape[1])).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vectors = centres[topics] + rng.standard_normal(base.vectors.shape).astype(np.float32) * (
        SPREAD / np.sqrt(base.vectors.shape[1]))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    memories = []
    for m in base.memories:
        when = START + timedelta(seconds=float(rng.random() * DAYS * 86400))
        picked = tuple(names[k] for k in rng.choice(ENTITIES, PER_MEMORY, replace=False))
        memories.append(replace(m, occurred_start=when, occurred_end=when, mentioned_at=None, entities=picked,
                                causes=(), source_ids=()))
    return memories, vectors, topics, centres


async def run(out: Path, queries: int, data_dir: Path, keep: bool = False) -> dict[str, Any]:
    from ..engine import Engine
    from ..settings import load_settings

    memories, vectors, topics, centres = dense_bank()
    rng = np.random.default_rng(7)
    asked = [(f"What happened with {memories[int(i)].entities[0]} and {memories[int(i)].entities[1]}?",
              centres[topics[int(i)]] + np.asarray(rng.standard_normal(centres.shape[1]), np.float32) * 0.02)
             for i in rng.integers(0, len(memories), queries)]
    engine = Engine(load_settings(reranker_provider="rrf", embedded_data_dir=data_dir))
    result: dict[str, Any] = {"memories": len(memories)}
    async with engine:
        await engine.delete_bank(BANK)
        stats = await engine.retain_many({BANK: memories}, embeddings={BANK: vectors.tolist()}, progress=False)
        by_type, pairs = await engine.diagnostics.link_counts(BANK)
        links = sum(by_type.values())
        result.update(links=links, links_by_type=by_type, links_per_memory=round(links / len(memories), 1),
                      entity_pairs=pairs, retain_seconds=round(stats.seconds, 1))
        engine.embedder = QueryVectors(engine.embedder, {q: v.tolist() for q, v in asked})
        for q, _ in asked[:5]:
            await engine.recall(BANK, q, budget="mid")
        result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
        result["budgets"] = {}
        for budget in ("low", "mid", "high"):
            times, failed, warned = [], 0, _Warnings()
            with warned:
                for q, _ in asked:
                    started = time.perf_counter()
                    try:
                        await engine.recall(BANK, q, budget=budget)
                    except Exception:  # counted: a statement past its timeout fails the recall
                        failed += 1
                    times.append(time.perf_counter() - started)
            fell_back = warned.count
            result["budgets"][budget] = {**percentiles(times), "failed": failed, "fell_back": fell_back}
            row = result["budgets"][budget]
            print(f"{budget:4s} p50 {row['p50']:6.1f} ms  p95 {row['p95']:6.1f} ms  failed {failed}  "
                  f"fell back after a timeout {fell_back} of {len(asked)}")
        result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        if not keep:
            await engine.delete_bank(BANK)
    out.write_text(json.dumps(result, indent=1, default=str))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "hindsight-bench-dense")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep", action="store_true", help=f"keep the bank ({BANK!r}) for a closer look")
    a = parser.parse_args()
    result = asyncio.run(run(a.out, a.queries, a.data_dir, a.keep))
    print(f"{result['memories']:,} memories, {result['links']:,} links ({result['links_per_memory']} per memory: "
          f"{result['links_by_type']}), {result['entity_pairs']:,} entity pairs; wrote {a.out}")


if __name__ == "__main__":
    main()
