"""Vague questions get answers: floors that fit the model, and weak results when nothing reaches them.

The bank is the one upstream's client tests ask "What has everyone been working on?" of: with the
bundled MiniLM model no memory reaches the semantic floor and no keyword matches, yet the bank
plainly holds what the question is about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.errors import ConfigError, InvalidRequest
from hindsight_recall.recall.weak import WEAK_CEILING, weak_score
from hindsight_recall.settings import Settings, load_settings
from hindsight_recall.store import banks

VAGUE = "What has everyone been working on?"
TEAM = [
    {"id": "roadmap", "text": "Alice presented the Q3 roadmap at the Monday standup",
     "tags": ["project_x", "meetings"]},
    {"id": "auth-doc", "text": "Bob wrote the architecture document for the new auth system",
     "tags": ["project_x", "docs"]},
    {"id": "sprint", "text": "Charlie led the sprint planning session for the mobile app",
     "tags": ["project_y", "meetings"]},
    {"id": "picnic", "text": "Diana announced the company picnic for next Friday", "tags": ["company"]},
    {"id": "pizza", "text": "Eve mentioned she likes pineapple on pizza"},
]
TAGS = {m["id"]: set(m.get("tags", ())) for m in TEAM}


@pytest.fixture
async def team(engine: Engine, bank: str) -> str:
    await engine.retain(bank, TEAM)
    return bank


def phase(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    found = [p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == name]
    return found[0]["details"] if found else None


async def test_vague_question_returns_weak_results_and_says_why(engine: Engine, team: str) -> None:
    body = await engine.recall(team, VAGUE, max_tokens=16000, trace=True)
    results = body["results"]
    assert results, "a bank with memories answers a vague question"
    assert len(results) == 5  # RECALL_WEAK_RESULTS
    weak = phase(body, "weak_results")
    assert weak is not None and weak["admitted"] == 5
    assert "no memory reached a floor" in weak["reason"]
    assert weak["semantic_floor"] == pytest.approx(0.3)
    # scores say how weak: under the least score of a result that reached a floor, ordered by similarity
    finals = [r["scores"]["final"] for r in results]
    assert all(0 <= f < WEAK_CEILING for f in finals)
    assert finals == sorted(finals, reverse=True)
    sims = [r["scores"]["semantic"] for r in results]
    assert weak["similarities"] == [round(s, 4) for s in sims]
    assert all(s < 0.3 for s in sims)
    assert finals[0] == pytest.approx(weak_score(sims[0], 0.3))


@pytest.mark.parametrize(("tags", "mode", "allowed"), [
    (["project_x"], "any", lambda t: "project_x" in t or not t),
    (["project_x"], "all", lambda t: "project_x" in t or not t),
    (["project_x"], "any_strict", lambda t: "project_x" in t),
    (["project_x", "meetings"], "all_strict", lambda t: {"project_x", "meetings"} <= t),
    (["project_x", "project_y"], "any_strict", lambda t: bool(t & {"project_x", "project_y"})),
])
async def test_vague_question_with_tags_returns_the_tagged_memories(
    engine: Engine, team: str, tags: list[str], mode: str, allowed: Callable[[set[str]], bool]
) -> None:
    body = await engine.recall(team, VAGUE, tags=tags, tags_match=mode, max_tokens=16000)
    ids = [r["id"] for r in body["results"]]
    visible = {m for m, t in TAGS.items() if allowed(t)}
    assert set(ids) == visible  # every memory the filter lets through, and no other
    assert any(tags[0] in TAGS[i] for i in ids)


async def test_weak_results_respect_the_filters(engine: Engine, team: str) -> None:
    body = await engine.recall(team, VAGUE, tags=["nobody-has-this"], tags_match="any_strict", trace=True)
    assert body["results"] == []
    assert phase(body, "weak_results") == {**(phase(body, "weak_results") or {}), "admitted": 0}


async def test_nonsense_question_does_not_fill_the_budget(engine: Engine, team: str) -> None:
    body = await engine.recall(team, "zxqv blorft wumple", max_tokens=16000)
    assert len(body["results"]) <= 5
    assert all(r["scores"]["final"] < WEAK_CEILING for r in body["results"])


@pytest.mark.parametrize("min_scores", [{"semantic": 0.3}, {"semantic": 0.0001, "final": 0.5}, {"final": 0.01},
                                        {"keyword": 0.0}])
async def test_min_scores_are_honoured_and_turn_weak_results_off(
    engine: Engine, team: str, min_scores: dict[str, float]
) -> None:
    body = await engine.recall(team, VAGUE, min_scores=min_scores, trace=True)
    assert phase(body, "weak_results") is None
    for r in body["results"]:
        for key, floor in min_scores.items():
            if key in ("semantic", "final") and r["scores"][key] is not None:
                assert r["scores"][key] >= floor


async def test_min_semantic_zero_lets_every_memory_in_as_a_real_result(engine: Engine, team: str) -> None:
    body = await engine.recall(team, VAGUE, min_scores={"semantic": -1.0}, trace=True)
    assert phase(body, "weak_results") is None
    assert len(body["results"]) == len(TEAM)


async def test_a_question_that_reaches_a_floor_gets_no_weak_results(engine: Engine, team: str) -> None:
    body = await engine.recall(team, "Alice roadmap", trace=True)
    assert body["results"][0]["id"] == "roadmap"
    assert phase(body, "weak_results") is None
    assert body["results"][0]["scores"]["final"] >= WEAK_CEILING


async def test_weak_results_setting_zero_returns_nothing(make_settings: Callable[..., Settings], bank: str) -> None:
    async with Engine(make_settings(recall_weak_results=0)) as eng:
        await eng.retain(bank, TEAM)
        body = await eng.recall(bank, VAGUE, trace=True)
    assert body["results"] == []
    assert phase(body, "weak_results") is None


async def test_weak_results_setting_caps_the_count(make_settings: Callable[..., Settings], bank: str) -> None:
    async with Engine(make_settings(recall_weak_results=2)) as eng:
        await eng.retain(bank, TEAM)
        body = await eng.recall(bank, VAGUE)
    assert len(body["results"]) == 2


def test_weak_results_setting_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_RECALL_WEAK_RESULTS", "3")
    assert load_settings().recall_weak_results == 3
    with pytest.raises(ConfigError, match="RECALL_WEAK_RESULTS"):
        load_settings(recall_weak_results=-1)
    monkeypatch.setenv("HINDSIGHT_API_SEMANTIC_FLOOR_CALIBRATION", "false")
    assert load_settings().semantic_floor_calibration is False
    monkeypatch.setenv("HINDSIGHT_API_SEMANTIC_FLOOR_CALIBRATION", "sometimes")
    with pytest.raises(ConfigError, match="SEMANTIC_FLOOR_CALIBRATION"):
        load_settings()


def test_weak_score_bounds() -> None:
    assert weak_score(0.15, 0.3) == pytest.approx(0.05)
    assert weak_score(-0.2, 0.3) == 0.0
    assert weak_score(0.5, 0.3) < WEAK_CEILING
    assert weak_score(0.2, 0.0) == 0.0


async def test_floors_in_force_are_in_the_trace(engine: Engine, team: str) -> None:
    body = await engine.recall(team, VAGUE, trace=True)
    floors = phase(body, "similarity_floors")
    assert floors is not None
    assert floors["calibration"] is True and floors["model"].startswith("local:")
    # the bundled model is the scale the floors are written on: they stay as configured
    assert floors["in_force"] == floors["configured"] == {
        "semantic_min_similarity": 0.3, "graph_seed_min_similarity": 0.3, "temporal_semantic_min_similarity": 0.1}


async def test_an_anchored_question_leaves_its_date_words_to_the_temporal_arm(engine: Engine, bank: str) -> None:
    """The semantic arms search the question without its date; asked at a stated time, with memories
    inside the window, the keyword arm does too: "last" no longer matches "her last working day"."""
    await engine.retain(bank, [
        {"id": "resign", "text": "Alice said her last working day at the firm was in June.",
         "occurred_at": "2023-06-30T00:00:00Z"},
        {"id": "hike", "text": "Alice hiked the Alps with her sister.", "occurred_at": "2023-04-15T00:00:00Z"},
    ])
    body = await engine.recall(bank, "What did Alice do last spring?", query_timestamp="2024-03-10T00:00:00Z",
                               trace=True)
    reading = phase(body, "temporal_extraction")
    assert reading is not None
    assert (reading["semantic_query"], reading["keyword_query"]) == ("What did Alice do?",
                                                                     "What did Alice do last spring?")
    assert body["trace"]["query"]["temporal_constraint"]["start"].startswith("2023-03-01")
    assert phase(body, "date_words") == {"window_holds_memories": True, "keyword_query": "What did Alice do?"}
    assert body["results"][0]["id"] == "hike"


async def test_date_words_stay_in_the_keyword_search_when_the_window_is_empty(engine: Engine, bank: str) -> None:
    """A window the bank has nothing in may be the memories' own words: the keyword arm keeps them."""
    await engine.retain(bank, [{"id": "run", "text": "Alice ran a marathon last spring.",
                                "occurred_at": "2021-05-02T00:00:00Z"}])
    body = await engine.recall(bank, "What did Alice do last spring?", query_timestamp="2024-03-10T00:00:00Z",
                               trace=True)
    assert phase(body, "date_words") == {"window_holds_memories": False,
                                         "keyword_query": "What did Alice do last spring?"}
    assert body["results"][0]["id"] == "run"


