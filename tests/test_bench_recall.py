"""``bench recall``: any split in the LoCoMo JSONL format, each question at its query_timestamp, beside BM25."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hindsight_recall import Engine
from hindsight_recall.bench._bm25 import Okapi, words
from hindsight_recall.bench.locomo import run_locomo
from hindsight_recall.settings import Settings

MEMORIES = [
    {"id": "D1:1", "text": "user: Tomasz took me sailing on the lake.", "occurred_at": "2023-02-01T10:00:00Z"},
    {"id": "D2:1", "text": "user: Tomasz and I went sailing again, in a storm this time.",
     "occurred_at": "2023-05-10T10:00:00Z"},
    {"id": "D3:1", "text": "assistant: Sailing in a storm calls for a reefed mainsail.",
     "occurred_at": "2023-05-10T10:01:00Z"},
]


def split(tmp_path: Path, bank: str, **query: Any) -> tuple[Path, Path]:
    memories = tmp_path / "memories.jsonl"
    memories.write_text("".join(json.dumps({"bank": bank, **m}) + "\n" for m in MEMORIES))
    queries = tmp_path / "queries.jsonl"
    line = {"bank": bank, "qid": "q1", "question": "When did I go sailing with Tomasz three weeks ago?",
            "category_name": "temporal-reasoning", "evidence": ["D2:1"], **query}
    queries.write_text(json.dumps(line) + "\n")
    return memories, queries


async def test_each_question_is_asked_at_its_query_timestamp(
    make_settings: Callable[..., Settings], tmp_path: Path, bank: str
) -> None:
    memories, queries = split(tmp_path, bank, query_timestamp="2023-05-31T12:00:00Z")
    out = tmp_path / "run.jsonl"
    report = await run_locomo(Engine(make_settings()), memories, queries, out=out, echo=lambda _: None)
    assert report["metrics"]["ALL"]["hit_any@1"] == 1.0
    assert json.loads(out.read_text())["ids"][0] == "D2:1"


async def test_plain_bm25_is_scored_beside_the_engine_per_category(
    make_settings: Callable[..., Settings], tmp_path: Path, bank: str
) -> None:
    memories, queries = split(tmp_path, bank)
    lines: list[str] = []
    report = await run_locomo(Engine(make_settings()), memories, queries, echo=lines.append)
    assert report["per_category"]["bm25"]["temporal-reasoning"]["n"] == 1
    assert report["metrics"]["bm25"]["n"] == 1
    assert report["per_category"]["fused"]["ALL"] == report["metrics"]["ALL"]
    assert any(line.startswith("bm25") for line in lines)


async def test_the_length_prior_each_bank_chose_is_printed_and_kept(
    make_settings: Callable[..., Settings], tmp_path: Path, bank: str
) -> None:
    memories, queries = split(tmp_path, bank)
    lines: list[str] = []
    report = await run_locomo(Engine(make_settings()), memories, queries, echo=lines.append)
    prior = report["length_prior"]
    assert prior["applied"] is True
    # three turns of about the same length (their words and their date): even, so no prior
    chosen = prior["banks"][bank]
    assert list(prior["banks"]) == [bank] and chosen["memories"] == 3 and chosen["b"] == 0.0
    assert chosen["spread"] < 0.5 and chosen["mean_length"] > 5
    assert any(line.startswith("keyword length prior per bank (applied)") for line in lines)
    assert any(line.split()[:3] == [bank, "b", "0.000"] for line in lines)
    fixed = make_settings(plugins={"text_search": {"native": {"normalization": 1}}})
    report = await run_locomo(Engine(fixed), memories, queries, echo=lines.append, replace=True)
    assert report["length_prior"]["applied"] is False and report["length_prior"]["banks"][bank]["memories"] == 3


def test_okapi_ranks_by_rare_words_and_shorter_memories() -> None:
    okapi = Okapi([("long", "sailing " + "and the weather was fine " * 20), ("short", "sailing trip"),
                   ("none", "cooking pasta"), ("rare", "storm sailing")])
    assert okapi.rank("a sailing storm") == ["rare", "short", "long"]
    assert okapi.rank("the and") == []  # stopwords only
    assert okapi.rank("sailing", limit=1) == ["short"]
    assert words("Did I go SAILING?") == ["go", "sailing"]


def test_bench_recall_and_its_first_name_are_one_command() -> None:
    from click.testing import CliRunner
    from hindsight_recall.cli import main

    recall, locomo = (CliRunner().invoke(main, ["bench", name, "--help"]) for name in ("recall", "locomo"))
    assert recall.exit_code == locomo.exit_code == 0
    assert "query_timestamp" in recall.output
    assert locomo.output == recall.output.replace("bench recall", "bench locomo")
