"""Benchmark the rerankers: local cross-encoder throughput and the TEI client's overhead.

The local figures use a tiny random-weight cross-encoder (or ``--model``), so they measure the
batching and threading path, not a production model. The TEI figures run against the fixture
server on 127.0.0.1, which answers at once, so they are the client's own cost per recall.

Usage: ``python rerankers/bench_rerankers.py --out bench-out/rerankers.json``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# Only local files are read; offline mode turns a stray hub lookup into an error instead of a hang.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CANDIDATES = 300
QUERY = "when did the team move the weekly planning meeting to thursday"
VOCABULARY = "the team agreed to move planning notes budget review meeting office thursday project"


def documents(count: int = CANDIDATES) -> list[str]:
    """Memory-sized texts of 12 to 60 words, deterministic.

    :param count: how many.
    """
    words = VOCABULARY.split()
    return [
        " ".join(words[(i * 7 + j) % len(words)] for j in range(12 + (i * 13) % 49)) for i in range(count)
    ]


async def bench_local(model: Path, batch_sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """Pairs per second of the local reranker at each batch size.

    :param model: a cross-encoder directory.
    :param batch_sizes: the ``RERANKER_LOCAL_BATCH_SIZE`` values to try.
    :param repeats: timed calls of 300 pairs per batch size.
    """
    from hindsight_recall_reranker_local import LocalReranker, LocalSettings

    docs, rows = documents(), []
    for batch_size in batch_sizes:
        reranker = LocalReranker(None, LocalSettings(model=str(model), batch_size=batch_size))
        await reranker.start()
        await reranker.score(QUERY, docs)  # warm-up: first-call allocations and thread start
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            await reranker.score(QUERY, docs)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        rows.append(
            {
                "batch_size": batch_size,
                "pairs": CANDIDATES,
                "median_s": round(median, 4),
                "pairs_per_s": round(CANDIDATES / median, 1),
            }
        )
        await reranker.close()
    return rows


async def bench_tei(repeats: int) -> dict[str, Any]:
    """Round-trip time of the TEI client for 300 candidates against the local fixture server.

    :param repeats: timed calls.
    """
    from hindsight_recall.testing.http_server import FixtureServer, tei_routes
    from hindsight_recall_reranker_tei import API, TEIReranker, TEISettings

    docs = documents()
    with FixtureServer(tei_routes(score=lambda q, t: float(len(t)))) as server:
        reranker = TEIReranker(None, TEISettings(url=server.url))
        await reranker.start()
        await reranker.score(QUERY, docs)  # warm-up: opens the connections
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            await reranker.score(QUERY, docs)
            times.append(time.perf_counter() - started)
        requests = len(server.requests_to("POST", "/rerank")) // (repeats + 1)
        await reranker.close()
    # The client's own work without the network: building bodies and mapping scores back.
    payload = [{"index": i, "score": float(i)} for i in range(128)]
    started = time.perf_counter()
    for _ in range(repeats):
        for start in range(0, CANDIDATES, 128):
            batch = docs[start : start + 128]
            json.dumps(API.body(QUERY, batch))
            API.scores(payload[: len(batch)], len(batch), "bench")
    codec = (time.perf_counter() - started) / repeats
    times.sort()
    return {
        "candidates": CANDIDATES,
        "requests_per_call": requests,
        "round_trip_median_ms": round(statistics.median(times) * 1000, 2),
        "round_trip_p95_ms": round(times[int(len(times) * 0.95) - 1] * 1000, 2),
        "encode_decode_ms": round(codec * 1000, 3),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from hindsight_recall.testing.models import build_tiny_cross_encoder

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or build_tiny_cross_encoder(Path(tmp) / "tiny-cross-encoder")
        local = await bench_local(model, args.batch_sizes, args.repeats)
    return {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        },
        "model": str(args.model) if args.model else "tiny random-weight BERT (2 layers, hidden 32)",
        "local": local,
        "tei_client": await bench_tei(args.tei_repeats),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("bench-out/rerankers.json"), help="where to write JSON"
    )
    parser.add_argument("--model", type=Path, help="a cross-encoder directory instead of the tiny model")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--repeats", type=int, default=5, help="timed local calls per batch size")
    parser.add_argument("--tei-repeats", type=int, default=100, help="timed TEI client calls")
    options = parser.parse_args()
    results = asyncio.run(main(options))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
