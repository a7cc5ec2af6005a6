"""The temporal arm: coverage over the window, proximity, spreading, and end to end."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.recall.arms.temporal import (
    ENTRY_NO_DATE,
    NEIGHBOUR_NO_DATE,
    bucket_of,
    propagate,
    proximity,
    relevance,
    spread_over_time,
)
from hindsight_recall.settings import Settings
from hindsight_recall.store.banks import set_bank_config
from hindsight_recall.types import Hit, MemoryRow, TimeWindow
from sqlalchemy import text

YEAR = TimeWindow(datetime(2023, 1, 1, tzinfo=UTC), datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC))
SPRING = ("2023-03-01T00:00:00Z", "2023-05-31T23:59:59Z")
NOON_TO_NOON = ("2023-02-28T12:00:00Z", "2023-03-01T12:00:00Z")


def day(month: int, d: int = 10) -> datetime:
    return datetime(2023, month, d, tzinfo=UTC)


def row(name: str, start: datetime | None = None, end: datetime | None = None,
        mentioned: datetime | None = None) -> MemoryRow:
    return MemoryRow(id=uuid.uuid4(), external_id=name, text=name, fact_type="world",
                     occurred_start=start, occurred_end=end, mentioned_at=mentioned)


def pool(*items: tuple[str, datetime | None, float]) -> list[Hit]:
    return [Hit(row(name, start=date), sim) for name, date, sim in items]


def names(hits: list[Hit]) -> list[str]:
    return [h.row.external_id for h in hits]


# --- coverage over the window -------------------------------------------------------------------


def test_coverage_example_keeps_one_january_row_and_the_july_row() -> None:
    hits = pool(("jan1", day(1, 5), 0.99), ("jan2", day(1, 12), 0.98), ("jan3", day(1, 20), 0.97),
                ("jul", day(7, 4), 0.95))
    assert names(spread_over_time(hits, YEAR, limit=2)) == ["jan1", "jul"]


def test_same_day_pool_returns_top_similarity() -> None:
    hits = pool(*((f"r{i}", day(3, 3), 0.5 + i / 100) for i in range(15)))
    assert names(spread_over_time(hits, YEAR)) == [f"r{i}" for i in range(14, 4, -1)]


def test_small_pool_is_kept_whole_in_similarity_order() -> None:
    hits = pool(*((f"r{i}", day(1 + i), 0.1 * i) for i in range(10)))
    assert names(spread_over_time(hits, YEAR)) == [f"r{i}" for i in range(9, -1, -1)]


def test_round_robin_takes_best_of_each_bucket_then_second_best() -> None:
    hits = pool(*((f"jan{i}", day(1, 1 + i), 0.9 - i / 100) for i in range(8)),
                ("jun", day(6), 0.5), ("nov", day(11), 0.6), ("nov2", day(11, 12), 0.4), ("x", None, 0.95))
    picked = names(spread_over_time(hits, YEAR))
    # round 1 by strength: bucket 0 (undated "x" joins January), then Nov, then Jun; then the second of each
    assert picked[:3] == ["x", "nov", "jun"]
    assert picked[3:5] == ["jan0", "nov2"]
    assert picked[5:] == ["jan1", "jan2", "jan3", "jan4", "jan5"]


def test_buckets_clamp_and_degenerate_windows_use_bucket_zero() -> None:
    assert bucket_of(YEAR.start, YEAR) == 0 and bucket_of(YEAR.end, YEAR) == 7
    assert bucket_of(day(7, 3), YEAR) == 4  # 183 days in: 8 × 183/365 = 4.01
    assert bucket_of(datetime(2022, 6, 1, tzinfo=UTC), YEAR) == 0
    assert bucket_of(datetime(2024, 6, 1, tzinfo=UTC), YEAR) == 7
    assert bucket_of(None, YEAR) == 0
    instant = TimeWindow(day(3), day(3))
    assert bucket_of(day(3), instant) == 0 and bucket_of(day(9), instant) == 0


def test_bucket_date_prefers_start_then_mention_then_end() -> None:
    assert bucket_of(row("a", start=day(1), end=day(12), mentioned=day(6)).date, YEAR) == 0
    assert bucket_of(row("b", end=day(12), mentioned=day(6)).date, YEAR) == 3
    assert bucket_of(row("c", end=day(12)).date, YEAR) == 7


# --- proximity -----------------------------------------------------------------------------------


WINDOW = TimeWindow(datetime(2023, 3, 1, tzinfo=UTC), datetime(2023, 3, 21, tzinfo=UTC))  # L = 20 days


def test_proximity_is_one_at_the_midpoint_and_zero_at_and_beyond_the_edges() -> None:
    assert proximity(row("mid", start=day(3, 11)), WINDOW, ENTRY_NO_DATE) == 1.0
    assert proximity(row("edge", start=day(3, 1)), WINDOW, ENTRY_NO_DATE) == 0.0
    assert proximity(row("far", start=day(9, 1)), WINDOW, ENTRY_NO_DATE) == 0.0
    assert proximity(row("q", start=day(3, 16)), WINDOW, ENTRY_NO_DATE) == pytest.approx(0.5)


def test_proximity_uses_the_occurrence_midpoint_then_start_end_mention() -> None:
    assert proximity(row("span", start=day(3, 1), end=day(3, 21)), WINDOW, 0.5) == 1.0
    assert proximity(row("end", end=day(3, 16), mentioned=day(3, 11)), WINDOW, 0.5) == pytest.approx(0.5)
    assert proximity(row("said", mentioned=day(3, 6)), WINDOW, 0.5) == pytest.approx(0.5)


def test_proximity_defaults_for_undated_rows_and_zero_length_windows() -> None:
    assert proximity(row("none"), WINDOW, ENTRY_NO_DATE) == ENTRY_NO_DATE == 0.5
    assert proximity(row("none"), WINDOW, NEIGHBOUR_NO_DATE) == NEIGHBOUR_NO_DATE == 0.3
    assert proximity(row("any", start=day(8)), TimeWindow(day(3), day(3)), ENTRY_NO_DATE) == 1.0


# --- spreading -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t_parent", "weight", "link", "p_child", "expected"),
    [
        (1.0, 1.0, "causes", 0.0, 1.4),
        (1.0, 1.0, "caused_by", 0.3, 1.4),
        (1.0, 0.5, "enables", 0.0, 0.525),
        (0.8, 1.0, "prevents", 0.1, 0.84),
        (1.0, 0.3, "temporal", 0.0, 0.21),
        (1.0, 0.3, "temporal", 0.6, 0.6),  # the child's own proximity wins
        (0.21, 0.5, "temporal", 0.0, 0.0735),
    ],
)
def test_propagation_factor_math(
    t_parent: float, weight: float, link: str, p_child: float, expected: float
) -> None:
    assert propagate(t_parent, weight, link, p_child) == pytest.approx(expected)


# --- end to end ----------------------------------------------------------------------------------


def temporal_results(body: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """fact type -> the temporal arm's trace rows."""
    arms = body["trace"]["retrieval_results"]
    return {r["fact_type"]: r["results"] for r in arms if r["method_name"] == "temporal"}


