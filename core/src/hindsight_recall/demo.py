"""The ``demo`` command: a small sample bank and a few questions, answered on the embedded server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from .errors import InvalidRequest
from .jsonl import parse_lines

ARMS = ("semantic", "keyword", "graph", "temporal")


def sample_bank() -> list[Any]:
    """The bundled sample memories."""
    text = resources.files("hindsight_recall").joinpath("data/demo_bank.jsonl").read_text(encoding="utf-8")
    return [memory for _, _, memory in parse_lines(text.splitlines(), "demo")]


def sample_questions() -> list[dict[str, Any]]:
    """The bundled demo questions with their query timestamps."""
    text = resources.files("hindsight_recall").joinpath("data/demo_questions.json").read_text(encoding="utf-8")
    return list(json.loads(text))


def legend() -> str:
    """How to read an answer line: its final score, then the rank each retrieval arm gave it."""
    arms = ", ".join(f"{arm[:3]} = {arm}" for arm in ARMS)
    return ("Each answer: rank, final score (0-1, higher is better), [arm#rank ...], text. "
            f"arm#rank is the memory's rank in that retrieval arm before fusion ({arms}); "
            "an arm that did not find the memory is left out.")


async def run_demo(
    engine: Any, bank_id: str, echo: Callable[[str], None], top: int = 5, *, replace: bool = False
) -> None:
    """Load the sample into a fresh bank and print the ranked answers to each question.

    An existing bank is an error unless ``replace`` is set; then it is deleted first.
    """
    async with engine:
        if replace:
            await engine.delete_bank(bank_id)
        elif await engine.banks.exists(bank_id):
            raise InvalidRequest("bank", f"{bank_id!r} already exists; pass --replace to delete and reload it, "
                                         "or choose another --bank", status=409)
        stats = await engine.retain(bank_id, sample_bank())
        echo(f"Loaded {stats.memories} memories into bank {bank_id!r} in {stats.seconds:.2f} s "
             f"({stats.links} links).")
        echo(legend())
        for question in sample_questions():
            started = time.perf_counter()
            body = await engine.recall(bank_id, question["query"], query_timestamp=question.get("query_timestamp"),
                                       budget="mid", max_tokens=1024, trace=True)
            elapsed = (time.perf_counter() - started) * 1000
            echo(f"\n? {question['query']}   (as of {question.get('query_timestamp', 'now')}, {elapsed:.0f} ms)")
            ranks = {m["node_id"]: m["source_ranks"] for m in body["trace"]["rrf_merged"]}
            for i, result in enumerate(body["results"][:top], start=1):
                arm_ranks = ranks.get(result["id"], {})
                where = " ".join(f"{arm[:3]}#{arm_ranks[f'{arm}_rank']}" for arm in ARMS if f"{arm}_rank" in arm_ranks)
                echo(f"  {i}. {result['scores']['final']:.3f}  [{where}]  {result['text']}")
