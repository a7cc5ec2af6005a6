"""The graph arm (link expansion) on the embedded PostgreSQL server."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.protocols import RetrievalContext
from hindsight_recall.recall.arms.graph import GraphRetriever
from hindsight_recall.recall.filters import tag_filter
from hindsight_recall.recall.request import query_tokens
from hindsight_recall.store import banks
from hindsight_recall.types import ArmResult
from sqlalchemy import text

FILLER = [
    "Cactus plants need very little water.", "The train to Lyon leaves at 7:15.",
    "Mount Everest is 8849 metres high.", "Marco prefers espresso over filter coffee.",
    "A new bakery opened on Elm Street.", "The library closes early on Sundays.",
    "Jupiter has dozens of moons.",
    "The marathon route passes the harbour.", "Her laptop battery died during the flight.",
    "The recipe calls for two cups of flour.", "Snow is forecast for the weekend.",
    "The museum added a dinosaur wing.", "Octopuses have three hearts.",
    "The city repaved the bridge last spring.",
    "He lost his keys at the gym.", "Lena adopted a grey kitten.", "The printer on floor two is jammed.",
    "Tomatoes ripen faster in warm weather.",
]

MUSIC: list[dict[str, Any]] = [
    # the seed shares 1, 2 and 3 rare entities with three memories the query does not match;
    # "Priya" is on every filler row too, which makes her a hub
    {"id": "cello", "text": "Priya plays the cello in the Larkspur Quartet.",
     "entities": ["Priya", "Larkspur Quartet", "Ana Ruiz", "Oakhaven"]},
    {"id": "rehearsal", "text": "Rehearsals happen every Thursday night in an old church hall.",
     "entities": ["Larkspur Quartet"]},
    {"id": "tour", "text": "The group tours coastal towns each August.",
     "entities": ["Larkspur Quartet", "Ana Ruiz"]},
    {"id": "tickets", "text": "Tickets for the winter concert sold out in an hour.",
     "entities": ["Larkspur Quartet", "Ana Ruiz", "Oakhaven"]},
    {"id": "boiler", "text": "The factory's main boiler exploded after a pressure valve failed.",
     "causes": ["halt"]},
    {"id": "halt", "text": "Production at the plant halted for three weeks."},
    {"id": "obs-seed", "type": "observation", "text": "Priya is a devoted cellist who plays chamber music.",
     "sources": ["cello"]},
    {"id": "obs-1", "type": "observation",
     "text": "Thursday evenings are reserved for practice in a church hall.", "sources": ["rehearsal"]},
    {"id": "obs-2", "type": "observation", "text": "Every August brings a trip along the coast.",
     "sources": ["rehearsal", "tour"]},
    {"id": "obs-3", "type": "observation",
     "text": "Weekly practice, a summer trip and a sold-out winter night.",
     "sources": ["rehearsal", "tour", "tickets"]},
    *({"id": f"filler-{i}", "text": t, "entities": ["Priya"]} for i, t in enumerate(FILLER)),
]

INSTRUMENT = "What instrument does Priya play?"


@pytest.fixture
async def music(engine: Engine, bank: str) -> str:
    await engine.retain(bank, MUSIC)
    return bank


async def expand(
    engine: Engine, bank: str, query: str, *, types: Sequence[str] = ("world",),
    tags: list[str] | None = None, match: str = "any", limit: int = 50, **overrides: Any,
) -> tuple[dict[str, float], list[ArmResult]]:
    """Run the graph arm alone; return external id -> score, and the raw results."""
    settings = engine.settings.model_copy(update=overrides)
    ctx = RetrievalContext(
        bank_id=bank, query=query, tokens=query_tokens(query),
        embedding=(await engine.embedder.embed([query], mode="query"))[0], fact_types=types, limit=limit,
        filter=tag_filter(tags, match), settings=settings, db=engine.db.limited(4),
        text_search=engine.text_search, now=datetime.now(UTC),
    )
    arm = GraphRetriever(settings)
    assert arm.enabled(ctx)
    results = await arm.retrieve(ctx)
    return {h.row.external_id: h.score for r in results for h in r.hits}, results


async def test_shared_entity_counts_score_tanh(engine: Engine, music: str) -> None:
    scores, _ = await expand(engine, music, INSTRUMENT)
    assert scores["rehearsal"] == pytest.approx(math.tanh(0.5))
    assert scores["tour"] == pytest.approx(math.tanh(1.0))
    assert scores["tickets"] == pytest.approx(math.tanh(1.5))
    assert [round(scores[k], 2) for k in ("rehearsal", "tour", "tickets")] == [0.46, 0.76, 0.91]
    assert "cello" not in scores  # a seed is never its own neighbour


async def test_hub_entities_are_skipped_unless_the_guard_is_off(engine: Engine, music: str) -> None:
    guarded, _ = await expand(engine, music, INSTRUMENT)
    assert not any(k.startswith("filler-") for k in guarded)
    unguarded, _ = await expand(engine, music, INSTRUMENT, link_expansion_max_entity_fraction=1.0)
    assert sum(k.startswith("filler-") for k in unguarded) == len(FILLER)
    assert unguarded["filler-0"] == pytest.approx(math.tanh(0.5))
    assert unguarded["tickets"] == pytest.approx(math.tanh(1.5))
    # a cap the entity fills also marks it as a hub: what the cap keeps is arbitrary
    capped, _ = await expand(engine, music, INSTRUMENT, link_expansion_per_entity_limit=2)
    assert "rehearsal" not in capped and capped["tickets"] == pytest.approx(math.tanh(1.0))


async def test_entity_only_neighbour_is_found_by_the_graph_arm_alone(engine: Engine, music: str) -> None:
    body = await engine.recall(music, INSTRUMENT, types=["world"], trace=True)
    merged = {m["node_id"]: m["source_ranks"] for m in body["trace"]["rrf_merged"]}
    assert set(merged["rehearsal"]) == {"graph_rank"}
    assert "semantic_rank" in merged["cello"]


async def test_causal_link_is_followed(engine: Engine, music: str) -> None:
    scores, _ = await expand(engine, music, "Why did the boiler explode?")
    assert scores["halt"] == pytest.approx(1.0)
    body = await engine.recall(music, "Why did the boiler explode?", types=["world"], trace=True)
    merged = {m["node_id"]: m["source_ranks"] for m in body["trace"]["rrf_merged"]}
    assert set(merged["halt"]) == {"graph_rank"}


async def test_semantic_links_add_to_a_score_but_admit_nothing(engine: Engine, music: str) -> None:
    async with engine.db.connect() as conn:
        ids: dict[str, Any] = dict((await conn.execute(
            text("SELECT external_id, id FROM memory_units WHERE bank_id = :bank"), {"bank": music})).all())
        await conn.execute(
            text("INSERT INTO memory_links (from_unit_id, to_unit_id, link_type, weight, bank_id) "
                 "VALUES (:cello, :rehearsal, 'semantic', 0.8, :bank), (:filler, :cello, 'semantic', 0.9, :bank)"),
            {"cello": ids["cello"], "rehearsal": ids["rehearsal"], "filler": ids["filler-3"], "bank": music},
        )
    scores, _ = await expand(engine, music, INSTRUMENT)
    assert scores["rehearsal"] == pytest.approx(math.tanh(0.5) + 0.8)
    assert "filler-3" not in scores  # reached by a semantic link only


async def test_observations_expand_through_their_sources(engine: Engine, music: str) -> None:
    scores, _ = await expand(engine, music, INSTRUMENT, types=["observation"])
    assert "obs-seed" not in scores
    assert scores["obs-1"] == pytest.approx(math.tanh(0.5))
    assert scores["obs-2"] == pytest.approx(math.tanh(1.0))
    assert scores["obs-3"] == pytest.approx(math.tanh(1.5))


async def test_timeout_reruns_without_entities(engine: Engine, music: str) -> None:
    scores, results = await expand(engine, music, INSTRUMENT, link_expansion_timeout=1e-6)
    assert results[0].metadata == {"timed_out": True}
    assert "rehearsal" not in scores
    scores, results = await expand(engine, music, "Why did the boiler explode?", link_expansion_timeout=1e-6)
    assert results[0].metadata == {"timed_out": True} and scores["halt"] == pytest.approx(1.0)
    # the connections the cancelled statements ran on are fine afterwards
    scores, results = await expand(engine, music, INSTRUMENT)
    assert results[0].metadata == {} and "rehearsal" in scores


async def test_filters_apply_before_the_cap_and_the_limit(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [
        {"id": "vote", "text": "The committee voted to freeze the budget for next year.",
         "entities": ["Budget Committee"], "tags": ["board"]},
        {"id": "resign", "text": "Several volunteers resigned in protest.", "entities": ["Budget Committee"],
         "tags": ["board"]},
        *({"id": f"secret-{i}", "text": t, "entities": ["Budget Committee"], "tags": ["private"]}
          for i, t in enumerate(FILLER[:6])),
        *({"id": f"filler-{i}", "text": t, "tags": ["board"]} for i, t in enumerate(FILLER[6:])),
    ])
    query = "What did the committee decide about the budget?"
    seen, _ = await expand(engine, bank, query, tags=["board"], match="any_strict", limit=1,
                           link_expansion_per_entity_limit=1, link_expansion_max_entity_fraction=1.0)
    assert seen == {"resign": pytest.approx(math.tanh(0.5))}
    unfiltered, _ = await expand(engine, bank, query, link_expansion_max_entity_fraction=1.0)
    assert len([k for k in unfiltered if k.startswith("secret-")]) == 6


async def test_banks_are_isolated(engine: Engine, music: str, bank: str) -> None:
    other = f"{bank}-other"
    await engine.retain(other, [{"id": "elsewhere", "text": "The Larkspur Quartet recorded an album.",
                                 "entities": ["Larkspur Quartet", "Ana Ruiz"]}])
    try:
        scores, _ = await expand(engine, music, INSTRUMENT)
        assert "elsewhere" not in scores and "rehearsal" in scores
        assert (await expand(engine, other, "What instrument does Priya play in the quartet?"))[0] == {}
    finally:
        async with engine.db.connect() as conn:
            await banks.delete_bank(conn, other)


async def test_toggle_removes_the_arm(engine: Engine, music: str) -> None:
    def retrieval(body: dict[str, Any]) -> dict[str, Any]:
        phases = body["trace"]["summary"]["phase_metrics"]
        return dict(next(p for p in phases if p["phase_name"] == "parallel_retrieval")["details"])

    assert retrieval(await engine.recall(music, INSTRUMENT, trace=True))["graph"] > 0
    async with engine.db.connect() as conn:
        await banks.set_bank_config(conn, music, {"enable_graph_retrieval": False})
    body = await engine.recall(music, INSTRUMENT, trace=True)
    assert "graph" not in retrieval(body)
    assert all("graph_rank" not in m["source_ranks"] for m in body["trace"]["rrf_merged"])


def test_unknown_graph_retriever_warns_and_falls_back(
    make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING"):
        assert make_settings(graph_retriever="mpfp").graph_retriever == "link_expansion"
    assert "GRAPH_RETRIEVER" in caplog.text


async def test_the_seeds_scale_with_the_budget(engine: Engine, bank: str) -> None:
    # forty close matches, each sharing a rare entity with one memory the query does not match
    await engine.retain(bank, [
        *({"id": f"cello-{i}", "text": f"Priya played the cello at concert {i}.", "entities": [f"Hall {i}"]}
          for i in range(40)),
        *({"id": f"hall-{i}", "text": f"The roof of building {i} was repaired.", "entities": [f"Hall {i}"]}
          for i in range(40)),
    ])

    async def reached(limit: int) -> int:
        scores, _ = await expand(engine, bank, "Priya plays the cello", limit=limit)
        return sum(name.startswith("hall-") for name in scores)

    # B/15 seeds, 20 at the mid budget, at least 5: each seed reaches its hall
    assert [await reached(b) for b in (30, 150, 300, 600)] == [5, 10, 20, 40]


async def test_composed_with_the_semantic_arm_it_searches_the_vectors_once(engine: Engine, music: str) -> None:
    from hindsight_recall.recall.arms._ann import AnnSettings
    from hindsight_recall.recall.arms._compose import composable, run_composed
    from hindsight_recall.recall.arms.semantic import SemanticRetriever

    query, types = INSTRUMENT, ("world", "observation")
    _, alone = await expand(engine, music, query, types=types, limit=50)
    ctx = RetrievalContext(
        bank_id=music, query=query, tokens=query_tokens(query),
        embedding=(await engine.embedder.embed([query], mode="query"))[0], fact_types=types, limit=50,
        filter=tag_filter(None, "any"), settings=engine.settings, db=engine.db.limited(4),
        text_search=engine.text_search, now=datetime.now(UTC),
    )
    semantic, graph = SemanticRetriever(engine.settings), GraphRetriever(engine.settings)
    statements = [semantic.statement(ctx), graph.statement(ctx)]
    assert composable(statements) and statements[1].ctes == statements[0].ctes
    sql = " ".join(statements[1].subselects)
    assert "<=>" not in sql and "FROM nearest_world" in sql  # the seeds read the semantic arm's list
    composed = await run_composed(ctx, statements, AnnSettings())
    semantic_alone = await semantic.retrieve(ctx)

    def ranked(results: list[ArmResult], arm: str) -> dict[str, list[tuple[str, float]]]:
        return {r.fact_type: [(h.row.external_id, round(h.score, 6)) for h in r.hits] for r in results if r.arm == arm}

    assert ranked(composed, "graph") == ranked(alone, "graph") and ranked(alone, "graph")["world"]
    assert ranked(composed, "semantic") == ranked(semantic_alone, "semantic")
    # one statement per fact type, on connections of their own: the same rows
    spread = await run_composed(ctx, statements, AnnSettings(), spread=True)
    for arm in ("semantic", "graph"):
        assert ranked(spread, arm) == ranked(composed, arm)
    # a semantic floor above the seeds' own: the seeds are no prefix of its list, so the arm searches them
    strict = GraphRetriever(engine.settings).statement(
        RetrievalContext(**{**ctx.__dict__, "min_semantic": 0.9}))
    assert not strict.ctes and "<=>" in " ".join(strict.subselects)
