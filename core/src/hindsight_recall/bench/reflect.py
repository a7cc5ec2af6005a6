"""What reflect adds to a recall and a model call: its own overhead, with a stand-in model on 127.0.0.1.

``python -m hindsight_recall.bench.reflect [--memories 500] [--runs 200] [--out reflect.json]``:

1. starts the stand-in OpenAI-compatible model (:mod:`hindsight_recall.testing.llm_server`, answers at
   once) and an engine on a fresh embedded server (or ``--database-url``), and retains synthetic memories;
2. per run, in alternating order: one recall with reflect's options, and one reflect;
3. prints and writes the p50/p95 of: the reflect, its recall, its model call(s), its overhead (the
   reflect minus its own recall and model calls: the profile read, the prompt, reading the reply and
   the citations, the response) and the reflect minus the separate recall (overhead plus the model's
   round trip on 127.0.0.1).

The stand-in runs in a thread of this process, so its time and the GIL count against reflect, never for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from ..engine import Engine
from ..llm.openai import OpenAICompatibleLLM
from ..reflect import Reflector
from ..reflect.run import RECALL_TOKENS
from ..settings import load_settings
from ..testing.http_server import FixtureServer
from ..testing.llm_server import openai_routes

NAMES = ("Alice", "Bob", "Carla", "Dmitri", "Esther", "Farid", "Gita", "Hugo")
THINGS = ("cello", "Rust", "marathons", "green tea", "Lisbon", "chess", "sourdough", "Python", "sailing", "jazz")
VERBS = ("likes", "learned", "talked about", "moved for", "practises", "wrote about", "bought gear for")
QUESTIONS = ("What does Alice like?", "Where did Carla move?", "Which language does Hugo use?",
             "What does Bob practise?", "Who likes sailing?")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(seconds: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(seconds, 0.5) * 1000, 3), "p95_ms": round(percentile(seconds, 0.95) * 1000, 3),
            "mean_ms": round(sum(seconds) / len(seconds) * 1000, 3)}


async def run(memories: int, runs: int, database_url: str | None, data_dir: Path) -> dict[str, Any]:
    rng = random.Random(7)
    with FixtureServer(openai_routes()) as llm_server:
        settings = load_settings(embedded_data_dir=data_dir, database_url=database_url, reranker_provider="rrf",
                                 llm_provider="openai", llm_base_url=llm_server.url + "/v1", llm_model="stub-model")
        async with Engine(settings) as engine:
            bank = f"bench-reflect-{os.getpid()}"
            await engine.retain(bank, [{"id": f"m{i}", "text": f"{rng.choice(NAMES)} {rng.choice(VERBS)} "
                                        f"{rng.choice(THINGS)} in {2015 + i % 10}.", "type": "world"}
                                       for i in range(memories)], progress=False)
            llm = OpenAICompatibleLLM(settings)
            reflector = Reflector(engine, llm=llm)
            options = {"budget": "low", "max_tokens": RECALL_TOKENS, "types": None, "tags": None,
                       "tags_match": "any", "include_entities": None}
            for question in QUESTIONS:  # warm: the model, the pool, the stand-in's connection
                await reflector.reflect(bank, question)
            rows: dict[str, list[float]] = {k: [] for k in
                                            ("reflect", "reflect_recall", "llm", "overhead", "recall_alone",
                                             "reflect_minus_recall_alone")}
            for i in range(runs):
                question = QUESTIONS[i % len(QUESTIONS)]
                order = (0, 1) if i % 2 == 0 else (1, 0)
                recall_alone = 0.0
                for step in order:
                    if step == 0:
                        began = time.perf_counter()
                        await engine.recall(bank, question, **options)
                        recall_alone = time.perf_counter() - began
                    else:
                        await reflector.reflect(bank, question)
                t = reflector.last
                rows["reflect"].append(t.total)
                rows["reflect_recall"].append(t.recall)
                rows["llm"].append(sum(t.llm))
                rows["overhead"].append(t.total - t.recall - sum(t.llm))
                rows["recall_alone"].append(recall_alone)
                rows["reflect_minus_recall_alone"].append(t.total - recall_alone)
            await llm.close()
            await engine.delete_bank(bank)
    return {"memories": memories, "runs": runs, "budget": "low", "load": os.getloadavg(),
            "cpus": os.cpu_count(), **{k: summary(v) for k, v in rows.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--memories", type=int, default=500)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--database-url", default=os.environ.get("HINDSIGHT_API_DATABASE_URL"))
    parser.add_argument("--out", type=Path, default=Path("reflect.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-reflect-", dir="/tmp") as work:
        report = asyncio.run(run(args.memories, args.runs, args.database_url, Path(work) / "data"))
    print(f"{report['memories']} memories, {report['runs']} runs, load {report['load'][0]:.2f} "
          f"on {report['cpus']} CPUs")
    print(f"{'':28} {'p50 ms':>9} {'p95 ms':>9}")
    for key in ("reflect", "reflect_recall", "llm", "overhead", "recall_alone", "reflect_minus_recall_alone"):
        print(f"{key:28} {report[key]['p50_ms']:9.3f} {report[key]['p95_ms']:9.3f}")
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
