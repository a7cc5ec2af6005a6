"""Index slots given back: a deleted bank's slot is free at once and its indexes dropped after the
commit; a bank shrunk below half the threshold is ranked exactly again, and claims a slot when it
grows back; other banks never notice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
from hindsight_recall import Engine
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.settings import Settings
from hindsight_recall.store import ann, banks
from hindsight_recall.testing.service import ServerThread
from hindsight_recall.testing.slots import exact_world, load, nearest_world, synthetic, world_context
from sqlalchemy import text

#: memories from which a bank claims a slot in most tests; it gives the slot back below half of it
THRESHOLD = 20
SLOTS = 2


@contextlib.asynccontextmanager
async def _engine(make: Callable[..., Settings], **overrides: Any) -> AsyncIterator[Engine]:
    """An engine on a schema of its own (its slots and indexes are its own)."""
    settings = make(**{"database_schema": f"reclaim_{uuid.uuid4().hex[:8]}", "vector_index_min_rows": THRESHOLD,
                       "vector_index_slots": SLOTS, **overrides})
    async with Engine(settings) as engine:
        try:
            yield engine
        finally:
            async with engine.db.maintenance() as conn:
                await conn.execute(text(f"DROP SCHEMA {settings.database_schema} CASCADE"))


@pytest.fixture
async def slotted(make_settings: Callable[..., Settings]) -> AsyncIterator[Engine]:
    """Two slots, claimed at 20 memories."""
    async with _engine(make_settings) as engine:
        yield engine


async def _claims(engine: Engine) -> tuple[dict[str, int], dict[str, bool]]:
    """Every bank holding a slot (bank -> slot) and every slot index (name -> valid)."""
    async with engine.db.connect() as conn:
        held = {r.bank_id: r.ann_slot for r in await conn.execute(text(
            "SELECT bank_id, ann_slot FROM banks WHERE ann_slot IS NOT NULL"))}
        return held, await ann.index_state(conn)


async def _rows(engine: Engine, bank_id: str) -> dict[Any, int]:
    """The bank's rows by (``ann``, ``ann_slot``) flags, and its ``indexed`` flag under ``"indexed"``."""
    async with engine.db.connect() as conn:
        flags: dict[Any, int] = {(r.ann, r.ann_slot): r.n for r in await conn.execute(text(
            "SELECT ann, ann_slot, count(*) AS n FROM memory_units WHERE bank_id = :b GROUP BY 1, 2"), {"b": bank_id})}
        flags["indexed"] = await conn.scalar(text("SELECT indexed FROM banks WHERE bank_id = :b"), {"b": bank_id})
    return flags


async def _recalled(engine: Engine, bank_id: str, query: str) -> list[str]:
    """The ids a full recall returns, in order."""
    answer = await engine.recall(bank_id, query, types=["world", "experience"])
    return [r["id"] for r in answer["results"]]


async def _nearest(engine: Engine, bank_id: str, vector: np.ndarray) -> tuple[list[Any], str]:
    """The 10 nearest world rows by the statement the semantic arm runs, and the plan it got."""
    async with engine.db.connect() as conn:
        where = await ann.placement(conn, bank_id)
    return await nearest_world(engine, world_context(engine, bank_id, where, vector), index_only=True)


def _world(memories: list[Any]) -> int:
    return next(i for i, m in enumerate(memories) if m.type == "world")


async def test_a_thousand_banks_come_and_go_and_leave_no_slot_or_index_behind(
    make_settings: Callable[..., Settings],
) -> None:
    # one memory claims a slot; five slots: one for a bank that stays, four for the banks that come and go
    async with _engine(make_settings, vector_index_min_rows=1, vector_index_slots=5) as engine:
        kept, kept_vectors = synthetic(30, seed=61)
        await load(engine, "stays", kept, kept_vectors)
        question = kept[_world(kept)].text
        start = await _claims(engine)
        recalled = await _recalled(engine, "stays", question)
        assert start[0] == {"stays": 1} and set(start[1]) == set(ann.slot_indexes(1)) and all(start[1].values())
        (memory, *_), vectors = synthetic(1, seed=62)
        for round_ in range(250):
            passing = [f"passing-{round_}-{i}" for i in range(4)]
            await engine.retain_many({b: [memory] for b in passing}, embeddings={b: vectors for b in passing},
                                     progress=False)
            held, built = await _claims(engine)
            # each bank got a slot of its own (none went into the shared indexes), with its indexes built
            assert held.pop("stays") == 1 and set(held) == set(passing) and set(held.values()) == {2, 3, 4, 5}
            assert len(built) == 5 * len(ann.slot_indexes(1)) and all(built.values()), (round_, built)
            for bank_id in passing:
                assert await engine.delete_bank(bank_id)
        assert await _claims(engine) == start
        assert await _recalled(engine, "stays", question) == recalled


