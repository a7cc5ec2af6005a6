"""The side-by-side benchmark's own logic: items, alternation, scoring and its command line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hindsight_recall.bench.upstream import alternate, load_split, main, score, table, upstream_item


def test_upstream_item_carries_our_id() -> None:
    item = upstream_item({"bank": "b", "id": "D1:3", "text": "hi", "occurred_at": "2023-05-08T13:56:00+00:00"})
    assert item == {"content": "hi", "document_id": "D1:3", "metadata": {"mem_id": "D1:3"},
                    "timestamp": "2023-05-08T13:56:00+00:00"}
    assert "timestamp" not in upstream_item({"id": "x", "text": "t"})
    assert upstream_item({"id": "x", "text": "t", "context": "c"})["context"] == "c"


def test_alternate_flips_the_order_per_block_and_keeps_first_round_rankings() -> None:
    calls: list[tuple[str, str]] = []

    def recaller(name: str) -> Any:
        async def recall(q: dict[str, Any]) -> list[str]:
            calls.append((name, q["qid"]))
            return [f"{name}-{q['qid']}"]
        return recall

    questions = [{"qid": f"q{i}"} for i in range(4)]
    latencies, rankings = asyncio.run(alternate({"a": recaller("a"), "b": recaller("b")}, questions, 2, 2,
                                                echo=lambda _: None))
    timed = calls[2 * 4:]  # after the warm-up of each system (all four questions, WARMUP is 5)
    assert [n for n, _ in timed[:4]] == ["a", "a", "b", "b"] and [n for n, _ in timed[4:8]] == ["b", "b", "a", "a"]
    assert [n for n, _ in timed[8:12]] == ["b", "b", "a", "a"]  # the second round starts the other way
    assert len(latencies["a"]) == len(latencies["b"]) == 8
    assert rankings["a"]["q3"] == ["a-q3"] and set(rankings["b"]) == {"q0", "q1", "q2", "q3"}


def test_score_with_the_reference_scorer_and_without(tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(json.dumps(q) for q in [
        {"qid": "a", "bank": "b", "question": "?", "evidence": ["1"], "category_name": "x"},
        {"qid": "b", "bank": "b", "question": "?", "evidence": ["2"], "category_name": "x"},
        {"qid": "c", "bank": "b", "question": "?", "evidence": [], "category_name": "x"}]) + "\n")
    rankings = {"a": ["9", "1"], "b": ["3"]}
    builtin = score(queries, rankings, tmp_path / "run.jsonl", None)
    assert builtin["scorer"] == "built-in" and builtin["hit_any@10"] == 0.5 and builtin["mrr"] == 0.25
    scorer = Path("/work/shared/bench/locomo/score_recall.py")
    reference = Path("bench/locomo/score_recall.py")
    for candidate in (reference, scorer):
        if candidate.exists():
            got = score(queries, rankings, tmp_path / "run2.jsonl", candidate)
            assert (got["hit_any@10"], got["mrr"], got["n"]) == (0.5, 0.25, 2)
            break


def test_load_split_and_table(tmp_path: Path) -> None:
    (tmp_path / "memories.jsonl").write_text('{"bank": "b1", "id": "1", "text": "t"}\n\n'
                                             '{"bank": "b2", "id": "1", "text": "u"}\n')
    (tmp_path / "queries.jsonl").write_text('{"qid": "q", "bank": "b1", "question": "?"}\n')
    banks, questions = load_split(tmp_path)
    assert list(banks) == ["b1", "b2"] and len(questions) == 1
    side = {"latency_ms": {"p50": 10.0, "p95": 20.0}, "ingest": {"per_second": 50.0},
            "quality": {"hit_any@10": 0.75, "mrr": 0.5}}
    text = table({"ours": side, "upstream": {**side, "latency_ms": {"p50": 20.0, "p95": 40.0},
                                             "ingest": {"per_second": 10.0}}})
    assert "| hindsight-recall | 10.0 | 20.0 | 50.0 | 0.750 | 0.500 |" in text and "p50 0.50x, ingest 5.0x" in text


def test_missing_split_is_an_error(tmp_path: Path, capsys: Any) -> None:
    assert main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "pass --data" in capsys.readouterr().err