async def test_the_window_test_sees_only_what_the_filters_let_through(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": "hike", "text": "Alice hiked the Alps.", "tags": ["private"],
                                "occurred_at": "2023-04-15T00:00:00Z"}])
    body = await engine.recall(bank, "What did Alice do last spring?", query_timestamp="2024-03-10T00:00:00Z",
                               tags=["public"], tags_match="all_strict", trace=True)
    assert (phase(body, "date_words") or {})["window_holds_memories"] is False
    assert body["results"] == []


async def test_a_question_without_a_timestamp_searches_its_date_words(engine: Engine, bank: str) -> None:
    """Read against today, "last spring" may be what the memories say: no window test, words kept."""
    await engine.retain(bank, [{"id": "hike", "text": "Alice hiked the Alps.", "occurred_at": "2023-04-15T00:00:00Z"}])
    body = await engine.recall(bank, "What did Alice do last spring?", trace=True)
    assert phase(body, "date_words") is None
    reading = phase(body, "temporal_extraction")
    assert reading is not None and reading["keyword_query"] == "What did Alice do last spring?"


async def test_a_bank_without_temporal_retrieval_searches_the_whole_question(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": "hike", "text": "Alice hiked last spring.",
                                "occurred_at": "2023-04-15T00:00:00Z"}])
    async with engine.db.connect() as conn:
        await banks.set_bank_config(conn, bank, {"enable_temporal_retrieval": False})
    body = await engine.recall(bank, "What did Alice do last spring?", query_timestamp="2024-03-10T00:00:00Z",
                               trace=True)
    reading = phase(body, "temporal_extraction")
    assert reading is not None
    assert (reading["semantic_query"], reading["window"], reading["date_phrase"]) == (
        "What did Alice do last spring?", None, None)
    assert body["results"][0]["id"] == "hike"


async def test_a_bank_that_turns_temporal_retrieval_on_reads_the_date(
    make_settings: Callable[..., Settings], bank: str
) -> None:
    async with Engine(make_settings(enable_temporal_retrieval=False)) as eng:
        await eng.retain(bank, [{"id": "hike", "text": "Alice hiked.", "occurred_at": "2023-04-15T00:00:00Z"}])
        async with eng.db.connect() as conn:
            await banks.set_bank_config(conn, bank, {"enable_temporal_retrieval": True})
        body = await eng.recall(bank, "What did Alice do last spring?", query_timestamp="2024-03-10T00:00:00Z",
                                trace=True)
    reading = phase(body, "temporal_extraction")
    assert reading is not None and reading["semantic_query"] == "What did Alice do?"
    assert reading["window"]["start"].startswith("2023-03-01")


def test_invalid_min_scores_still_rejected() -> None:
    from hindsight_recall.recall.request import build_request
    with pytest.raises(InvalidRequest):
        build_request("b", VAGUE, min_scores={"semantic": "high"})  # type: ignore[dict-item]
