"""Embedding speed of the local model on torch and on ONNX Runtime, in one run, and how far they differ.

``python -m hindsight_recall.bench.embedders [--out embedders.json]`` (needs the ``torch`` extra).
Queries are embedded one at a time (as recall does); passages in batches (as retain does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..embeddings import LocalEmbeddings
from ..settings import load_settings

BACKENDS = ("torch", "onnx")


def texts(data: Path | None, count: int) -> tuple[list[str], list[str]]:
    """Questions and passages: from a LoCoMo split when given, else generated sentences."""
    if data and (data / "queries.jsonl").exists():
        qs = [json.loads(x)["question"] for x in (data / "queries.jsonl").read_text().splitlines() if x.strip()]
        ps = [json.loads(x)["text"] for x in (data / "memories.jsonl").read_text().splitlines() if x.strip()]
        return qs[:count], ps[: count * 5]
    from .synthetic import generate, queries

    bank = generate(max(count * 5, 200), seed=0)
    return [q.text for q in queries(bank, count)], [m.text for m in bank.memories[: count * 5]]


async def measure(backend: str, questions: list[str], passages: list[str], cache: Path | None) -> dict[str, Any]:
    """Load, warm up and time one backend; keep its vectors for the comparison."""
    overrides: dict[str, Any] = {"embeddings_local_backend": backend}
    if cache:
        overrides["embeddings_onnx_cache_dir"] = cache
    emb = LocalEmbeddings(load_settings(**overrides))
    t0 = time.perf_counter()
    await emb.embed(["warm up"], mode="query")  # loads (and for onnx, the first time, exports) the model
    load = time.perf_counter() - t0
    for q in questions[:5]:
        await emb.embed([q], mode="query")
    single: list[float] = []
    for q in questions:
        t0 = time.perf_counter()
        await emb.embed([q], mode="query")
        single.append(time.perf_counter() - t0)
    t0, cpu0 = time.perf_counter(), time.process_time()
    vectors = await emb.embed(passages, mode="passage")
    batch, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    # CPU seconds (every thread of this process) say more than wall time on a machine shared with other work
    return {"load_seconds": round(load, 2), "query_p50_ms": round(statistics.median(single) * 1000, 2),
            "query_p95_ms": round(sorted(single)[int(0.95 * (len(single) - 1))] * 1000, 2),
            "passages_per_s": round(len(passages) / batch, 1), "passage_cpu_ms": round(cpu / len(passages) * 1000, 2),
            "batch_size": emb.batch_size, "vectors": np.array(vectors)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    questions, passages = texts(args.data, args.count)
    results = {b: await measure(b, questions, passages, args.cache_dir) for b in BACKENDS}
    a, b = results["torch"].pop("vectors"), results["onnx"].pop("vectors")
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    report: dict[str, Any] = {"questions": len(questions), "passages": len(passages), "backends": results,
              "load_average": list(os.getloadavg()),
              "cosine": {"min": round(float(cosine.min()), 6), "mean": round(float(cosine.mean()), 6)}}
    for name, r in results.items():
        print(f"{name:5s}: query p50 {r['query_p50_ms']} ms, p95 {r['query_p95_ms']} ms; "
              f"passages {r['passages_per_s']}/s, {r['passage_cpu_ms']} CPU ms each (batch {r['batch_size']}); "
              f"load {r['load_seconds']} s")
    print(f"cosine torch vs onnx over {len(passages)} passages: min {report['cosine']['min']}, "
          f"mean {report['cosine']['mean']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hindsight_recall.bench.embedders``."""
    p = argparse.ArgumentParser(prog="python -m hindsight_recall.bench.embedders", description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=None, help="a LoCoMo split folder for real texts")
    p.add_argument("--count", type=int, default=200, help="questions (and five times as many passages)")
    p.add_argument("--cache-dir", type=Path, default=None, help="ONNX export cache (default: the setting's)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON here")
    asyncio.run(run(p.parse_args(argv)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
