"""Per-arm ordering, fusion of the arms' lists (by scores or by ranks) and the pre-rerank cap."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..types import ArmResult, Candidate, Hit

log = logging.getLogger(__name__)
T = TypeVar("T")

RRF_K = 60
#: Fixed arm order inside RRF; arms not listed come after, in registration order.
ARM_ORDER = ("semantic", "keyword", "graph", "temporal")
BOOST_DIVISORS = {"low": 2, "medium": 4, "high": 8}
#: Stage-2 boost per level: (amplitude a, decay d) of ``a × d/(d + r − 1)``.
RANK_BOOSTS = {"low": (0.05, 2), "medium": (0.2, 4), "high": (0.5, 8)}
#: Parsed setting strings kept per parser: each bank may set its own, so the caches are bounded.
PARSED_SETTINGS = 256
#: Strategy names users write -> arm names.
STRATEGIES = {"semantic": "semantic", "bm25": "keyword", "keyword": "keyword", "graph": "graph", "temporal": "temporal"}


def _parse_arm_values(
    raw: str, variable: str, value: Callable[[str], T | None], expected: str, arms: Sequence[str] = ()
) -> dict[str, T]:
    """Parse ``arm[:value],…`` (case-insensitive); entries ``value`` rejects are logged and ignored.

    :param value: maps the text after ``:`` (empty when missing) to a value, or ``None`` if invalid.
    :param arms: the registered arms' names, besides the built-in strategy names.
    """
    names = {**STRATEGIES, **{arm.lower(): arm for arm in arms}}
    parsed: dict[str, T] = {}
    for entry in (e.strip().lower() for e in raw.split(",")):
        if not entry:
            continue
        strategy, _, text = (p.strip() for p in entry.partition(":"))
        result = value(text) if strategy in names else None
        if result is None:
            log.warning("HINDSIGHT_API_%s: ignoring %r (arms: %s; %s)",
                        variable, entry, ", ".join(dict.fromkeys(["bm25", *names])), expected)
            continue
        parsed[names[strategy]] = result
    return parsed


def _level(text: str) -> str | None:
    level = text or "medium"
    return level if level in BOOST_DIVISORS else None


def _weight(text: str) -> float | None:
    try:
        weight = float(text)
    except ValueError:
        return None
    return weight if 0.0 <= weight < float("inf") else None


@functools.lru_cache(maxsize=PARSED_SETTINGS)
def parse_boosts(raw: str, arms: tuple[str, ...] = ()) -> dict[str, str]:
    """Parse ``RECALL_STRATEGY_BOOSTS`` (``arm[:level],…``); bad entries are logged (once while cached) and ignored.

    :param raw: e.g. ``"graph:high, bm25"`` (a missing level means ``medium``).
    :param arms: the registered arms' names (third-party arms may be boosted too).
    """
    return _parse_arm_values(raw, "RECALL_STRATEGY_BOOSTS", _level, "levels: low, medium, high", arms)


@functools.lru_cache(maxsize=PARSED_SETTINGS)
def parse_weights(raw: str, arms: tuple[str, ...] = ()) -> dict[str, float]:
    """Parse ``RECALL_RRF_WEIGHTS`` (``arm:weight,…``); bad entries are logged (once while cached) and ignored.

    :param raw: e.g. ``"bm25:1.5, temporal:0.5"``; arms not named weigh 1.
    :param arms: the registered arms' names (third-party arms may be weighted too).
    """
    return _parse_arm_values(raw, "RECALL_RRF_WEIGHTS", _weight, "write arm:weight with a weight >= 0", arms)


@functools.lru_cache(maxsize=PARSED_SETTINGS)
def parse_score_weights(raw: str, arms: tuple[str, ...] = ()) -> dict[str, float]:
    """Parse ``RECALL_SCORE_WEIGHTS`` (``arm:weight,…``); bad entries are logged (once while cached) and ignored.

    :param raw: e.g. ``"keyword:1, semantic:0.5"``; arms not named weigh 1.
    :param arms: the registered arms' names (third-party arms may be weighted too).
    """
    return _parse_arm_values(raw, "RECALL_SCORE_WEIGHTS", _weight, "write arm:weight with a weight >= 0", arms)


def arm_lists(results: Sequence[ArmResult], per_source_cap: int = 0) -> dict[str, list[Hit]]:
    """Concatenate each arm's hits over fact types and order them by score (stable)."""
    lists: dict[str, list[Hit]] = {}
    for result in results:
        lists.setdefault(result.arm, []).extend(result.hits)
    for hits in lists.values():
        hits.sort(key=lambda h: -h.score)
        if per_source_cap > 0:
            del hits[per_source_cap:]
    order = {arm: i for i, arm in enumerate(ARM_ORDER)}
    return dict(sorted(((a, h) for a, h in lists.items() if h), key=lambda kv: order.get(kv[0], len(order))))


