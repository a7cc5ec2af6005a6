"""Score normalisation and the combined final score."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from ..types import Candidate, MemoryRow, TimeWindow


def normalise(raw: Sequence[float]) -> list[float]:
    """Pass a batch inside [0, 1] through unchanged, else apply the sigmoid to all; NaN becomes 0."""
    clean = [0.0 if math.isnan(x) else float(x) for x in raw]
    if all(0.0 <= x <= 1.0 for x in clean):
        return clean
    return [1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x)) for x in clean]


def passthrough_scores(rrf_scores: Sequence[float]) -> list[float]:
    """Fused scores rescaled to [0.1, 1.0]: ``0.1 + 0.9·(rrf − min)/(max − min)``; all 1.0 when equal.

    Spacing by score rather than by rank keeps the fusion's gaps, so the ±10 % recency and proximity
    nudges of the combined score reorder near-ties only, not thirty ranks of a 300-candidate pool.
    """
    if not rrf_scores:
        return []
    low, high = min(rrf_scores), max(rrf_scores)
    if high <= low:
        return [1.0] * len(rrf_scores)
    return [0.1 + 0.9 * (x - low) / (high - low) for x in rrf_scores]


def recency(date: datetime | None, now: datetime, function: str, window_days: float, halflife_days: float) -> float:
    """Recency in [0.1, 1] (linear) or (0, 1] (exponential); 0.5 without a date."""
    if date is None or function == "none":
        return 0.5
    age_days = (now - date).total_seconds() / 86400
    if age_days < 0:
        return 1.0
    if function == "exponential":
        return 0.5 if halflife_days <= 0 else min(1.0, 0.5 ** (age_days / halflife_days))
    window = window_days if window_days > 0 else 365.0
    return max(0.1, min(1.0, 1.0 - age_days / window))


def proof_score(proof_count: int | None) -> float:
    """``clamp(0.5 + ln(count)/10, 0, 1)``; 0.5 for missing or non-positive counts."""
    if not proof_count or proof_count < 1:
        return 0.5
    return max(0.0, min(1.0, 0.5 + math.log(proof_count) / 10))


def combined(ce: float, recency_score: float, temporal: float, proof: float) -> float:
    """The final score: the reranker score nudged by recency, temporal proximity and evidence."""
    return ce * (1 + 0.2 * (recency_score - 0.5)) * (1 + 0.2 * (temporal - 0.5)) * (1 + 0.1 * (proof - 0.5))


def in_period(row: MemoryRow, window: TimeWindow) -> bool:
    """Whether a memory happened in the window: its occurrence overlaps it, or, with no occurrence
    date, it was mentioned in it (a memory retold later belongs to when it happened).

    :param row: the memory.
    :param window: the period the question names.
    """
    start, end = row.occurred_start or row.occurred_end, row.occurred_end or row.occurred_start
    if start is not None and end is not None:
        return start <= window.end and end >= window.start
    return row.mentioned_at is not None and window.start <= row.mentioned_at <= window.end


#: the longest window read as a period: a year, a season, a month, a week or a day (a range open towards
#: the past, "before June 2023", is no period)
PERIOD_DAYS = 366


def names_period(window: TimeWindow, now: datetime) -> bool:
    """Whether a question's window is a past period: bounded, at most :data:`PERIOD_DAYS` long, and over
    by ``now``. A window around ``now`` ("tonight", "now", "this week") mostly says when the asker
    wants something, not when what they ask about happened.

    :param window: the question's window.
    :param now: the question's reference time (``query_timestamp``, else the present).
    """
    return window.end <= now and (window.end - window.start).days <= PERIOD_DAYS


def period_first(candidates: list[Candidate], window: TimeWindow) -> list[Candidate]:
    """The memories of the named period that match the question, first; then the rest, each in its order.

    A question that names a period ("last spring", "in March") asks about that period: of two
    memories that match its words, the one inside it answers, however much better the other matches
    ("What did Tomasz do last spring?" names Tomasz in every memory of him). The temporal arm alone
    cannot say so: it is one arm of several, and the others search the question without its date
    words. A memory counts as matching when an arm that reads the question found it (any arm but
    the temporal one, whose pool is the period itself); the context stage's neighbours do not.

    :param candidates: the scored candidates, best first.
    :param window: the question's window (:func:`names_period`).
    """
    for c in candidates:
        c.period = in_period(c.row, window) and any(rank != "temporal_rank" for rank in c.source_ranks)
    return [c for c in candidates if c.period] + [c for c in candidates if not c.period]


def apply_floors(candidates: list[Candidate], min_reranker: float | None, min_final: float | None) -> list[Candidate]:
    """Drop results under the inclusive reranker/final floors; nothing replaces them."""
    return [
        c
        for c in candidates
        if (min_reranker is None or c.cross_encoder >= min_reranker) and (min_final is None or c.final >= min_final)
    ]
