"""The demo's questions, answered on the bundled sample bank: each puts one of its answers first,
under score fusion and under RRF, with the default reranker (offline, the fused order) and with ``rrf``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.demo import sample_bank, sample_questions
from hindsight_recall.settings import Settings

QUESTIONS = sample_questions()


@pytest.fixture(scope="module", params=[("score", "rrf"), ("rrf", "rrf"), ("score", "local"), ("rrf", "local")],
                ids=lambda p: f"{p[0]}-fusion-{p[1]}-reranker")
async def fused(request: pytest.FixtureRequest, make_settings: Callable[..., Settings]) -> AsyncIterator[Engine]:
    """An engine fusing the arms' lists one way and reranking one way, over a fresh copy of the demo bank."""
    fusion, reranker = request.param
    async with Engine(make_settings(recall_fusion=fusion, reranker_provider=reranker, reranker_timeout=1)) as eng:
        await eng.delete_bank("demo-questions")
        await eng.retain("demo-questions", sample_bank())
        yield eng


@pytest.mark.parametrize("question", [pytest.param(q, id=q["query"]) for q in QUESTIONS])
async def test_demo_question_puts_an_answer_first(fused: Engine, question: dict[str, Any]) -> None:
    body = await fused.recall("demo-questions", question["query"], query_timestamp=question["query_timestamp"],
                              budget="mid", max_tokens=1024)
    top = [r["id"] for r in body["results"][:3]]
    assert top[0] in question["expect"], top


async def test_date_words_are_left_to_the_temporal_arm(fused: Engine) -> None:
    """"last spring" is read once: the window goes to the temporal arm, the semantic arms embed the rest."""
    body = await fused.recall("demo-questions", "What did Alice do last spring?",
                              query_timestamp="2024-03-10T12:00:00Z", trace=True)
    reading = next(p["details"] for p in body["trace"]["summary"]["phase_metrics"]
               if p["phase_name"] == "temporal_extraction")
    assert reading["date_phrase"] == "last spring"
    assert reading["semantic_query"] == "What did Alice do?"
    assert reading["window"]["start"].startswith("2023-03-01")