def fuse(
    lists: Mapping[str, Sequence[Hit]], config: Any, arms: tuple[str, ...] = ()
) -> tuple[list[Candidate], dict[str, Any]]:
    """Fuse the arms' lists as ``RECALL_FUSION`` says; the candidates, best first, and trace details.

    :param lists: each arm's hits, best first (:func:`arm_lists`).
    :param config: the recall's settings (``recall_fusion``, its weights, ``recall_rrf_k``).
    :param arms: the registered arms' names, which the weights may name.
    """
    if config.recall_fusion == "score":
        weights = parse_score_weights(config.recall_score_weights, arms)
        return score_fuse(lists, weights), {"fusion": "score", "weights": weights or None}
    weights = parse_weights(config.recall_rrf_weights, arms)
    return rrf_fuse(lists, config.recall_rrf_k, weights), {"fusion": "rrf", "k": config.recall_rrf_k,
                                                           "weights": weights or None}


def min_max(scores: Sequence[float]) -> list[float]:
    """Scale scores to [0, 1] within their list: the best is 1, the weakest 0 (all 1 when all equal).

    :param scores: one arm's scores.
    """
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high <= low:
        return [1.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def score_fuse(lists: Mapping[str, Sequence[Hit]], weights: Mapping[str, float] | None = None) -> list[Candidate]:
    """Fuse by scores: ``Σ w_arm × s``, ``s`` the arm's score min-max scaled within its list.

    Ranks throw away how far an arm's first hit stands above its second; scaled scores keep it.
    Min-max makes each arm's scale and offset irrelevant (a cosine floor, ``ts_rank``'s tiny
    values), so only the weights say how much an arm counts. Ties keep first-seen order.
    """
    fused: dict[object, Candidate] = {}
    for arm, hits in lists.items():
        weight = (weights or {}).get(arm, 1.0)
        scaled = min_max([h.score for h in hits])
        for i, cand in _credit(fused, arm, hits):
            share = weight * scaled[i]
            cand.source_scores[arm] = share
            cand.rrf_score += share
    return _ranked(fused)


#: the arms whose raw score a candidate keeps under their own name
_RAW_SCORES = ("semantic", "keyword")


def _credit(fused: dict[object, Candidate], arm: str, hits: Sequence[Hit]) -> list[tuple[int, Candidate]]:
    """Each hit's candidate (made on first sight) with the arm's rank and raw score recorded, as
    (position in ``hits``, candidate); a memory the arm lists again is skipped (its best rank stays).

    One loop per arm, not a call per hit: a recall fuses a couple of thousand hits.
    """
    key = f"{arm}_rank"
    raw = arm if arm in _RAW_SCORES else None
    credited: list[tuple[int, Candidate]] = []
    for i, hit in enumerate(hits):
        row = hit.row
        cand = fused.get(row.id)
        if cand is None:
            cand = fused[row.id] = Candidate(row=row, rrf_score=0.0)
        ranks = cand.source_ranks
        if key in ranks:
            continue
        ranks[key] = i + 1
        if raw is not None:
            setattr(cand, raw, hit.score)
        if hit.extras and "temporal_proximity" in hit.extras:
            cand.temporal_proximity = hit.extras["temporal_proximity"]
        credited.append((i, cand))
    return credited


def _ranked(fused: Mapping[object, Candidate]) -> list[Candidate]:
    ranked = sorted(fused.values(), key=lambda c: -c.rrf_score)
    for i, cand in enumerate(ranked, start=1):
        cand.rrf_rank = i
    return ranked


def rrf_fuse(
    lists: Mapping[str, Sequence[Hit]], k: int = RRF_K, weights: Mapping[str, float] | None = None
) -> list[Candidate]:
    """Fuse ranked lists: ``rrf(d) = Σ w_arm/(k + rank)``, ranks from 1, ``w`` 1 unless given; ties keep
    first-seen order."""
    fused: dict[object, Candidate] = {}
    for arm, hits in lists.items():
        weight = (weights or {}).get(arm, 1.0)
        for i, cand in _credit(fused, arm, hits):
            cand.rrf_score += weight / (k + i + 1)
    return _ranked(fused)


def boosted_key(
    cand: Candidate, boosts: Mapping[str, str], k: int = RRF_K, weights: Mapping[str, float] | None = None
) -> float:
    """RRF score with boosted arms' ranks divided by the level's divisor."""
    key = cand.rrf_score
    for arm, level in boosts.items():
        rank = cand.source_ranks.get(f"{arm}_rank")
        if rank is not None:
            gain = 1.0 / (k + rank / BOOST_DIVISORS[level]) - 1.0 / (k + rank)
            key += (weights or {}).get(arm, 1.0) * gain
    return key


def score_boost(cand: Candidate, boosts: Mapping[str, str]) -> float:
    """Score fusion's boost: a boosted arm's share of the fused score counts ``d`` times (2, 4, 8).

    The analogue of dividing the arm's ranks by ``d`` under RRF, on score fusion's own scale: a
    boosted arm weighs ``d`` times its weight, so it overtakes the others' heads only as far as its
    own scaled scores carry it.
    """
    return sum((BOOST_DIVISORS[level] - 1) * cand.source_scores.get(arm, 0.0) for arm, level in boosts.items())


def set_boosts(
    candidates: Sequence[Candidate], boosts: Mapping[str, str], config: Any, arms: tuple[str, ...] = ()
) -> None:
    """Set each candidate's stage-1 ``boost`` as ``RECALL_FUSION`` defines it; ``rrf_score`` stays as fused.

    :param candidates: the fused candidates.
    :param boosts: :func:`parse_boosts` of ``RECALL_STRATEGY_BOOSTS``.
    :param config: the recall's settings (``recall_fusion``, ``recall_rrf_k``, ``recall_rrf_weights``).
    :param arms: the registered arms' names (for ``RECALL_RRF_WEIGHTS``).
    """
    weights = parse_weights(config.recall_rrf_weights, arms) if boosts and config.recall_fusion != "score" else {}
    for cand in candidates:
        if not boosts:
            cand.boost = 0.0
        elif config.recall_fusion == "score":
            cand.boost = score_boost(cand, boosts)
        else:
            cand.boost = boosted_key(cand, boosts, config.recall_rrf_k, weights) - cand.rrf_score


def cap_candidates(candidates: list[Candidate], cap: int) -> tuple[list[Candidate], int]:
    """Keep the ``cap`` best candidates by ``rrf_score + boost``; return them and how many were dropped."""
    if len(candidates) <= cap:
        return candidates, 0
    ordered = sorted(candidates, key=lambda c: -(c.rrf_score + c.boost))
    return ordered[:cap], len(candidates) - cap


def add_rank_boosts(candidates: Sequence[Candidate], boosts: Mapping[str, str]) -> None:
    """Add the decaying stage-2 boost to ``final``: ``a × d/(d + r − 1)``; temporal adds ``a`` flat."""
    for cand in candidates:
        for arm, level in boosts.items():
            rank = cand.source_ranks.get(f"{arm}_rank")
            if rank is None:
                continue
            amplitude, decay = RANK_BOOSTS[level]
            cand.final += amplitude if arm == "temporal" else amplitude * decay / (decay + rank - 1)


def interleave(lists: Mapping[str, Sequence[Hit]], candidates: Sequence[Candidate]) -> list[Candidate]:
    """Round-robin over the arms' lists skipping duplicates; ``rrf_score = n − position``."""
    by_id = {c.row.id: c for c in candidates}
    order: list[Candidate] = []
    seen: set[object] = set()
    for depth in range(max((len(h) for h in lists.values()), default=0)):
        for hits in lists.values():
            if depth < len(hits) and hits[depth].row.id in by_id and hits[depth].row.id not in seen:
                seen.add(hits[depth].row.id)
                order.append(by_id[hits[depth].row.id])
    for position, cand in enumerate(order):
        cand.rrf_score = float(len(order) - position)
    return order