def temporal_ids(body: dict[str, Any], fact_type: str = "world") -> list[str]:
    return [r["node_id"] for r in temporal_results(body).get(fact_type, [])]


async def similarity(engine: Engine, query: str, memory: str) -> float:
    """The query-memory cosine the arm's SQL computes."""
    q, m = await engine.embedder.embed([query], mode="query"), await engine.embedder.embed([memory], mode="passage")
    dot = sum(a * b for a, b in zip(q[0], m[0], strict=True))
    return dot / (sum(a * a for a in q[0]) ** 0.5 * sum(b * b for b in m[0]) ** 0.5)


def spring_p(date: datetime) -> float:
    start, end = (datetime.fromisoformat(s.replace("Z", "+00:00")) for s in SPRING)
    half = (end - start).total_seconds() / 2
    return 1 - min(abs((date - (start + (end - start) / 2)).total_seconds()) / half, 1)


async def test_temporal_arm_ranks_the_window_and_spreads_along_causes(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "What did Alice do?", temporal_window=SPRING, trace=True)
    arm = temporal_results(body)
    world = {r["node_id"]: r for r in arm["world"]}
    # relevance first (a departure from SPEC §6.4): similarity to the query plus 0.1 × proximity
    texts = {r["node_id"]: r["text"] for r in arm["world"]}
    for name, p in (("marathon", spring_p(day(4, 23))), ("reorg", spring_p(day(5, 15)))):
        expected = relevance(await similarity(engine, "What did Alice do?", texts[name]), p)
        assert world[name]["score"] == pytest.approx(expected, abs=1e-5)
    assert world["marathon"]["score_name"] == "temporal_score"
    assert [r["node_id"] for r in arm["experience"]] == ["pasta"]
    # reorg causes "left" (June 30, outside the window): reached by spreading, own proximity 0
    left_sim = await similarity(engine, "What did Alice do?", texts["left"])
    assert world["left"]["score"] == pytest.approx(relevance(left_sim, 0.0), abs=1e-5)
    left = next(r for r in body["trace"]["reranked"] if r["node_id"] == "left")
    assert left["score_components"]["temporal"] == 0.0
    marathon = next(r for r in body["trace"]["reranked"] if r["node_id"] == "marathon")
    assert marathon["score_components"]["temporal"] == pytest.approx(spring_p(day(4, 23)))
    # outside the window and unlinked: no temporal hit, but other arms still return them
    assert {"job", "old-job", "untagged"}.isdisjoint(world)
    assert "observation" not in arm or arm["observation"] == []
    assert {"job", "old-job"} <= {r["id"] for r in body["results"]}
    assert body["trace"]["query"]["temporal_constraint"]["start"].startswith("2023-03-01")


