"""Pipeline stages beyond the arms: date windows, strategy boosts, interleave and source facts."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from hindsight_recall import Engine, InvalidRequest
from hindsight_recall.recall.fusion import (
    add_rank_boosts,
    interleave,
    parse_boosts,
    parse_score_weights,
    parse_weights,
    rrf_fuse,
)
from hindsight_recall.store import banks
from hindsight_recall.types import Candidate, Hit, MemoryRow


def row(name: str) -> MemoryRow:
    return MemoryRow(id=uuid.uuid5(uuid.NAMESPACE_DNS, name), external_id=name, text=name, fact_type="world")


def test_parse_boosts(caplog: pytest.LogCaptureFixture) -> None:
    assert parse_boosts("graph:high, BM25 ,temporal:low") == {"graph": "high", "keyword": "medium", "temporal": "low"}
    assert parse_boosts("") == {}
    with caplog.at_level(logging.WARNING):
        assert parse_boosts("graph:extreme,vibes:high,semantic") == {"semantic": "medium"}
    assert "graph:extreme" in caplog.text and "vibes:high" in caplog.text


def test_parse_weights(caplog: pytest.LogCaptureFixture) -> None:
    assert parse_weights("keyword:1.5") == {"keyword": 1.5}
    assert parse_weights(" BM25:2 , temporal:0.5,graph:0") == {"keyword": 2.0, "temporal": 0.5, "graph": 0.0}
    assert parse_weights("") == {}
    with caplog.at_level(logging.WARNING):
        assert parse_weights("semantic:-1,vibes:2,graph,keyword:lots,temporal:nan,semantic:inf,bm25:3") == {
            "keyword": 3.0
        }
    for bad in ("semantic:-1", "vibes:2", "'graph'", "keyword:lots", "temporal:nan", "semantic:inf"):
        assert bad in caplog.text


def test_score_weights_parse_like_rrf_weights(caplog: pytest.LogCaptureFixture) -> None:
    assert parse_score_weights("keyword:1,semantic:0.5,graph:0.3,temporal:0.3") == {
        "keyword": 1.0, "semantic": 0.5, "graph": 0.3, "temporal": 0.3}
    assert parse_score_weights(" BM25:2 ") == {"keyword": 2.0}
    with caplog.at_level(logging.WARNING):
        assert parse_score_weights("semantic:-2,vibes:1") == {}
    assert "RECALL_SCORE_WEIGHTS" in caplog.text


async def test_fusion_and_its_weights_are_bank_settings_and_reach_the_trace(make_settings: Any, bank: str) -> None:
    async with Engine(make_settings()) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice hiked."}])
        body = await engine.recall(bank, "Alice", trace=True)
        merge = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "rrf_merge")
        assert merge["details"]["fusion"] == "score"
        assert merge["details"]["weights"] == {"keyword": 1.0, "semantic": 0.5, "graph": 0.3, "temporal": 0.3}
        async with engine.db.connect() as conn:
            await banks.set_bank_config(conn, bank, {"recall_score_weights": "semantic:2"})
        body = await engine.recall(bank, "Alice", trace=True)
        merge = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "rrf_merge")
        assert merge["details"]["weights"] == {"semantic": 2.0}
        async with engine.db.connect() as conn:
            await banks.set_bank_config(conn, bank, {"recall_fusion": "rrf", "recall_rrf_weights": "semantic:2"})
        body = await engine.recall(bank, "Alice", trace=True)
    merge = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "rrf_merge")
    assert merge["details"] == {**merge["details"], "fusion": "rrf", "k": 5, "weights": {"semantic": 2.0}}


def test_stage_two_boost_decays_with_rank_and_temporal_is_flat() -> None:
    cands = [Candidate(row("a"), 0.0, source_ranks={"graph_rank": 1}, final=1.0),
             Candidate(row("b"), 0.0, source_ranks={"graph_rank": 5}, final=1.0),
             Candidate(row("c"), 0.0, source_ranks={"temporal_rank": 40, "graph_rank": 1}, final=1.0)]
    add_rank_boosts(cands, {"graph": "high", "temporal": "low"})
    assert cands[0].final == pytest.approx(1.5)  # a × d/(d + 0)
    assert cands[1].final == pytest.approx(1 + 0.5 * 8 / 12)
    assert cands[2].final == pytest.approx(1.5 + 0.05)


def test_interleave_takes_each_arms_head_in_turn() -> None:
    lists = {"semantic": [Hit(row(n), 1.0) for n in "abc"], "keyword": [Hit(row(n), 1.0) for n in "dae"]}
    fused = rrf_fuse(lists)
    order = interleave(lists, fused)
    assert [c.row.external_id for c in order] == ["a", "d", "b", "c", "e"]
    assert [c.rrf_score for c in order] == [5.0, 4.0, 3.0, 2.0, 1.0]


async def test_window_from_the_query(engine: Engine, bank: str) -> None:
    await engine.retain(
        bank,
        [
            {"id": "spring", "text": "Alice hiked in the Alps.", "occurred_at": "2023-04-10T00:00:00Z"},
            {"id": "winter", "text": "Alice hiked in the snow.", "occurred_at": "2023-01-10T00:00:00Z"},
        ],
    )
    body = await engine.recall(
        bank, "What did Alice do last spring?", query_timestamp="2024-03-10T12:00:00Z", trace=True
    )
    window = body["trace"]["query"]["temporal_constraint"]
    assert window["start"].startswith("2023-03-01T00:00:00") and window["end"].startswith("2023-05-31T23:59:59")
    phase = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "temporal_extraction")
    assert phase["details"]["source"] == "query"
    plain = await engine.recall(bank, "Where does Alice hike?", trace=True)
    assert plain["trace"]["query"]["temporal_constraint"] is None


async def test_temporal_toggle_ignores_even_a_caller_window(make_settings: Any, bank: str) -> None:
    async with Engine(make_settings(enable_temporal_retrieval=False)) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice hiked.", "occurred_at": "2023-04-10T00:00:00Z"}])
        body = await engine.recall(bank, "What did Alice do last spring?", trace=True,
                                   temporal_window=("2023-03-01", "2023-05-31"))
    assert body["trace"]["query"]["temporal_constraint"] is None


class EvenReranker:
    """Scores every document alike, so only the boosts can tell candidates apart after reranking."""

    name = "even"
    passthrough = False

    async def score(self, query: str, documents: Any, *, bank_id: str | None = None) -> list[float]:
        return [0.5] * len(documents)


async def test_a_strategy_boost_raises_exactly_the_boosted_arms_hits(make_settings: Any, bank: str) -> None:
    memories = [
        {"id": "code", "text": "The zyxwv door code is 4711."},
        {"id": "tea", "text": "Alice painted her front entrance red."},
        {"id": "hike", "text": "Alice keeps her house keys by the entrance."},
    ]

    async def finals(boosts: str) -> tuple[dict[str, float], dict[str, Any]]:
        settings = make_settings(recall_strategy_boosts=boosts, semantic_min_similarity=0)
        async with Engine(settings, reranker=EvenReranker()) as engine:
            await engine.retain(bank, memories)
            body = await engine.recall(bank, "zyxwv door code", trace=True)
        prefilter = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "rerank_prefilter")
        return {r["id"]: r["scores"]["final"] for r in body["results"]}, prefilter["details"]

    plain, _ = await finals("")
    boosted, details = await finals("bm25:high")
    assert details["strategy_boosts"] == {"keyword": "high"}
    assert set(plain) == set(boosted) == {"code", "tea", "hike"}
    assert boosted["code"] > plain["code"]  # the only keyword hit gains
    assert {k: boosted[k] for k in ("tea", "hike")} == {k: plain[k] for k in ("tea", "hike")}  # the rest do not
    assert max(boosted, key=boosted.__getitem__) == "code"
    untouched, _ = await finals("graph:high")  # no graph hits in this bank: nothing moves
    assert untouched == plain


async def test_interleave_mode_end_to_end(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Alice work", reranking="interleave")
    finals = [r["scores"]["final"] for r in body["results"]]
    assert finals == sorted(finals, reverse=True) and all(f == int(f) for f in finals)


async def test_source_facts_of_observations(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Alice changed jobs", types=["observation"], include_source_facts=4096)
    assert set(body["source_facts"]) == {"job", "left"} and body["source_facts_truncated"] is False
    assert "scores" not in body["source_facts"]["job"] and body["source_facts"]["job"]["type"] == "world"
    small = await engine.recall(alice, "Alice changed jobs", types=["observation"], include_source_facts=4096,
                                source_facts_per_observation=12)
    assert len(small["source_facts"]) == 1 and small["source_facts_truncated"] is True
    assert small["results"][0]["source_fact_ids"] == ["job", "left"]  # always lists every source
    none = await engine.recall(alice, "Alice changed jobs", types=["observation"])
    assert none["source_facts"] is None and "source_facts_truncated" not in none


async def test_bad_include_values(engine: Engine, alice: str) -> None:
    with pytest.raises(InvalidRequest, match="include.source_facts"):
        await engine.recall(alice, "Alice", include_source_facts=-5)
    with pytest.raises(InvalidRequest, match="max_tokens_per_observation"):
        await engine.recall(alice, "Alice", include_source_facts=10, source_facts_per_observation=-2)
