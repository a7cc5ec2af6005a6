"""The keyword arm's length prior: the rule, and the rankings it gives on banks of controlled length mixes.

Three kinds of bank, live on the embedded server with the native backend: short turns of even length
(the longer turn, which holds more of the question, stays first), short statements beside long
replies that echo them (the statement comes first), and long documents only (even again: unchanged).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.recall import length_prior
from hindsight_recall.recall.fusion import parse_score_weights, parse_weights
from hindsight_recall.settings import Settings
from hindsight_recall.testing.suite import ids, keyword_hits
from hindsight_recall.types import LengthPrior

# --- the rule ------------------------------------------------------------------------------------------


def moments(lengths: list[int]) -> tuple[int, int, int]:
    return len(lengths), sum(lengths), sum(n * n for n in lengths)


def test_even_lengths_get_no_prior() -> None:
    prior = length_prior.length_prior(*moments([8, 10, 12, 9, 11, 10]))
    assert prior.b == 0.0 and prior.mean == 10.0 and prior.memories == 6
    assert prior.spread == pytest.approx(math.sqrt(10 / 6) / 10)
    # a spread of exactly one kind's is still none
    assert length_prior.length_prior(*moments([5, 15])).b == 0.0  # cv 0.5


@pytest.mark.parametrize(("cv", "b"), [(0.5, 0.0), (0.6, 1 - 0.25 / 0.36), (1.0, 0.75), (2.0, 0.9375)])
def test_b_is_the_share_of_the_length_variance_beyond_one_kinds_spread(cv: float, b: float) -> None:
    # memories of lengths mean ± cv·mean (two of each): their coefficient of variation is cv
    mean = 1000
    prior = length_prior.length_prior(*moments([round(mean * (1 - cv)), round(mean * (1 + cv))] * 2))
    assert prior.spread == pytest.approx(cv, abs=1e-3) and prior.b == pytest.approx(b, abs=1e-3)


def test_b_grows_with_the_spread_and_stays_below_one() -> None:
    priors = [length_prior.length_prior(*moments([10] * 20 + [10 * k] * 5)) for k in range(1, 40)]
    bs = [p.b for p in priors]
    assert bs == sorted(bs) and bs[0] == 0.0 and 0.5 < bs[-1] < 1.0


def test_no_statistics_give_the_prior_that_changes_nothing() -> None:
    assert length_prior.length_prior(0, 0, 0) == length_prior.NONE == LengthPrior()
    assert length_prior.length_prior(3, 0, 0).b == 0.0  # stopwords only: every length 0
    assert length_prior.length_prior(1, 40, 1600).b == 0.0  # one memory: no spread
    assert length_prior.parameters(None) == {"length_b": 0.0, "length_mean": 1.0}
    assert length_prior.parameters(LengthPrior(10, 25.0, 0.9, 0.69)) == {"length_b": 0.69, "length_mean": 25.0}
    assert length_prior.describe(None) is None


def test_the_fact_types_searched_are_counted_together_and_only_they() -> None:
    lengths = {"world": moments([10, 10]), "experience": moments([100, 100]), "observation": moments([7])}
    both = length_prior.for_fact_types(lengths, ["world", "experience"])
    assert both.memories == 4 and both.mean == 55.0 and both.b > 0.5
    assert length_prior.for_fact_types(lengths, ["world"]).b == 0.0
    assert length_prior.for_fact_types({}, ["world"]) == length_prior.NONE


ARMS = ("semantic", "keyword", "graph", "temporal", "mine")


def test_stages_blind_to_length_keep_one_minus_b_of_their_weight() -> None:
    config = Settings()
    assert length_prior.weigh_stages(config, None, ARMS) is config
    assert length_prior.weigh_stages(config, LengthPrior(10, 8.0, 0.3, 0.0), ARMS) is config
    weighed = length_prior.weigh_stages(config, LengthPrior(10, 80.0, 1.0, 0.75), ARMS)
    assert parse_score_weights(weighed.recall_score_weights, ARMS) == pytest.approx(
        {"semantic": 0.125, "keyword": 1.0, "graph": 0.075, "temporal": 0.075, "mine": 0.25})
    assert parse_weights(weighed.recall_rrf_weights, ARMS) == pytest.approx(
        {"semantic": 0.25, "keyword": 1.5, "graph": 0.25, "temporal": 0.25, "mine": 0.25})
    assert weighed.recall_context_neighbour_weight == pytest.approx(config.recall_context_neighbour_weight / 4)
    assert weighed.recall_context_document_weight == pytest.approx(config.recall_context_document_weight / 4)
    # a bank's own weights are scaled alike
    own = config.model_copy(update={"recall_score_weights": "bm25:2,semantic:1"})
    assert parse_score_weights(length_prior.weigh_stages(own, LengthPrior(10, 80.0, 1.0, 0.75), ARMS)
                               .recall_score_weights, ARMS)["keyword"] == 2.0


# --- banks of controlled length mixes -------------------------------------------------------------------

FILLER_WORDS = ["garden", "train", "coffee", "window", "river", "letter", "market", "winter", "pencil", "cloud",
                "ladder", "violin", "harbor", "candle", "meadow", "museum", "tunnel", "orchard", "saddle", "lantern"]


def filler(i: int, words: int) -> str:
    """A sentence of about ``words`` distinct content words, none of them a query word."""
    return " ".join(f"{FILLER_WORDS[(i + k) % len(FILLER_WORDS)]}{(i * 7 + k) % 97}" for k in range(words)) + "."


# even short turns: the longer turn holds both words of the question, the shorter one only one
EVEN_TURNS = [
    {"id": "both", "text": "Caroline: the pottery class let me glaze a blue bowl on Tuesday evening."},
    {"id": "one", "text": "Melanie: pottery sounds lovely."},
    *({"id": f"turn-{i}", "text": f"Melanie: {filler(i, 7)}"} for i in range(24)),
]
# short user statements beside long assistant replies that echo them and add more of the question
STATEMENT = {"id": "statement", "text": "user: I adopted a beagle named Max last spring."}
ECHO = {"id": "echo", "text": "assistant: How wonderful that you adopted a beagle! Beagles like Max adopted "
        "in spring settle in best with a steady routine for the adopted dog. " + filler(3, 60)}
MIXED = [
    STATEMENT,
    ECHO,
    *({"id": f"user-{i}", "text": f"user: {filler(i, 6)}"} for i in range(12)),
    *({"id": f"reply-{i}", "text": f"assistant: {filler(i + 40, 70)}"} for i in range(12)),
]
# long documents only: the one that names both words of the question twice stays first
DOCUMENTS = [
    {"id": "twice", "text": f"The lighthouse keeper logged the storm. {filler(1, 75)} The lighthouse keeper slept."},
    {"id": "once", "text": f"The lighthouse stood dark. {filler(2, 22)}"},
    *({"id": f"doc-{i}", "text": filler(i + 5, 40 + i * 3 % 40)} for i in range(20)),
]


@pytest.fixture(scope="module")
async def unnormalised(make_settings: Callable[..., Settings]) -> AsyncIterator[Engine]:
    """The same server ranked as before the prior: ``..._NATIVE_NORMALIZATION=0`` set explicitly."""
    async with Engine(make_settings(plugins={"text_search": {"native": {"normalization": 0}}})) as eng:
        yield eng


async def _recall(engine: Engine, bank: str, query: str) -> tuple[list[str], dict[str, Any] | None, list[str]]:
    """The keyword arm's ids, the length prior the trace reports and the fused ids."""
    body = await engine.recall(bank, query, trace=True)
    (retrieval,) = [p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "parallel_retrieval"]
    return ids(await keyword_hits(engine, bank, query)), retrieval["details"]["length_prior"], \
        [r["id"] for r in body["results"]]