async def test_spring_memories_lead_the_temporal_arm_without_causal_links(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [
        {"id": "spring", "text": "Alice planted tomatoes in the garden.", "occurred_at": "2023-04-15"},
        {"id": "early", "text": "Alice planted roses in the garden.", "occurred_at": "2023-03-03"},
        {"id": "mention", "text": "Alice said she planted herbs.", "mentioned_at": "2023-05-20"},
        {"id": "summer", "text": "Alice planted sunflowers in the garden.", "occurred_at": "2023-07-15"},
        {"id": "span", "text": "Alice tended an allotment.",
         "occurred_start": "2022-10-01T00:00:00Z", "occurred_end": "2023-03-15T00:00:00Z"},
    ])
    body = await engine.recall(bank, "What did Alice plant?", temporal_window=SPRING, trace=True)
    rows = temporal_results(body)["world"]
    assert {r["node_id"] for r in rows} == {"spring", "mention", "early", "span"}  # "summer" is outside
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert "summer" in {r["id"] for r in body["results"]}


async def test_entry_points_cover_the_whole_window(engine: Engine, bank: str) -> None:
    hikes = [{"id": f"hike{i}", "text": "Alice went hiking in the Alps with her hiking club.",
              "occurred_at": f"2023-03-0{1 + i // 3}T{8 * (i % 3):02d}:00:00Z"} for i in range(12)]
    museums = [{"id": "museum-apr", "text": "Alice visited an art museum.", "occurred_at": "2023-04-20"},
               {"id": "museum-may", "text": "Alice visited a history museum.", "occurred_at": "2023-05-25"}]
    await engine.retain(bank, hikes + museums)
    body = await engine.recall(bank, "Alice hiking in the Alps", temporal_window=SPRING, trace=True)
    rows = {r["node_id"]: r for r in temporal_results(body)["world"]}
    # twelve hikes outrank both museums on similarity, yet the museums' buckets get entry points
    query = "Alice hiking in the Alps"
    for name, date in (("museum-apr", day(4, 20)), ("museum-may", day(5, 25))):
        expected = relevance(await similarity(engine, query, rows[name]["text"]), spring_p(date))
        assert rows[name]["score"] == pytest.approx(expected, abs=1e-5)
    # the hikes left out as entry points are reached through their temporal links
    assert {f"hike{i}" for i in range(12)} <= set(rows)