async def test_a_bank_shrunk_below_half_the_threshold_gives_its_slot_back_and_ranks_the_same(
    slotted: Engine,
) -> None:
    memories, vectors = synthetic(30, seed=63)
    neighbour, neighbour_vectors = synthetic(30, seed=64)
    await load(slotted, "shrinks", memories, vectors)
    await load(slotted, "neighbour", neighbour, neighbour_vectors)
    ids = [m.id for m in memories]
    left = _world(memories[21:]) + 21  # a world memory that stays
    question, probe = memories[left].text, vectors[left]
    next_door = await _recalled(slotted, "neighbour", neighbour[_world(neighbour)].text)
    # down to half the threshold: the slot stays (a bank around the threshold does not flap)
    assert await slotted.forget("shrinks", ids[:20]) == 20
    assert (await _claims(slotted))[0] == {"shrinks": 1, "neighbour": 2}
    # one more, in a transaction of its own (nothing given back yet): ranked through the slot's index
    async with slotted.db.connect() as conn:
        assert await banks.forget(conn, "shrinks", ids[20:21]) == 1
    before, plan = await _nearest(slotted, "shrinks", probe)
    assert "idx_mu_slot1_world" in plan
    recalled = await _recalled(slotted, "shrinks", question)
    await ann.reclaim(slotted.db, slotted.settings, "shrinks")  # what a forget does after its commit
    held, built = await _claims(slotted)
    assert held == {"neighbour": 2} and set(built) == set(ann.slot_indexes(2)) and all(built.values())
    assert await _rows(slotted, "shrinks") == {(False, None): 9, "indexed": False}
    after, plan = await _nearest(slotted, "shrinks", probe)
    assert "idx_mu_slot" not in plan and after == before == await exact_world(slotted, "shrinks", probe)
    assert await _recalled(slotted, "shrinks", question) == recalled and recalled
    assert await _recalled(slotted, "neighbour", neighbour[_world(neighbour)].text) == next_door


async def test_a_forget_gives_the_slot_back_and_a_bank_that_grows_again_claims_one(slotted: Engine) -> None:
    memories, vectors = synthetic(60, seed=65)
    await load(slotted, "b", memories[:30], vectors[:30])
    assert await slotted.forget("b", [m.id for m in memories[:25]]) == 25  # 5 left: below half of 20
    assert await _claims(slotted) == ({}, {})
    assert await _rows(slotted, "b") == {(False, None): 5, "indexed": False}
    # between half the threshold and the threshold: no slot either way
    await load(slotted, "b", memories[30:40], vectors[30:40])
    assert await _claims(slotted) == ({}, {})
    stats = await load(slotted, "b", memories[40:50], vectors[40:50])  # 25: past the threshold
    held, built = await _claims(slotted)
    assert held == {"b": 1} and set(built) == set(ann.slot_indexes(1)) and all(built.values())
    assert await _rows(slotted, "b") == {(False, 1): 25, "indexed": False} and stats.index_build_seconds > 0
    world = _world(memories[40:50]) + 40
    ids, plan = await _nearest(slotted, "b", vectors[world])
    assert "idx_mu_slot1_world" in plan and ids[0] == (await exact_world(slotted, "b", vectors[world]))[0]


