"""Per-arm ordering, reciprocal rank fusion and the pre-rerank cap (SPEC §8)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .types import ArmResult, Candidate, Hit

RRF_K = 60
#: Fixed arm order inside RRF; arms not listed come after, in registration order.
ARM_ORDER = ("semantic", "keyword", "graph", "temporal")
BOOST_DIVISORS = {"low": 2, "medium": 4, "high": 8}


def arm_lists(results: Sequence[ArmResult], per_source_cap: int = 0) -> dict[str, list[Hit]]:
    """Concatenate each arm's hits over fact types and order them by score (stable)."""
    lists: dict[str, list[Hit]] = {}
    for result in results:
        lists.setdefault(result.arm, []).extend(result.hits)
    for arm, hits in lists.items():
        hits.sort(key=lambda h: -h.score)
        if per_source_cap > 0:
            del hits[per_source_cap:]
    order = {arm: i for i, arm in enumerate(ARM_ORDER)}
    return dict(sorted(((a, h) for a, h in lists.items() if h), key=lambda kv: order.get(kv[0], len(order))))


def rrf_fuse(lists: Mapping[str, Sequence[Hit]], k: int = RRF_K) -> list[Candidate]:
    """Fuse ranked lists: ``rrf(d) = Σ 1/(k + rank)``, ranks from 1; ties keep first-seen order."""
    fused: dict[object, Candidate] = {}
    for arm, hits in lists.items():
        for rank, hit in enumerate(hits, start=1):
            cand = fused.get(hit.row.id)
            if cand is None:
                cand = fused[hit.row.id] = Candidate(row=hit.row, rrf_score=0.0)
            if f"{arm}_rank" in cand.source_ranks:
                continue  # an arm lists a memory once; keep its best rank
            cand.rrf_score += 1.0 / (k + rank)
            cand.source_ranks[f"{arm}_rank"] = rank
            if arm == "semantic":
                cand.semantic = hit.score
            elif arm == "keyword":
                cand.keyword = hit.score
            if "temporal_proximity" in hit.extras:
                cand.temporal_proximity = hit.extras["temporal_proximity"]
    ranked = sorted(fused.values(), key=lambda c: -c.rrf_score)
    for i, cand in enumerate(ranked, start=1):
        cand.rrf_rank = i
    return ranked


def boosted_key(cand: Candidate, boosts: Mapping[str, str], k: int = RRF_K) -> float:
    """RRF score with boosted arms' ranks divided by the level's divisor (SPEC §8.3)."""
    key = cand.rrf_score
    for arm, level in boosts.items():
        rank = cand.source_ranks.get(f"{arm}_rank")
        if rank is not None:
            key += 1.0 / (k + rank / BOOST_DIVISORS[level]) - 1.0 / (k + rank)
    return key


def cap_candidates(
    candidates: list[Candidate], cap: int, boosts: Mapping[str, str] | None = None
) -> tuple[list[Candidate], int]:
    """Keep the ``cap`` best candidates by the boosted key; return them and how many were dropped."""
    if len(candidates) <= cap:
        return candidates, 0
    if boosts:
        kept = sorted(candidates, key=lambda c: -boosted_key(c, boosts))[:cap]
    else:
        kept = candidates[:cap]
    return kept, len(candidates) - cap
