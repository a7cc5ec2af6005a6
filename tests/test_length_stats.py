"""Per-bank length statistics stay exact through every write path, per bank, under concurrent writers."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from hindsight_recall import Engine
from hindsight_recall.store import length_stats
from sqlalchemy import text

FIRST = [
    {"id": "a", "text": "Alice glazed a celadon bowl in the kiln.", "type": "world"},  # alic glaze celadon bowl kiln
    {"id": "b", "text": "Alice walked to the pottery studio.", "type": "world"},  # alic walk potteri studio
    {"id": "c", "text": "Bob fired the kiln twice.", "type": "experience"},  # bob fire kiln twice
    {"id": "e", "text": "The and of it.", "type": "world"},  # stopwords only: length 0, still a memory
]


async def _kept(engine: Engine, bank: str) -> dict[str, tuple[int, int, int]]:
    async with engine.db.connect() as conn:
        rows = await conn.execute(text(
            "SELECT fact_type, memories, length_sum, length_squares FROM length_stats WHERE bank_id = :b"
        ), {"b": bank})
        return {r.fact_type: (r.memories, r.length_sum, r.length_squares) for r in rows}


async def _drift(engine: Engine, bank: str | None) -> list[Any]:
    async with engine.db.connect() as conn:
        return await length_stats.drift(conn, bank)


def _bank() -> str:
    return f"lengths-{uuid.uuid4().hex[:10]}"


async def test_retain_update_forget_keep_the_sums_exact(engine: Engine) -> None:
    bank = _bank()
    await engine.retain(bank, FIRST)
    # the length of a memory is its distinct lexemes: 5, 4 and 0 in world, 4 in experience
    assert await _kept(engine, bank) == {"world": (3, 9, 41), "experience": (1, 4, 16)}
    assert await _drift(engine, bank) == []
    # an update changes a memory's words and its fact type; a new memory joins
    await engine.retain(bank, [
        {"id": "b", "text": "Bob walked home.", "type": "experience"},  # bob walk home
        {"id": "f", "text": "Alice bought clay.", "type": "world"},  # alic bought clay
    ])
    assert await _kept(engine, bank) == {"world": (3, 8, 34), "experience": (2, 7, 25)}
    await engine.retain(bank, [{"id": "f", "text": "Alice bought clay.", "type": "world"}])  # the same again
    assert await _kept(engine, bank) == {"world": (3, 8, 34), "experience": (2, 7, 25)}
    assert await engine.forget(bank, ["a", "c", "missing"]) == 2
    assert await _kept(engine, bank) == {"world": (2, 3, 9), "experience": (1, 3, 9)}
    assert await _drift(engine, bank) == []


async def test_delete_bank_removes_its_sums_and_no_other_bank_sees_them(engine: Engine) -> None:
    mine, other = _bank(), _bank()
    await engine.retain(mine, FIRST)
    await engine.retain(other, [{"id": f"p{i}", "text": "pottery kiln " * 50 + str(i)} for i in range(30)])
    before = await _kept(engine, mine)
    assert await engine.delete_bank(other)
    assert await _kept(engine, other) == {}
    assert await _kept(engine, mine) == before
    assert await _drift(engine, mine) == []


async def test_concurrent_writers_into_one_bank_neither_deadlock_nor_drift(engine: Engine) -> None:
    bank = _bank()
    words = ["kiln", "glaze", "clay", "bowl", "vase", "wheel", "slip", "bisque"]

    def batch(k: int) -> list[dict[str, Any]]:
        # overlapping ids, lengths and fact types, in different orders per writer
        return [{"id": f"m{(k * 7 + i) % 40}", "text": " ".join(words[: 1 + (i + k) % 8]),
                 "type": ("world", "experience")[(i + k) % 2]} for i in range(20)]

    await engine.retain(bank, batch(0))
    jobs = [engine.retain(bank, batch(k)) for k in range(1, 5)]
    jobs += [engine.forget(bank, [f"m{i}" for i in range(0, 40, 3)]), engine.forget(bank, ["m1", "m2", "m5"])]
    results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), timeout=180)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert await _drift(engine, bank) == []


async def test_the_sums_are_read_with_the_bank(engine: Engine) -> None:
    """A recall reads them in the same statement as the bank's row: no read of its own."""
    from hindsight_recall.store import banks

    bank = _bank()
    await engine.retain(bank, FIRST)
    async with engine.db.connect() as conn:
        state = await banks.bank_state(conn, bank)
        assert state is not None and state.lengths == {"world": (3, 9, 41), "experience": (1, 4, 16)}
        await banks.set_bank_config(conn, f"{bank}-empty", {})
        empty = await banks.bank_state(conn, f"{bank}-empty")
        assert empty is not None and empty.lengths == {}


async def test_a_backend_without_term_statistics_writes_none(engine: Engine) -> None:
    bank = _bank()
    await engine.retain(bank, FIRST[:1])
    quiet = SimpleNamespace(name="quiet")  # no keeps_term_stats: its search vector may not be a tsvector
    async with engine.db.connect() as conn:
        ids = list((await conn.execute(text("SELECT id FROM memory_units WHERE bank_id = :b"), {"b": bank})).scalars())
        await length_stats.count_in(conn, quiet, bank, ids)
        await length_stats.count_out(conn, quiet, bank, ids)
    assert await _kept(engine, bank) == {"world": (1, 5, 25)}
