"""The worked numbers and formulas of budgets, fusion, reranking, scoring and packing."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from hindsight_recall.recall.budget import AdaptiveBudget, FixedBudget
from hindsight_recall.recall.fusion import (
    arm_lists,
    boosted_key,
    cap_candidates,
    fuse,
    min_max,
    rrf_fuse,
    score_fuse,
    set_boosts,
)
from hindsight_recall.recall.packing import pack
from hindsight_recall.recall.scoring import (
    apply_floors,
    combined,
    normalise,
    passthrough_scores,
    proof_score,
    recency,
)
from hindsight_recall.settings import Settings
from hindsight_recall.types import ArmResult, Budget, Candidate, Hit, MemoryRow


def row(name: str, fact_type: str = "world") -> MemoryRow:
    return MemoryRow(id=uuid.uuid5(uuid.NAMESPACE_DNS, name), external_id=name, text=name, fact_type=fact_type)


def hits(*names: str) -> list[Hit]:
    return [Hit(row(n), 1.0 - i / 100) for i, n in enumerate(names)]


def test_rrf_example_from_the_spec() -> None:
    semantic = hits("a", "b", "c", "d", "e")
    keyword = hits("x", "y", "z", "w", "a")
    fused = {c.row.external_id: c for c in rrf_fuse({"semantic": semantic, "keyword": keyword})}
    assert fused["a"].rrf_score == pytest.approx(1 / 61 + 1 / 65)
    assert round(fused["a"].rrf_score, 4) == 0.0318
    assert round(fused["b"].rrf_score, 4) == 0.0161  # rank 2 semantic only: 1/62
    only_first = rrf_fuse({"semantic": hits("s")})[0]
    assert round(only_first.rrf_score, 4) == 0.0164
    assert fused["a"].source_ranks == {"semantic_rank": 1, "keyword_rank": 5}
    assert fused["a"].rrf_rank == 1


def test_rrf_keeps_raw_arm_scores_and_temporal_proximity() -> None:
    r = row("m")
    lists = {
        "semantic": [Hit(r, 0.8)],
        "keyword": [Hit(r, 0.3)],
        "temporal": [Hit(r, 0.9, {"temporal_proximity": 0.7})],
    }
    cand = rrf_fuse(lists)[0]
    assert (cand.semantic, cand.keyword, cand.temporal_proximity) == (0.8, 0.3, 0.7)


def test_arm_lists_order_by_score_across_fact_types_and_cap() -> None:
    world = ArmResult("semantic", "world", [Hit(row("w1"), 0.5), Hit(row("w2"), 0.2)], 0.0)
    exp = ArmResult("semantic", "experience", [Hit(row("e1", "experience"), 0.9)], 0.0)
    kw = ArmResult("keyword", "world", [Hit(row("w2"), 3.0)], 0.0)
    lists = arm_lists([kw, world, exp])
    assert list(lists) == ["semantic", "keyword"]  # fixed arm order, whatever came first
    assert [h.row.external_id for h in lists["semantic"]] == ["e1", "w1", "w2"]
    assert [h.row.external_id for h in arm_lists([world, exp], per_source_cap=2)["semantic"]] == ["e1", "w1"]


def test_graph_high_boost_rank_17_beats_semantic_rank_3_loses_to_rank_2() -> None:
    graph_17 = Candidate(row("g"), rrf_score=1 / 77, source_ranks={"graph_rank": 17})
    semantic_3 = Candidate(row("s3"), rrf_score=1 / 63, source_ranks={"semantic_rank": 3})
    semantic_2 = Candidate(row("s2"), rrf_score=1 / 62, source_ranks={"semantic_rank": 2})
    boosts = {"graph": "high"}
    assert boosted_key(graph_17, boosts) > boosted_key(semantic_3, boosts)
    assert boosted_key(graph_17, boosts) < boosted_key(semantic_2, boosts)


def test_cap_keeps_the_best_and_never_rewrites_rrf() -> None:
    cands = rrf_fuse({"semantic": hits(*"abcdef")})
    kept, dropped = cap_candidates(cands, 4)
    assert [c.row.external_id for c in kept] == list("abcd") and dropped == 2
    boosted, _ = capped(rrf_fuse({"semantic": hits(*"abcd"), "graph": hits("z")}), 3, {"graph": "high"})
    assert "z" in [c.row.external_id for c in boosted]
    assert all(c.rrf_score == pytest.approx(sum(1 / (60 + r) for r in c.source_ranks.values())) for c in boosted)


def test_normalisation() -> None:
    assert normalise([0.2, 0.9]) == [0.2, 0.9]
    assert [round(x, 3) for x in normalise([-2, 3])] == [0.119, 0.953]
    assert normalise([float("nan"), 0.5]) == [0.0, 0.5]
    assert normalise([-1000, 1000]) == [pytest.approx(0.0), pytest.approx(1.0)]  # no overflow


def test_passthrough_scores_rescale_the_fused_scores_to_one_down_to_a_tenth() -> None:
    assert passthrough_scores([]) == []
    assert passthrough_scores([0.3]) == [1.0]
    assert passthrough_scores([0.2, 0.2]) == [1.0, 1.0]
    assert passthrough_scores([0.5, 0.3, 0.1]) == [1.0, pytest.approx(0.55), pytest.approx(0.1)]
    # The gaps follow the scores, not the ranks: a clear head stays clear of the tail.
    assert passthrough_scores([0.4, 0.11, 0.105, 0.1]) == pytest.approx([1.0, 0.13, 0.115, 0.1])


def test_passthrough_nudges_reorder_near_ties_only() -> None:
    """±10 % of recency or proximity must not lift the 30th fused result over the 2nd."""
    fused = rrf_fuse({"keyword": hits(*(f"m{i}" for i in range(300)))}, k=5)
    ce = passthrough_scores([c.rrf_score for c in fused])
    second = combined(ce[1], 0.5, 0.5, 0.5)
    thirtieth_nudged = combined(ce[29], 1.0, 1.0, 1.0)
    assert thirtieth_nudged < second
    assert combined(ce[2], 1.0, 1.0, 0.5) > combined(ce[1], 0.5, 0.5, 0.5)  # a near-tie does reorder


def test_rrf_weights_scale_an_arms_share() -> None:
    fused = rrf_fuse({"semantic": hits("a", "b"), "keyword": hits("b", "a")}, k=5, weights={"keyword": 1.5})
    assert [c.row.external_id for c in fused] == ["b", "a"]
    assert fused[0].rrf_score == pytest.approx(1 / 7 + 1.5 / 6)
    assert fused[1].rrf_score == pytest.approx(1 / 6 + 1.5 / 7)
    silent = rrf_fuse({"semantic": hits("a"), "temporal": hits("t")}, k=5, weights={"temporal": 0.0})
    assert [c.row.external_id for c in silent] == ["a", "t"] and silent[1].rrf_score == 0.0
    assert silent[1].source_ranks == {"temporal_rank": 1}  # still a candidate, with its rank
    # With equal weights the worked example of upstream Hindsight holds unchanged.
    assert rrf_fuse({"semantic": hits("a"), "keyword": hits(*"bcdea")})[0].rrf_score == pytest.approx(0.0318, abs=1e-4)


def test_boosted_key_scales_with_the_arms_weight() -> None:
    cand = rrf_fuse({"keyword": hits(*"abcd")}, k=5, weights={"keyword": 2.0})[3]
    plain = rrf_fuse({"keyword": hits(*"abcd")}, k=5)[3]
    gain = boosted_key(plain, {"keyword": "high"}, k=5) - plain.rrf_score
    assert boosted_key(cand, {"keyword": "high"}, k=5, weights={"keyword": 2.0}) - cand.rrf_score == pytest.approx(
        2 * gain
    )


def test_proof() -> None:
    assert proof_score(1) == 0.5
    assert round(proof_score(10), 2) == 0.73
    assert proof_score(149) == pytest.approx(1.0, abs=1e-3) and proof_score(1000) == 1.0
    assert proof_score(0) == 0.5 and proof_score(None) == 0.5


@pytest.mark.parametrize(
    ("function", "age_days", "expected"),
    [("linear", 0, 1.0), ("linear", 182.5, 0.5), ("linear", 3650, 0.1), ("exponential", 90, 0.5),
     ("exponential", 0, 1.0), ("none", 10, 0.5), ("linear", -5, 1.0)],
)
def test_recency(function: str, age_days: float, expected: float) -> None:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    assert recency(now - timedelta(days=age_days), now, function, 365, 90) == pytest.approx(expected)


def test_recency_edge_cases() -> None:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    assert recency(None, now, "linear", 365, 90) == 0.5
    assert recency(now - timedelta(days=365), now, "linear", 0, 90) == pytest.approx(0.1)  # window <= 0 means 365
    assert recency(now - timedelta(days=1), now, "exponential", 365, 0) == 0.5  # half-life <= 0


def test_combined_score() -> None:
    assert combined(1.0, 0.5, 0.5, 0.5) == 1.0
    assert combined(0.8, 1.0, 0.5, 0.5) == pytest.approx(0.8 * 1.1)
    assert combined(0.5, 0.1, 1.0, 1.0) == pytest.approx(0.5 * 0.92 * 1.1 * 1.05)


def test_floors_are_inclusive_and_anded() -> None:
    a, b = (
        Candidate(row("a"), 0.0, cross_encoder=0.5, final=0.4),
        Candidate(row("b"), 0.0, cross_encoder=0.2, final=0.9),
    )
    assert apply_floors([a, b], 0.5, None) == [a]
    assert apply_floors([a, b], None, 0.9) == [b]
    assert apply_floors([a, b], 0.5, 0.5) == []


def test_packing_examples_from_the_spec() -> None:
    sizes = {"a": 50, "b": 300, "c": 40}
    selected, used, truncated = pack(["a", "b", "c"], 100, sizes.__getitem__)
    assert selected == ["a", "c"] and used == 90 and truncated
    selected, used, truncated = pack(["b"], 80, sizes.__getitem__)
    assert selected == ["b"] and truncated
    assert pack(["a"], 0, sizes.__getitem__) == ([], 0, True)
    assert pack(["a", "c"], 100, sizes.__getitem__) == (["a", "c"], 90, False)


def test_packing_stops_counting_once_the_budget_is_full() -> None:
    counted: list[str] = []
    sizes = {"a": 60, "b": 500, "c": 40, "d": 1, "e": 1}

    def count(item: str) -> int:
        counted.append(item)
        return sizes[item]

    assert pack(list("abcde"), 100, count) == (["a", "c"], 100, True)
    assert counted == ["a", "b", "c"]
    counted.clear()
    assert pack(list("ac"), 100, count) == (["a", "c"], 100, False)  # exactly full, nothing left over


@pytest.mark.parametrize(("level", "expected"), [("low", 100), ("mid", 300), ("high", 1000)])
def test_fixed_budget(level: str, expected: int) -> None:
    assert FixedBudget().resolve(Budget(level), 4096, Settings()) == expected


@pytest.mark.parametrize(
    ("level", "max_tokens", "expected"),
    [("low", 4096, 102), ("mid", 4096, 307), ("high", 4096, 1024), ("low", 100, 20), ("high", 100_000, 2000)],
)
def test_adaptive_budget(level: str, max_tokens: int, expected: int) -> None:
    assert AdaptiveBudget().resolve(Budget(level), max_tokens, Settings()) == expected
    assert math.isclose(
        expected, max(20, min(2000, round(max_tokens * {"low": 0.025, "mid": 0.075, "high": 0.25}[level])))
    )


def test_rrf_k_is_configurable() -> None:
    fused = rrf_fuse({"semantic": hits("a", "b"), "keyword": hits("b", "a")}, k=5)
    assert fused[0].rrf_score == pytest.approx(1 / 6 + 1 / 7)
    kept, _ = capped(rrf_fuse({"semantic": hits(*"abc"), "graph": hits("z")}, k=5), 2, {"graph": "high"}, k=5)
    assert "z" in [c.row.external_id for c in kept]


def test_graph_high_boost_keeps_the_heads_of_other_arms_in_the_cap() -> None:
    lists = {"semantic": hits(*(f"s{i}" for i in range(100))), "keyword": hits(*(f"k{i}" for i in range(100))),
             "graph": hits(*(f"g{i}" for i in range(300)))}
    kept, dropped = capped(rrf_fuse(lists), 50, {"graph": "high"})
    names = {c.row.external_id for c in kept}
    assert dropped == 450
    assert {f"s{i}" for i in range(5)} <= names and {f"k{i}" for i in range(5)} <= names
    assert {f"g{i}" for i in range(20)} <= names  # the boosted arm still wins the middle


def scored(*pairs: tuple[str, float]) -> list[Hit]:
    return [Hit(row(n), s) for n, s in pairs]


def test_min_max_scales_each_list_to_unit_range() -> None:
    assert min_max([0.8, 0.5, 0.2]) == pytest.approx([1.0, 0.5, 0.0])
    assert min_max([0.4, 0.4]) == [1.0, 1.0]  # all equal: each is the arm's best
    assert min_max([0.7]) == [1.0] and min_max([]) == []


def test_score_fusion_worked_example() -> None:
    """keyword 1 × scaled + semantic 0.5 × scaled; a score gap survives, unlike ranks."""
    keyword = scored(("a", 0.30), ("b", 0.05), ("c", 0.04))  # a far ahead of b and c
    semantic = scored(("b", 0.62), ("c", 0.61), ("a", 0.40))
    fused = score_fuse({"semantic": semantic, "keyword": keyword}, {"keyword": 1.0, "semantic": 0.5})
    by_id = {c.row.external_id: c for c in fused}
    assert [c.row.external_id for c in fused] == ["a", "b", "c"]
    assert by_id["a"].rrf_score == pytest.approx(1.0 + 0.0)
    assert by_id["b"].rrf_score == pytest.approx(0.01 / 0.26 + 0.5)
    assert by_id["c"].rrf_score == pytest.approx(0.0 + 0.5 * 0.21 / 0.22)
    assert by_id["a"].source_ranks == {"semantic_rank": 3, "keyword_rank": 1}
    assert (by_id["a"].keyword, by_id["a"].semantic) == (0.30, 0.40)
    assert [c.rrf_rank for c in fused] == [1, 2, 3]
    # The same lists by ranks (RRF k 5, keyword 1.5) put b first: a's lead is lost.
    assert rrf_fuse({"semantic": semantic, "keyword": keyword}, k=5, weights={"keyword": 1.5})[0].row.external_id == "b"


def test_score_fusion_weight_zero_keeps_the_candidate_and_unnamed_arms_weigh_one() -> None:
    fused = score_fuse({"semantic": scored(("a", 0.9), ("b", 0.1)), "graph": scored(("g", 2.0))},
                       {"semantic": 0.0})
    assert [c.row.external_id for c in fused] == ["g", "a", "b"]
    assert fused[0].rrf_score == 1.0 and fused[1].rrf_score == 0.0
    temporal = [Hit(row("t"), 0.5, extras={"temporal_proximity": 0.25})]
    (cand,) = score_fuse({"temporal": temporal})
    assert cand.temporal_proximity == 0.25 and cand.source_ranks == {"temporal_rank": 1}


def test_fuse_follows_the_fusion_setting() -> None:
    lists = {"semantic": scored(("a", 0.9), ("b", 0.8)), "keyword": scored(("b", 0.2), ("a", 0.1))}
    by_score, details = fuse(lists, Settings())
    assert details == {"fusion": "score", "weights": {"keyword": 1.0, "semantic": 0.5, "graph": 0.3, "temporal": 0.3}}
    assert [c.row.external_id for c in by_score] == ["b", "a"]
    by_rank, details = fuse(lists, Settings(recall_fusion="rrf"))
    assert details == {"fusion": "rrf", "k": 5, "weights": {"keyword": 1.5}}
    assert [c.rrf_score for c in by_rank] == [c.rrf_score for c in rrf_fuse(lists, 5, {"keyword": 1.5})]
    with pytest.raises(ValueError):
        Settings(recall_fusion="borda")


def test_bench_ablation_without_semantic_silences_it_in_either_fusion() -> None:
    from hindsight_recall.bench.locomo import ABLATIONS
    from hindsight_recall.recall.fusion import parse_score_weights, parse_weights

    update = ABLATIONS["without:semantic"](Settings())
    assert parse_score_weights(update["recall_score_weights"])["semantic"] == 0.0
    assert parse_weights(update["recall_rrf_weights"])["semantic"] == 0.0
    assert parse_score_weights(update["recall_score_weights"])["keyword"] == 1.0  # the others keep theirs


def capped(candidates: list[Candidate], cap: int, boosts: dict[str, str], fusion: str = "rrf", k: int = 60,
           weights: str = "") -> tuple[list[Candidate], int]:
    """The pre-rerank cap after the stage-1 boosts of a fusion."""
    set_boosts(candidates, boosts, SimpleNamespace(recall_fusion=fusion, recall_rrf_k=k, recall_rrf_weights=weights))
    return cap_candidates(candidates, cap)


def test_score_fusion_boost_counts_the_boosted_arms_share_d_times() -> None:
    lists = {"semantic": scored(("a", 0.9), ("b", 0.6), ("c", 0.3)), "graph": scored(("z", 0.8), ("y", 0.2))}
    weights = {"semantic": 1.0, "graph": 0.3}
    # fused: a 1.0, b 0.5, z 0.3, c 0, y 0 (y and c at the bottom of their lists)
    assert [c.row.external_id for c in score_fuse(lists, weights)] == ["a", "b", "z", "c", "y"]

    def kept(level: str) -> list[str]:
        cands = score_fuse(lists, weights)
        return [c.row.external_id for c in capped(cands, 2, {"graph": level}, fusion="score")[0]]

    # z's 0.3 counts 2, 4 or 8 times: 0.6 passes b's 0.5, 1.2 and 2.4 pass a's 1.0 too
    assert kept("low") == ["a", "z"]
    assert kept("medium") == ["z", "a"] and kept("high") == ["z", "a"]
    cands = score_fuse(lists, weights)
    set_boosts(cands, {"graph": "low"}, SimpleNamespace(recall_fusion="score"))
    assert {c.row.external_id: c.boost for c in cands} == pytest.approx({"a": 0, "b": 0, "c": 0, "z": 0.3, "y": 0})
    assert [c.rrf_score for c in cands] == pytest.approx([1.0, 0.5, 0.3, 0.0, 0.0])  # never rewritten


def test_rrf_boost_is_the_rank_division_with_the_configured_k_and_weights() -> None:
    cands = rrf_fuse({"semantic": hits(*"abc"), "keyword": hits("z")}, k=5, weights={"keyword": 2.0})
    set_boosts(cands, {"keyword": "high"}, SimpleNamespace(recall_fusion="rrf", recall_rrf_k=5,
                                                              recall_rrf_weights="keyword:2"))
    z = next(c for c in cands if c.row.external_id == "z")
    assert z.boost == pytest.approx(2.0 * (1 / (5 + 1 / 8) - 1 / 6))
    assert z.boost + z.rrf_score == pytest.approx(boosted_key(z, {"keyword": "high"}, 5, {"keyword": 2.0}))