def _bank() -> str:
    return f"prior-{uuid.uuid4().hex[:10]}"


async def test_even_short_turns_keep_the_longer_turn_that_holds_more_of_the_question(
    engine: Engine, unnormalised: Engine
) -> None:
    bank = _bank()
    await engine.retain(bank, EVEN_TURNS)
    ranked, prior, _ = await _recall(engine, bank, "pottery glaze")
    assert prior["b"] == 0.0 and prior["spread"] < length_prior.EVEN_SPREAD
    assert ranked[:2] == ["both", "one"]
    assert ranked == ids(await keyword_hits(unnormalised, bank, "pottery glaze"))  # exactly as without a prior


async def test_a_short_statement_comes_before_the_long_reply_that_echoes_it(
    engine: Engine, unnormalised: Engine
) -> None:
    bank = _bank()
    question = "When did I adopt my beagle Max?"
    await engine.retain(bank, MIXED)
    ranked, prior, fused = await _recall(engine, bank, question)
    assert prior["b"] > 0.5 and prior["spread"] > 0.8
    assert ranked[:2] == ["statement", "echo"]
    assert fused[0] == "statement"
    # without the prior the echo's length wins
    assert ids(await keyword_hits(unnormalised, bank, question))[:2] == ["echo", "statement"]


async def test_the_prior_follows_the_bank_as_it_grows(engine: Engine) -> None:
    """Short turns only, then long replies join, then they are forgotten: the statistics follow each write."""
    bank = _bank()
    question = "When did I adopt my beagle Max?"
    users, replies = [STATEMENT, *MIXED[2:14]], [ECHO, *MIXED[14:]]
    await engine.retain(bank, users)
    _, short, _ = await _recall(engine, bank, question)
    assert short["b"] == 0.0 and short["memories"] == 13
    await engine.retain(bank, replies)
    ranked, mixed, _ = await _recall(engine, bank, question)
    assert mixed["b"] > 0.5 and mixed["memories"] == 26 and ranked[:2] == ["statement", "echo"]
    assert await engine.forget(bank, [m["id"] for m in replies]) == 13
    ranked, again, _ = await _recall(engine, bank, question)
    assert again == short and ranked == ["statement"]


