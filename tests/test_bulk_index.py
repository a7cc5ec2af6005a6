"""A large bank's own HNSW indexes (slots): claimed at the threshold, built once after a bulk load,
rebuilt by a large load, repaired after an interrupted build, and searched exactly meanwhile."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hindsight_recall import Engine
from hindsight_recall.settings import Settings
from hindsight_recall.store import ann, banks
from hindsight_recall.testing.slots import exact_world, load, nearest_world, synthetic, world_context
from sqlalchemy import text

THRESHOLD = 150
SLOTS = 2


@pytest.fixture
async def slotted(make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Engine]:
    """An engine on a schema of its own (its slots are its own), two slots, a low threshold; loads of
    100 rows or more count as bulk."""
    monkeypatch.setattr(ann, "REBUILD_MIN_ROWS", 100)
    settings = make_settings(database_schema=f"slots_{uuid.uuid4().hex[:8]}", vector_index_min_rows=THRESHOLD,
                             vector_index_slots=SLOTS)
    async with Engine(settings) as engine:
        yield engine
        async with engine.db.maintenance() as conn:
            await conn.execute(text(f"DROP SCHEMA {settings.database_schema} CASCADE"))


async def _state(engine: Engine, bank_id: str) -> tuple[ann.Placement, dict[Any, int], dict[str, bool]]:
    async with engine.db.connect() as conn:
        where = await ann.placement(conn, bank_id)
        flags = {(r.ann, r.ann_slot): r.n for r in await conn.execute(text(
            "SELECT ann, ann_slot, count(*) AS n FROM memory_units WHERE bank_id = :b GROUP BY 1, 2"), {"b": bank_id})}
        built = await ann.index_state(conn)
    return where, flags, built


async def test_bulk_load_past_the_threshold_claims_a_slot_and_builds_its_index_after(slotted: Engine) -> None:
    memories, vectors = synthetic(400, seed=31)
    stats = await load(slotted, "big", memories, vectors)
    where, flags, built = await _state(slotted, "big")
    assert where == ann.Placement(slot=1)
    assert flags == {(False, 1): 400}
    assert all(built.get(name) for name in ann.slot_indexes(1)), built
    assert stats.index_build_seconds > 0 and stats.as_json()["index_build_seconds"] > 0
    # the recall statement's predicate is the slot index's: the planner can serve it from the index
    world = next(i for i, m in enumerate(memories) if m.type == "world")
    ctx = world_context(slotted, "big", where, vectors[world])
    ids, plan = await nearest_world(slotted, ctx, index_only=True)
    assert "idx_mu_slot1_world" in plan and ids and ids[0] == await _exact_first(slotted, "big", vectors[world])
    assert (await slotted.recall("big", memories[world].text, types=["world"]))["results"]


async def _exact_first(engine: Engine, bank_id: str, vector: np.ndarray) -> Any:
    return (await exact_world(engine, bank_id, vector))[0]


async def test_rows_are_found_exactly_while_the_slot_has_no_valid_index(slotted: Engine) -> None:
    memories, vectors = synthetic(300, seed=32)
    await load(slotted, "b", memories, vectors)
    where, _, _ = await _state(slotted, "b")
    world = next(i for i, m in enumerate(memories) if m.type == "world")
    ctx = world_context(slotted, "b", where, vectors[world])
    async with slotted.db.maintenance() as conn:  # as in a rebuild, or a build interrupted half-way
        await conn.execute(text("DROP INDEX idx_mu_slot1_world"))
    ids, plan = await nearest_world(slotted, ctx)
    assert "idx_mu_slot1_world" not in plan and ids == await exact_world(slotted, "b", vectors[world])


async def test_an_invalid_or_missing_slot_index_is_rebuilt_at_start_and_orphans_dropped(slotted: Engine) -> None:
    memories, vectors = synthetic(300, seed=33)
    await load(slotted, "keep", memories, vectors)
    await load(slotted, "gone", *synthetic(200, seed=34))
    async with slotted.db.maintenance() as conn:
        # an interrupted CREATE INDEX CONCURRENTLY leaves the index INVALID
        await conn.execute(text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
                                "CAST('idx_mu_slot1_world' AS regclass)"))
        await conn.execute(text("DROP INDEX idx_mu_slot1_experience"))
    async with slotted.db.connect() as conn:
        await banks.delete_bank(conn, "gone")  # slot 2 is free; its indexes are left behind
    async with slotted.db.connect() as conn:
        before = await ann.index_state(conn)
    assert before["idx_mu_slot1_world"] is False and "idx_mu_slot1_experience" not in before
    assert "idx_mu_slot2_world" in before
    await ann.repair(slotted.db)  # what the next start does
    async with slotted.db.connect() as conn:
        after = await ann.index_state(conn)
    assert after == {name: True for name in ann.slot_indexes(1)}


async def test_an_interrupted_build_is_repaired_by_the_next_load_into_the_bank(slotted: Engine) -> None:
    memories, vectors = synthetic(300, seed=35)
    await load(slotted, "b", memories[:250], vectors[:250])
    async with slotted.db.maintenance() as conn:
        await conn.execute(text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
                                "CAST('idx_mu_slot1_world' AS regclass)"))
    stats = await load(slotted, "b", memories[250:], vectors[250:])
    _, _, built = await _state(slotted, "b")
    assert stats.index_build_seconds > 0 and all(built[name] for name in ann.slot_indexes(1))


async def test_small_retain_into_an_indexed_bank_enters_its_index_without_a_rebuild(slotted: Engine) -> None:
    memories, vectors = synthetic(420, seed=36)
    await load(slotted, "b", memories[:400], vectors[:400])
    async with slotted.db.connect() as conn:
        oids = dict((await conn.execute(text(
            "SELECT relname, oid FROM pg_class WHERE relname LIKE 'idx\\_mu\\_slot1\\_%'"))).all())
    stats = await load(slotted, "b", memories[400:], vectors[400:])
    where, flags, built = await _state(slotted, "b")
    async with slotted.db.connect() as conn:
        after = dict((await conn.execute(text(
            "SELECT relname, oid FROM pg_class WHERE relname LIKE 'idx\\_mu\\_slot1\\_%'"))).all())
    assert stats.index_build_seconds == 0 and after == oids  # the same indexes: rows entered them
    assert where.slot == 1 and sum(flags.values()) == 420 and all(built.values())
    new = next(i for i in range(400, 420) if memories[i].type == "world")
    ids, plan = await nearest_world(slotted, world_context(slotted, "b", where, vectors[new]), index_only=True)
    assert "idx_mu_slot1_world" in plan and ids[0] == await _exact_first(slotted, "b", vectors[new])


async def test_a_large_load_into_an_indexed_bank_rebuilds_its_indexes(slotted: Engine) -> None:
    memories, vectors = synthetic(600, seed=37)
    await load(slotted, "b", memories[:300], vectors[:300])
    async with slotted.db.connect() as conn:
        oid = await conn.scalar(text("SELECT CAST('idx_mu_slot1_world' AS regclass)::oid"))
    stats = await load(slotted, "b", memories[300:], vectors[300:])
    async with slotted.db.connect() as conn:
        rebuilt = await conn.scalar(text("SELECT CAST('idx_mu_slot1_world' AS regclass)::oid"))
    _, flags, built = await _state(slotted, "b")
    assert rebuilt != oid and stats.index_build_seconds > 0
    assert sum(flags.values()) == 600 and all(built[name] for name in ann.slot_indexes(1))


async def test_concurrent_loads_of_two_banks_get_a_slot_each_and_the_next_bank_the_shared_index(
    slotted: Engine,
) -> None:
    (m1, v1), (m2, v2), (m3, v3) = synthetic(300, seed=38), synthetic(300, seed=39), synthetic(200, seed=40)
    await asyncio.gather(load(slotted, "one", m1, v1), load(slotted, "two", m2, v2))
    one, _, _ = await _state(slotted, "one")
    two, _, built = await _state(slotted, "two")
    assert {one.slot, two.slot} == {1, 2} and len(built) == 2 * len(ann.slot_indexes(1)) and all(built.values())
    await load(slotted, "three", m3, v3)  # every slot is taken
    three, flags, _ = await _state(slotted, "three")
    assert three == ann.Placement(shared=True) and flags == {(True, None): 200}
    for bank_id, (m, v) in {"one": (m1, v1), "two": (m2, v2), "three": (m3, v3)}.items():
        where, _, _ = await _state(slotted, bank_id)
        world = next(i for i, x in enumerate(m) if x.type == "world")
        ids, _ = await nearest_world(slotted, world_context(slotted, bank_id, where, v[world]))
        assert ids and ids[0] == await _exact_first(slotted, bank_id, v[world])


async def test_a_bank_crossing_the_threshold_by_small_retains_claims_a_slot(slotted: Engine) -> None:
    memories, vectors = synthetic(200, seed=41)
    await load(slotted, "b", memories[:100], vectors[:100])
    small, _, _ = await _state(slotted, "b")
    stats = await load(slotted, "b", memories[100:], vectors[100:])
    where, flags, built = await _state(slotted, "b")
    assert small == ann.Placement() and where == ann.Placement(slot=1)
    assert flags == {(False, 1): 200} and stats.index_build_seconds > 0 and all(built.values())


async def test_no_slots_puts_a_large_bank_into_the_shared_indexes(
    make_settings: Callable[..., Settings],
) -> None:
    schema = f"noslots_{uuid.uuid4().hex[:8]}"
    async with Engine(make_settings(database_schema=schema, vector_index_min_rows=50,
                                    vector_index_slots=0)) as engine:
        try:
            stats = await load(engine, "b", *synthetic(120, seed=42))
            where, _, built = await _state(engine, "b")
            assert where == ann.Placement(shared=True) and built == {} and stats.index_build_seconds == 0
        finally:
            async with engine.db.maintenance() as conn:
                await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


def test_placement_predicates() -> None:
    assert ann.Placement().predicate() == ""
    assert ann.Placement(shared=True).predicate("m") == "m.ann"
    assert ann.Placement(slot=3).predicate() == "ann_slot = 3"
    assert set(ann.slot_indexes(2)) == {"idx_mu_slot2_world", "idx_mu_slot2_experience", "idx_mu_slot2_observation"}


async def test_a_failed_bulk_load_builds_again_the_indexes_it_dropped(slotted: Engine) -> None:
    from hindsight_recall.errors import RetainError

    memories, vectors = synthetic(600, seed=43)
    await load(slotted, "b", memories[:300], vectors[:300])
    broken = [*memories[300:-1], replace(memories[-1], causes=("not-in-the-bank",))]
    with pytest.raises(RetainError, match="not-in-the-bank"):
        await load(slotted, "b", broken, vectors[300:])
    where, flags, built = await _state(slotted, "b")
    assert where.slot == 1 and flags == {(False, 1): 300} and all(built[name] for name in ann.slot_indexes(1))


async def test_a_large_bank_recalled_alone_spreads_its_arms_over_a_statement_per_fact_type(
    slotted: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hindsight_recall.recall import pipeline

    memories, vectors = synthetic(THRESHOLD + 50, seed=5)
    await load(slotted, "big", memories, vectors)
    question = memories[0].text

    async def recall() -> tuple[list[str], dict[str, Any]]:
        body = await slotted.recall("big", question, budget="mid", trace=True)
        phase = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "parallel_retrieval")
        return [r["id"] for r in body["results"]], phase["details"]

    alone, details = await recall()
    assert details["composed"] == ["semantic", "graph"] and details["spread_by_fact_type"] is True
    monkeypatch.setattr(pipeline, "_running", 1)  # another recall is running: the cores are busy
    busy, details = await recall()
    assert details["spread_by_fact_type"] is False
    assert busy == alone and alone