async def test_spreading_stops_at_the_node_budget(engine: Engine, bank: str) -> None:
    hikes = [{"id": f"hike{i}", "text": "Alice went hiking in the Alps.",
              "occurred_at": f"2023-03-01T{i:02d}:00:00Z"} for i in range(16)]
    await engine.retain(bank, hikes)
    async with engine.db.connect() as conn:
        await set_bank_config(conn, bank, {"recall_budget_fixed_mid": 13})
    body = await engine.recall(bank, "Alice hiking in the Alps", temporal_window=SPRING, trace=True)
    assert len(temporal_ids(body)) == 13  # B = 13: ten entry points, then three neighbours


async def test_neighbours_in_time_are_read_from_the_dates_both_ways_within_a_day(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [
        {"id": "morning", "text": "Alice gave a talk at the conference.", "occurred_at": "2023-04-15T10:00:00Z"},
        {"id": "evening", "text": "Alice had dinner with the conference speakers.",
         "occurred_at": "2023-04-15T20:00:00Z"},
        {"id": "next-night", "text": "Alice flew home from the conference.", "occurred_at": "2023-04-16T22:00:00Z"},
        {"id": "journal", "type": "experience", "text": "I met Alice at the conference dinner.",
         "occurred_at": "2023-04-15T21:00:00Z"},
    ])
    async with engine.db.connect() as conn:  # nothing stored is needed: the dates are the links
        await conn.execute(text("DELETE FROM memory_links WHERE bank_id = :b AND link_type = 'temporal'"), {"b": bank})
    query = "What did Alice do at the conference?"
    for window, entry, reached in ((("2023-04-15T00:00:00Z", "2023-04-15T12:00:00Z"), "morning", "evening"),
                                   (("2023-04-15T18:00:00Z", "2023-04-15T20:30:00Z"), "evening", "morning")):
        body = await engine.recall(bank, query, temporal_window=window, trace=True)
        world = temporal_results(body)["world"]
        scores = {r["node_id"]: r["score"] for r in world}
        # later and earlier alike; over a day away (next-night) or of another type (journal), never
        assert set(scores) == {entry, reached}
        text_of = {"evening": "Alice had dinner with the conference speakers.",
                   "morning": "Alice gave a talk at the conference."}
        assert scores[reached] == pytest.approx(relevance(await similarity(engine, query, text_of[reached]), 0.0),
                                                abs=1e-5)  # its own proximity: 0, outside the window


async def test_spreading_follows_causal_chains_for_at_most_five_rounds(engine: Engine, bank: str) -> None:
    chain = [{"id": f"c{i}", "text": f"Alice step {i} of the project.", "occurred_at": f"2023-0{3 + i}-01",
              **({"causes": [f"c{i + 1}"]} if i < 6 else {})} for i in range(7)]
    await engine.retain(bank, chain)
    body = await engine.recall(bank, "Alice project steps", temporal_window=NOON_TO_NOON, trace=True)
    scores = {r["node_id"]: r["score"] for r in temporal_results(body)["world"]}
    # c0 is the only entry point; each round follows one more "causes" hop, and round six never runs
    assert set(scores) == {f"c{i}" for i in range(6)}
    query = "Alice project steps"
    for i in range(6):  # c0 sits at the window's midpoint; the others lie outside it
        sim = await similarity(engine, query, f"Alice step {i} of the project.")
        assert scores[f"c{i}"] == pytest.approx(relevance(sim, 1.0 if i == 0 else 0.0), abs=1e-5)


async def test_filters_apply_in_sql_to_pool_and_spreading(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "What did Alice do?", temporal_window=SPRING, trace=True,
                               tags=["work"], tags_match="any_strict")
    assert temporal_ids(body) == ["reorg"]  # "left" is untagged, the marathon is personal
    typed = await engine.recall(alice, "What did Alice do?", temporal_window=SPRING, trace=True,
                                types=["experience"])
    assert set(temporal_results(typed)) == {"experience"} and temporal_ids(typed, "experience") == ["pasta"]