async def test_a_deleted_banks_slot_is_free_at_once_and_goes_to_the_next_large_bank(slotted: Engine) -> None:
    (m1, v1), (m2, v2), (m3, v3) = synthetic(30, seed=66), synthetic(30, seed=67), synthetic(30, seed=68)
    await load(slotted, "first", m1, v1)
    await load(slotted, "second", m2, v2)
    second = await _recalled(slotted, "second", m2[_world(m2)].text)
    async with slotted.db.connect() as conn:
        oids = dict((await conn.execute(text(
            "SELECT relname, oid FROM pg_class WHERE relname LIKE 'idx\\_mu\\_slot2\\_%'"))).all())
    async with slotted.db.connect() as conn:  # the delete's own transaction runs no DDL
        assert await banks.delete_bank(conn, "first")
    held, built = await _claims(slotted)
    assert held == {"second": 2} and set(built) == {*ann.slot_indexes(1), *ann.slot_indexes(2)}
    await ann.reclaim(slotted.db, slotted.settings)  # what a delete does after its commit
    held, built = await _claims(slotted)
    assert held == {"second": 2} and set(built) == set(ann.slot_indexes(2))
    stats = await load(slotted, "third", m3, v3)
    held, built = await _claims(slotted)
    assert held == {"second": 2, "third": 1} and len(built) == 6 and all(built.values())
    assert stats.index_build_seconds > 0
    world = _world(m3)
    ids, plan = await _nearest(slotted, "third", v3[world])
    assert "idx_mu_slot1_world" in plan and ids[0] == (await exact_world(slotted, "third", v3[world]))[0]
    assert (await _recalled(slotted, "third", m3[world].text))[0] == m3[world].id
    # the other bank kept its slot, its very indexes and its answers
    async with slotted.db.connect() as conn:
        assert oids == dict((await conn.execute(text(
            "SELECT relname, oid FROM pg_class WHERE relname LIKE 'idx\\_mu\\_slot2\\_%'"))).all())
    assert await _recalled(slotted, "second", m2[_world(m2)].text) == second


async def test_a_slot_claimed_before_its_indexes_are_dropped_keeps_them(slotted: Engine) -> None:
    (m1, v1), (m2, v2) = synthetic(30, seed=69), synthetic(30, seed=70)
    await load(slotted, "first", m1, v1)
    async with slotted.db.connect() as conn:
        assert await banks.delete_bank(conn, "first")
    await load(slotted, "next", m2, v2)  # claims slot 1 while its old indexes are still there
    await ann.reclaim(slotted.db, slotted.settings)
    held, built = await _claims(slotted)
    assert held == {"next": 1} and set(built) == set(ann.slot_indexes(1)) and all(built.values())
    world = _world(m2)
    ids, plan = await _nearest(slotted, "next", v2[world])
    assert "idx_mu_slot1_world" in plan and ids == await exact_world(slotted, "next", v2[world])


