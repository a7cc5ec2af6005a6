"""The keyword arm's length prior: how much a memory's length lowers its keyword score, chosen per bank.

A long memory matches more of a question's words than a short one only because it is long: an
assistant's page-long answer that repeats a user's one-line statement and adds more of the question's
words outscores the statement. Pivoted length normalisation divides each keyword score by
``1 − b + b × length / mean`` (``mean`` the bank's mean length): ``b = 0`` leaves the scores alone,
``b = 1`` divides by the length relative to the mean.

How much of that a bank needs follows from how its lengths spread (``cv``, their coefficient of
variation). Memories of one kind (chat turns, notes, facts) differ in length too, with a ``cv`` up to
about :data:`EVEN_SPREAD`; there a longer memory usually says more, and normalising costs (LoCoMo's
conversations, ``cv`` .37–.43: every ``b`` > 0 tried ranked worse). A bank that mixes kinds (short
statements beside answers many times longer: LongMemEval's chats, ``cv`` .71–1.24) spreads further,
and the part of its spread beyond one kind's is the part that says nothing about relevance. ``b`` is
that part's share of the length variance::

    b = max(0, 1 − (EVEN_SPREAD / cv)²)

so a bank of even lengths keeps its scores, ``cv`` 1 gives ``b`` .75 (BM25's customary value) and
``b`` approaches 1 as the spread grows. The statistics are the bank's own (:mod:`~hindsight_recall.store.
length_stats`, kept at every write), so the prior follows the bank as it grows; the same rule and
constant hold for every bank.

The keyword arm is the one stage that can discount length. The others cannot: an embedding of a long
answer is as similar to the question as the statement it echoes (in LongMemEval's banks the semantic
arm's wrong first hits are half again as long as the evidence), and the context stage lifts a memory by
its neighbours whatever their lengths, so a short statement hands its score to the long reply beside
it. In a bank with prior ``b`` they keep ``1 − b`` of their weight (:func:`weigh_stages`): the other
arms' fusion weights and the context stage's two weights; a recall without the keyword arm has no
prior, since nothing then discounts length. With ``b`` 0 nothing changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..settings import Settings
from ..types import LengthPrior
from .fusion import parse_score_weights, parse_weights

#: the coefficient of variation of the lengths of memories of one kind: spread up to this much says
#: nothing about verbosity, and below it the prior is off
EVEN_SPREAD = 0.5
#: the prior that changes nothing: no statistics, an empty bank, or a backend that does not apply it
NONE = LengthPrior()
#: the arm that applies the prior; every other stage is blind to length
KEYWORD = "keyword"


def length_prior(memories: int, length_sum: int, length_squares: int) -> LengthPrior:
    """The prior of memories with these length statistics.

    :param memories: how many memories.
    :param length_sum: the sum of their lengths.
    :param length_squares: the sum of their squared lengths.
    """
    if memories <= 0 or length_sum <= 0:
        return LengthPrior(memories=max(memories, 0))
    mean = length_sum / memories
    variance = max(length_squares / memories - mean * mean, 0.0)
    spread = math.sqrt(variance) / mean
    b = 0.0 if spread <= EVEN_SPREAD else 1.0 - (EVEN_SPREAD / spread) ** 2
    return LengthPrior(memories=memories, mean=mean, spread=spread, b=b)


def for_fact_types(lengths: Mapping[str, tuple[int, int, int]], fact_types: Iterable[str]) -> LengthPrior:
    """The prior of a bank's memories of ``fact_types``, ranked in one list by the keyword arm.

    :param lengths: fact type -> ``(memories, length_sum, length_squares)`` (``BankState.lengths``).
    :param fact_types: the fact types the recall searches.
    """
    totals = [lengths[ft] for ft in dict.fromkeys(fact_types) if ft in lengths]
    return length_prior(*(sum(t[i] for t in totals) for i in range(3)))


def weigh_stages(config: Settings, prior: LengthPrior | None, arms: Sequence[str]) -> Settings:
    """The recall's settings with every stage blind to length at ``1 − b`` of its weight: the arms other
    than the keyword arm (in both fusions' weights) and the context stage's neighbour and document
    weights. Unchanged when ``b`` is 0.

    :param config: the recall's settings (the bank's own overrides applied).
    :param prior: the bank's prior (``None``: the backend applies none).
    :param arms: the registered arms' names.
    """
    if prior is None or prior.b <= 0:
        return config
    keep = 1.0 - prior.b

    def scaled(raw: str, parse: Callable[[str, tuple[str, ...]], Mapping[str, float]]) -> str:
        weights = parse(raw, tuple(arms))
        return ",".join(f"{arm}:{weights.get(arm, 1.0) * (1.0 if arm == KEYWORD else keep):.6g}" for arm in arms)

    return config.model_copy(update={
        "recall_score_weights": scaled(config.recall_score_weights, parse_score_weights),
        "recall_rrf_weights": scaled(config.recall_rrf_weights, parse_weights),
        "recall_context_neighbour_weight": config.recall_context_neighbour_weight * keep,
        "recall_context_document_weight": config.recall_context_document_weight * keep,
    })


def parameters(prior: LengthPrior | None) -> dict[str, float]:
    """What the keyword arm binds for the pivot (:func:`hindsight_recall.textsearch.length_pivot`).

    :param prior: the bank's prior; ``None`` binds the prior that changes nothing.
    """
    prior = prior or NONE
    return {"length_b": prior.b, "length_mean": prior.mean if prior.mean > 0 else 1.0}


def describe(prior: LengthPrior | None) -> dict[str, Any] | None:
    """The prior as the trace and ``bench recall`` report it; ``None`` when the backend applies none."""
    if prior is None:
        return None
    return {"b": round(prior.b, 4), "mean_length": round(prior.mean, 2), "spread": round(prior.spread, 4),
            "memories": prior.memories}