async def test_banks_are_isolated(engine: Engine, alice: str) -> None:
    other = f"{alice}-other"
    await engine.retain(other, [{"id": "paris", "text": "Alice flew to Paris for a conference.",
                                 "occurred_at": "2023-04-15T00:00:00Z"}])
    body = await engine.recall(alice, "What did Alice do?", temporal_window=SPRING, trace=True)
    assert "paris" not in temporal_ids(body)
    own = await engine.recall(other, "What did Alice do?", temporal_window=SPRING, trace=True)
    assert temporal_ids(own) == ["paris"]


async def test_no_window_or_disabled_stage_means_no_temporal_arm(
    engine: Engine, alice: str, make_settings: Callable[..., Settings]
) -> None:
    plain = await engine.recall(alice, "What did Alice do?", trace=True)
    assert temporal_results(plain) == {}
    async with Engine(make_settings(enable_temporal_retrieval=False)) as off:
        body = await off.recall(alice, "What did Alice do?", temporal_window=SPRING, trace=True)
    assert temporal_results(body) == {}
    assert body["results"]


async def test_fact_types_spread_together_exactly_as_each_alone(engine: Engine, bank: str) -> None:
    def chain(kind: str, n: int) -> list[dict[str, Any]]:
        return [{"id": f"{kind}{i}", "type": kind, "text": f"Alice {kind} step {i} of the project.",
                 "occurred_at": f"2023-0{3 + i}-01", **({"causes": [f"{kind}{i + 1}"]} if i < n - 1 else {})}
                for i in range(n)]

    await engine.retain(bank, chain("world", 7) + chain("experience", 3))
    from sqlalchemy import event

    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "AS f(parent, kind)" in statement:  # the spreading statement
            statements.append(statement)

    event.listen(engine.db.engine.sync_engine, "before_cursor_execute", count)
    try:
        both = await engine.recall(bank, "Alice project steps", temporal_window=NOON_TO_NOON, trace=True)
    finally:
        event.remove(engine.db.engine.sync_engine, "before_cursor_execute", count)
    # one statement per round for both types: world needs five rounds, experience two
    assert len(statements) == 5
    for kind in ("world", "experience"):
        alone = await engine.recall(bank, "Alice project steps", temporal_window=NOON_TO_NOON, trace=True,
                                    types=[kind])
        assert temporal_results(both)[kind] == temporal_results(alone)[kind]
    assert {r["node_id"] for r in temporal_results(both)["experience"]} == {"experience0", "experience1", "experience2"}


async def test_the_pool_scales_with_the_budget(engine: Engine, bank: str) -> None:
    from hindsight_recall.protocols import RetrievalContext
    from hindsight_recall.recall.arms.temporal import TemporalRetriever
    from hindsight_recall.recall.filters import tag_filter
    from hindsight_recall.recall.request import query_tokens

    await engine.retain(bank, [{"id": f"walk{i}", "text": f"Alice walked her dog, walk number {i}.",
                                "occurred_at": f"2023-03-{1 + i % 28:02d}T{i // 28:02d}:00:00Z"} for i in range(90)])
    query = "Alice walked her dog"
    vector = (await engine.embedder.embed([query], mode="query"))[0]

    async def pool(limit: int) -> int:
        ctx = RetrievalContext(
            bank_id=bank, query=query, tokens=query_tokens(query), embedding=vector, fact_types=("world",),
            limit=limit, filter=tag_filter(None, "any"), settings=engine.settings, db=engine.db.limited(4),
            text_search=engine.text_search, now=datetime.now(UTC), window=TimeWindow(
                datetime(2023, 3, 1, tzinfo=UTC), datetime(2023, 3, 31, 23, 59, 59, tzinfo=UTC)),
        )
        (result,) = await TemporalRetriever(engine.settings).retrieve(ctx)
        return int(result.metadata["pool"])

    # B/5 rows, 60 at the mid budget, never fewer than the ten entry points
    assert [await pool(b) for b in (20, 100, 300, 1000)] == [10, 20, 60, 90]