async def test_a_slot_claimed_while_its_indexes_are_dropped_gets_them_built_again(
    slotted: Engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (m1, v1), (m2, v2) = synthetic(30, seed=71), synthetic(30, seed=72)
    await load(slotted, "first", m1, v1)
    async with slotted.db.connect() as conn:
        assert await banks.delete_bank(conn, "first")
        oids = set((await conn.execute(text(
            "SELECT oid FROM pg_class WHERE relname LIKE 'idx\\_mu\\_slot1\\_%'"))).scalars())
    # the drop read the slots held before "next" claimed slot 1, whose build then found its indexes valid
    await load(slotted, "next", m2, v2)
    held_now, stale = ann._held, [set[int]()]

    async def read_before_the_claim(conn: Any) -> set[int]:
        return stale.pop() if stale else await held_now(conn)

    monkeypatch.setattr(ann, "_held", read_before_the_claim)
    async with ann.maintenance_turn(slotted.db) as conn:
        assert set(await ann._drop_orphans(conn)) == set(ann.slot_indexes(1))
    monkeypatch.undo()
    held, built = await _claims(slotted)
    assert held == {"next": 1} and set(built) == set(ann.slot_indexes(1)) and all(built.values())
    async with slotted.db.connect() as conn:
        assert oids.isdisjoint((await conn.execute(text(
            "SELECT oid FROM pg_class WHERE relname LIKE 'idx\\_mu\\_slot1\\_%'"))).scalars())
    world = _world(m2)
    ids, plan = await _nearest(slotted, "next", v2[world])
    assert "idx_mu_slot1_world" in plan and ids == await exact_world(slotted, "next", v2[world])


async def test_a_zero_threshold_never_gives_a_slot_back(make_settings: Callable[..., Settings]) -> None:
    async with _engine(make_settings, vector_index_min_rows=0) as engine:
        memories, vectors = synthetic(3, seed=78)
        await load(engine, "b", memories, vectors)
        assert await engine.forget("b", [m.id for m in memories]) == 3
        held, built = await _claims(engine)
        assert held == {"b": 1} and set(built) == set(ann.slot_indexes(1))


async def test_a_slot_taken_before_the_slots_were_turned_off_is_still_given_back(
    make_settings: Callable[..., Settings],
) -> None:
    async with _engine(make_settings) as engine:
        memories, vectors = synthetic(30, seed=73)
        await load(engine, "b", memories, vectors)
        settings = engine.settings.model_copy(update={"vector_index_slots": 0})
        async with Engine(settings) as restarted:
            assert await restarted.forget("b", [m.id for m in memories[:25]]) == 25
            assert await _claims(restarted) == ({}, {})


async def test_on_citus_nothing_is_given_back(slotted: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    memories, vectors = synthetic(30, seed=74)
    await load(slotted, "b", memories, vectors)
    await load(slotted, "gone", *synthetic(30, seed=75))
    before = await _claims(slotted)
    monkeypatch.setattr(slotted.db, "citus", True)  # Citus uses no slots; the guard leaves the tables alone
    assert await slotted.forget("b", [m.id for m in memories[:25]]) == 25
    async with slotted.db.connect() as conn:
        assert await banks.delete_bank(conn, "gone")
    await ann.reclaim(slotted.db, slotted.settings)
    assert await _claims(slotted) == ({"b": 1}, before[1])


async def test_a_failed_drop_is_logged_and_the_next_call_drops_what_was_left(
    slotted: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from sqlalchemy.exc import OperationalError

    async def lost(conn: Any) -> list[str]:
        raise OperationalError("DROP INDEX CONCURRENTLY", {}, Exception("server closed the connection"))

    await load(slotted, "gone", *synthetic(30, seed=76))
    monkeypatch.setattr(ann, "_drop_orphans", lost)
    with caplog.at_level(logging.WARNING, logger="hindsight_recall.store.ann"):
        assert await slotted.delete_bank("gone")  # the delete is committed: it succeeds
    assert "the next delete, bulk load or start does it" in caplog.text
    held, built = await _claims(slotted)
    assert held == {} and set(built) == set(ann.slot_indexes(1))
    monkeypatch.undo()
    await ann.reclaim(slotted.db, slotted.settings)
    assert await _claims(slotted) == ({}, {})


async def test_the_services_deletes_give_slots_back(make_settings: Callable[..., Settings]) -> None:
    memories, vectors = synthetic(24, seed=77)
    memories = [replace(m, type="world", document_id="most" if i < 14 else "rest") for i, m in enumerate(memories)]
    typed = [replace(m, type="experience" if i < 4 else "world") for i, m in enumerate(memories)]
    async with _engine(make_settings, vector_index_slots=4) as engine:
        for bank_id, ms in {"documents": memories, "typed": typed, "whole": memories}.items():
            await load(engine, bank_id, ms, vectors)
        assert set((await _claims(engine))[0]) == {"documents", "typed", "whole"}
        stack = contextlib.ExitStack()
        url = (await asyncio.to_thread(stack.enter_context, ServerThread(engine.settings))).url
        try:
            async with httpx.AsyncClient(headers=EXTRAS, base_url=f"{url}/v1/default/banks", timeout=120) as http:
                # a document's memories deleted: 10 left, half the threshold, and the slot stays
                assert (await http.delete("/documents/documents/most")).status_code == 200
                assert set((await _claims(engine))[0]) == {"documents", "typed", "whole"}
                # one memory invalidated: 9 left, the slot is given back
                invalidated = await http.patch(f"/documents/memories/{memories[-1].id}", json={"state": "invalidated"})
                assert invalidated.status_code == 200
                assert set((await _claims(engine))[0]) == {"typed", "whole"}
                # the memories of a type cleared: 4 left
                assert (await http.delete("/typed/memories", params={"type": "world"})).json()["deleted_count"] == 20
                # a bank deleted
                assert (await http.delete("/whole")).status_code == 200
        finally:
            await asyncio.to_thread(stack.close)
        assert await _claims(engine) == ({}, {})
        assert await _rows(engine, "documents") == {(False, None): 9, "indexed": False}
        assert await _rows(engine, "typed") == {(False, None): 4, "indexed": False}