async def test_long_documents_only_rank_as_without_a_prior(engine: Engine, unnormalised: Engine) -> None:
    bank = _bank()
    await engine.retain(bank, DOCUMENTS)
    ranked, prior, _ = await _recall(engine, bank, "lighthouse keeper")
    assert prior["b"] == 0.0 and prior["mean_length"] > 40
    assert ranked[:2] == ["twice", "once"]
    assert ranked == ids(await keyword_hits(unnormalised, bank, "lighthouse keeper"))


async def test_an_explicit_normalization_replaces_the_prior(engine: Engine, unnormalised: Engine) -> None:
    bank = _bank()
    await engine.retain(bank, MIXED)
    assert engine.text_search.length_prior and not unnormalised.text_search.length_prior
    _, prior, _ = await _recall(unnormalised, bank, "beagle Max")
    assert prior is None  # and the fusion keeps its weights
    body = await unnormalised.recall(bank, "beagle Max", trace=True)
    (fused,) = [p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "rrf_merge"]
    assert fused["details"]["weights"] == parse_score_weights(Settings().recall_score_weights)


async def test_the_trace_shows_the_weights_the_prior_gave(engine: Engine) -> None:
    bank = _bank()
    await engine.retain(bank, MIXED)
    body = await engine.recall(bank, "beagle Max", trace=True)
    phases = {p["phase_name"]: p["details"] for p in body["trace"]["summary"]["phase_metrics"]}
    b = phases["parallel_retrieval"]["length_prior"]["b"]
    weights = phases["rrf_merge"]["weights"]
    assert weights["keyword"] == 1.0 and weights["semantic"] == pytest.approx(0.5 * (1 - b), rel=1e-4)


async def test_without_the_keyword_arm_no_stage_is_weighed_by_the_prior(engine: Engine) -> None:
    """Nothing then discounts length, so the other stages keep their weights."""
    from hindsight_recall.store import banks

    bank = _bank()
    await engine.retain(bank, MIXED)
    async with engine.db.connect() as conn:
        await banks.set_bank_config(conn, bank, {"enable_text_search": False})
    body = await engine.recall(bank, "beagle Max", trace=True)
    phases = {p["phase_name"]: p["details"] for p in body["trace"]["summary"]["phase_metrics"]}
    assert phases["parallel_retrieval"]["length_prior"] is None
    assert phases["rrf_merge"]["weights"] == parse_score_weights(Settings().recall_score_weights)
