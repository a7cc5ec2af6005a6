"""Position within a document, the context stage, and the relevance-first temporal arm."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.errors import RetainError
from hindsight_recall.recall.arms.temporal import PROXIMITY_WEIGHT, relevance
from hindsight_recall.recall.context import lift
from hindsight_recall.retain.ingest import positions
from hindsight_recall.retain.memories import parse_memory
from hindsight_recall.settings import Settings
from hindsight_recall.store.banks import set_bank_config
from hindsight_recall.store.schema import Upgrade, backfill_positions
from hindsight_recall.types import Memory
from sqlalchemy import text

# --- the formula ---------------------------------------------------------------------------------


def test_lift_adds_the_better_neighbour_and_the_documents_best() -> None:
    places = {"a": ("d", 0), "b": ("d", 1), "c": ("d", 2), "x": ("e", 0)}
    added = lift({"a": 1.0, "c": 0.4, "x": 0.2}, places, neighbour=0.3, document=0.2)
    assert added["a"] == pytest.approx(0.2 * 1.0)  # its neighbour b scores 0
    assert added["b"] == pytest.approx(0.3 * 1.0 + 0.2 * 1.0)  # found by no arm: lifted by a
    assert added["c"] == pytest.approx(0.2 * 1.0)
    assert added["x"] == pytest.approx(0.2 * 0.2)  # another document: only its own best


def test_lift_without_places_or_weights_adds_nothing() -> None:
    assert lift({"a": 1.0}, {}, 0.3, 0.2) == {}
    assert lift({"a": 1.0, "b": 0.5}, {"a": ("d", 0), "b": ("d", 1)}, 0.0, 0.0) == {"a": 0.0, "b": 0.0}


# --- positions -----------------------------------------------------------------------------------


def memory(mid: str, **kw: Any) -> Memory:
    return Memory(id=mid, text=mid, **kw)


def test_positions_follow_the_given_order_within_each_document_or_chunk() -> None:
    ms = [memory("a", document_id="d"), memory("x"), memory("b", document_id="d"), memory("c", chunk="t")]
    assert positions(ms, [None, None, None, "chunk-1"]) == [0, None, 1, 0]


def test_an_explicit_position_wins_and_the_count_goes_on_after_it() -> None:
    ms = [memory("a", document_id="d", position=7), memory("b", document_id="d"), memory("c", position=3)]
    assert positions(ms, [None, None, None]) == [7, 8, 3]


def test_positions_continue_a_document_the_bank_already_holds() -> None:
    ms = [memory("a", document_id="d"), memory("b", document_id="e")]
    assert positions(ms, [None, None], {"d": 5}) == [5, 0]


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_position_must_be_a_non_negative_integer(bad: Any) -> None:
    with pytest.raises(RetainError, match="position"):
        parse_memory({"id": "a", "text": "t", "position": bad}, 3)
    assert parse_memory({"id": "a", "text": "t", "position": 0})[1].position == 0


# --- retain and the migration ----------------------------------------------------------------------


async def stored_positions(engine: Engine, bank: str) -> dict[str, int | None]:
    async with engine.db.connect() as conn:
        rows = await conn.execute(text("SELECT external_id, position FROM memory_units WHERE bank_id = :b"),
                                  {"b": bank})
        return {r.external_id: r.position for r in rows}


async def test_retain_stores_positions_and_continues_a_document(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": f"t{i}", "text": f"turn {i}", "document_id": "meeting"} for i in range(3)])
    await engine.retain(bank, [{"id": "t3", "text": "turn 3", "document_id": "meeting"},
                               {"id": "t1", "text": "turn 1, edited", "document_id": "meeting"},
                               {"id": "loose", "text": "no document"}])
    assert await stored_positions(engine, bank) == {"t0": 0, "t1": 4, "t2": 2, "t3": 3, "loose": None}


async def test_migration_nine_orders_old_rows_by_their_ids_numbers(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": f"D1:{i}", "text": f"turn {i}", "chunk": "session one"} for i in (1, 2, 10)]
                        + [{"id": "solo", "text": "no chunk"}])
    async with engine.db.connect() as conn:
        await conn.execute(text("UPDATE memory_units SET position = NULL WHERE bank_id = :b"), {"b": bank})
    async with engine.db.maintenance() as conn:  # other banks' rows keep their places
        await backfill_positions(Upgrade(conn, online=True))
    assert await stored_positions(engine, bank) == {"D1:1": 0, "D1:2": 1, "D1:10": 2, "solo": None}


# --- the stage in recall ---------------------------------------------------------------------------

CHAT = [
    ("q", "Melanie: Where did you go on your holiday in the mountains?"),
    ("a", "Caroline: We stayed three weeks at a lodge near Lake Louise."),
    ("x", "Caroline: I also repainted the kitchen last spring."),
]


def chat(doc: str = "chat-1") -> list[dict[str, Any]]:
    return [{"id": i, "text": t, "document_id": doc} for i, t in CHAT]


async def test_a_neighbour_lifts_the_answer_and_scores_show_it(engine: Engine, bank: str) -> None:
    await engine.retain(bank, chat())
    body = await engine.recall(bank, "holiday in the mountains", trace=True)
    scores = {r["id"]: r["scores"] for r in body["results"]}
    assert scores["a"]["context"] > 0  # lifted by "q", its neighbour that matched
    phase = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "context")
    assert phase["details"]["enabled"] is True


async def test_the_stage_can_be_turned_off_globally_and_per_bank(
    engine: Engine, bank: str, make_settings: Callable[..., Settings]
) -> None:
    await engine.retain(bank, chat())
    async with Engine(make_settings(recall_context_enabled=False)) as off:
        body = await off.recall(bank, "holiday in the mountains")
    assert all(r["scores"]["context"] is None for r in body["results"])
    async with engine.db.connect() as conn:
        await set_bank_config(conn, bank, {"recall_context_neighbour_weight": 0, "recall_context_document_weight": 0})
    body = await engine.recall(bank, "holiday in the mountains")
    assert all(r["scores"]["context"] is None for r in body["results"])


async def test_neighbours_respect_the_tag_filter(engine: Engine, bank: str) -> None:
    memories = chat()
    memories[1]["tags"] = ["private"]
    memories[0]["tags"] = memories[2]["tags"] = ["shared"]
    await engine.retain(bank, memories)
    body = await engine.recall(bank, "holiday in the mountains", tags=["shared"], tags_match="any_strict")
    assert "a" not in {r["id"] for r in body["results"]}


def test_context_settings_are_validated(make_settings: Callable[..., Settings]) -> None:
    from hindsight_recall.errors import ConfigError

    with pytest.raises(ConfigError):
        make_settings(recall_context_neighbour_weight=-0.1)


# --- the temporal arm ranks by relevance ----------------------------------------------------------


def test_relevance_is_similarity_with_proximity_as_a_small_factor() -> None:
    assert relevance(0.6, 1.0) == pytest.approx(0.6 + PROXIMITY_WEIGHT)
    assert relevance(0.8, 0.0) > relevance(0.6, 1.0)  # the more similar row wins, however far from the middle


async def test_temporal_arm_puts_the_relevant_memory_first(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [
        {"id": "middle", "text": "Alice repainted the garden fence.", "occurred_at": "2023-04-15T00:00:00Z"},
        {"id": "edge", "text": "Alice adopted a puppy named Biscuit.", "occurred_at": "2023-03-02T00:00:00Z"},
    ])
    body = await engine.recall(bank, "When did Alice adopt her puppy?", trace=True,
                               temporal_window=("2023-03-01T00:00:00Z", "2023-05-31T23:59:59Z"))
    arm = next(r for r in body["trace"]["retrieval_results"] if r["method_name"] == "temporal")
    assert [r["node_id"] for r in arm["results"]][0] == "edge"


# --- the benchmark's ablations ----------------------------------------------------------------------


async def test_bench_per_arm_scores_every_arm_and_every_ablation_in_one_run(
    make_settings: Callable[..., Settings], tmp_path: Any, bank: str
) -> None:
    import json

    from hindsight_recall.bench.locomo import ABLATIONS, run_locomo

    memories = tmp_path / "memories.jsonl"
    memories.write_text("".join(json.dumps({"bank": bank, **m}) + "\n" for m in chat()))
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"bank": bank, "qid": "q1", "question": "holiday in the mountains",
                                   "category_name": "single-hop", "evidence": ["a"]}) + "\n")
    engine = Engine(make_settings())
    report = await run_locomo(engine, memories, queries, per_arm=True, echo=lambda _: None)
    assert set(ABLATIONS) <= set(report["metrics"]) and "arm:keyword" in report["metrics"]
    assert set(report["variant_latency_ms"]) == set(ABLATIONS)
    assert report["per_category"]["without:context"]["single-hop"]["n"] == 1
    assert engine.settings.recall_context_enabled  # the default settings are back
