"""Loads and deletes of different banks run at once without deadlocks, and none of them runs DDL."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import numpy as np
from hindsight_recall import Engine
from hindsight_recall.bench.synthetic import generate
from hindsight_recall.store import banks
from sqlalchemy import text

#: relations other than temporary ones: a retain or delete that adds or drops any ran DDL
CATALOG = (
    "SELECT count(*), coalesce(sum(oid::bigint), 0) FROM pg_class "
    "WHERE relpersistence <> 't' AND relnamespace = current_schema()::regnamespace"
)


def _banks(count: int, per_bank: int, seed: int) -> dict[str, tuple[list, np.ndarray]]:
    data = generate(count * per_bank, seed=seed)
    prefix = uuid.uuid4().hex[:8]
    out = {}
    for k in range(count):
        part = data.memories[k * per_bank : (k + 1) * per_bank]
        inside = {m.id for m in part}
        part = [replace(m, causes=tuple(c for c in m.causes if c in inside),
                        source_ids=tuple(s for s in m.source_ids if s in inside)) for m in part]
        out[f"conc-{prefix}-{k}"] = (part, data.vectors[k * per_bank : (k + 1) * per_bank])
    return out


async def _load(engine: Engine, bank_id: str, memories: list, vectors: np.ndarray) -> None:
    await engine.retain_many({bank_id: memories}, embeddings={bank_id: vectors}, progress=False)


async def _delete(engine: Engine, bank_id: str) -> bool:
    async with engine.db.connect() as conn:
        return await banks.delete_bank(conn, bank_id)


async def test_concurrent_first_loads_and_a_delete_all_succeed(engine: Engine) -> None:
    data = _banks(5, 120, seed=11)
    names = list(data)
    victim = names[4]
    await _load(engine, victim, *data[victim])
    jobs = [_load(engine, b, *data[b]) for b in names[:4]] + [_delete(engine, victim)]
    results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), timeout=120)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert results[4] is True
    async with engine.db.connect() as conn:
        counts = dict((await conn.execute(text(
            "SELECT bank_id, count(*) FROM memory_units WHERE bank_id = ANY(:b) GROUP BY bank_id"
        ), {"b": names})).all())
    assert counts == {b: 120 for b in names[:4]}
    for b in names[:4]:
        assert (await engine.recall(b, data[b][0][0].text))["results"]


async def test_retain_and_delete_run_no_ddl(engine: Engine) -> None:
    data = _banks(2, 60, seed=12)
    first, second = data
    seen = [await _catalog(engine)]
    await _load(engine, first, *data[first])  # a new bank
    seen.append(await _catalog(engine))
    await _load(engine, first, *data[second])  # an existing bank
    seen.append(await _catalog(engine))
    assert await _delete(engine, first)
    seen.append(await _catalog(engine))
    assert seen == [seen[0]] * 4


async def _catalog(engine: Engine) -> tuple[int, int]:
    async with engine.db.connect() as conn:
        count, total = (await conn.execute(text(CATALOG))).one()
    return int(count), int(total)


async def test_bank_reaching_the_threshold_moves_into_the_shared_index(engine: Engine, monkeypatch) -> None:
    monkeypatch.setattr(engine._ingestor.settings, "vector_index_min_rows", 100)
    monkeypatch.setattr(engine._ingestor.settings, "vector_index_slots", 0)  # slots: test_bulk_index.py
    data = _banks(1, 160, seed=13)
    (bank_id, (memories, vectors)), = data.items()
    await _load(engine, bank_id, memories[:60], vectors[:60])
    query = next(m.text for m in memories if m.type == "world")
    small = [r["id"] for r in (await engine.recall(bank_id, query, types=["world"]))["results"]]
    async with engine.db.connect() as conn:
        state = (await conn.execute(text("SELECT indexed FROM banks WHERE bank_id = :b"), {"b": bank_id})).scalar()
    assert state is False
    await _load(engine, bank_id, memories[60:], vectors[60:])
    async with engine.db.connect() as conn:
        state = (await conn.execute(text("SELECT indexed FROM banks WHERE bank_id = :b"), {"b": bank_id})).scalar()
        flags = dict((await conn.execute(text(
            "SELECT ann, count(*) FROM memory_units WHERE bank_id = :b GROUP BY ann"), {"b": bank_id})).all())
    assert state is True and flags == {True: 160}
    assert small and (await engine.recall(bank_id, query, types=["world"]))["results"]


async def test_threshold_zero_indexes_a_new_bank_at_once(engine: Engine, monkeypatch) -> None:
    monkeypatch.setattr(engine._ingestor.settings, "vector_index_min_rows", 0)
    monkeypatch.setattr(engine._ingestor.settings, "vector_index_slots", 0)
    (bank_id, (memories, vectors)), = _banks(1, 20, seed=14).items()
    await _load(engine, bank_id, memories, vectors)
    async with engine.db.connect() as conn:
        state = (await conn.execute(text("SELECT indexed FROM banks WHERE bank_id = :b"), {"b": bank_id})).scalar()
        flagged = (await conn.execute(text(
            "SELECT bool_and(ann) FROM memory_units WHERE bank_id = :b"), {"b": bank_id})).scalar()
    assert state is True and flagged is True
    assert (await engine.recall(bank_id, memories[0].text))["results"]


async def test_upgrade_drops_per_bank_indexes(engine: Engine) -> None:
    from hindsight_recall.store import schema

    async with engine.db.connect() as conn:
        # what schema 6 left behind for a bank: a partial index named after it
        await conn.execute(text("CREATE INDEX idx_mu_emb_worl_0123456789abcdef ON memory_units (bank_id) "
                                "WHERE bank_id = 'an old bank'"))
        await conn.execute(text("DELETE FROM hindsight_migrations WHERE version = 8"))
    await schema.migrate(engine.db, engine.embedder.dimensions(), engine.text_search)
    async with engine.db.connect() as conn:
        left = await conn.scalar(text("SELECT count(*) FROM pg_indexes WHERE left(indexname, 11) = 'idx_mu_emb_' "
                                      "AND schemaname = current_schema()"))
        done = await conn.scalar(text("SELECT count(*) FROM hindsight_migrations WHERE version = 8"))
    assert left == 0 and done == 1
