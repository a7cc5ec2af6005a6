"""Per-bank term statistics stay exact through every write path, per bank, under concurrent writers."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from hindsight_recall import Engine
from hindsight_recall.store import term_stats
from sqlalchemy import text

FIRST = [
    {"id": "a", "text": "Alice glazed a celadon bowl in the kiln.", "type": "world"},
    {"id": "b", "text": "Alice walked to the pottery studio.", "type": "world"},
    {"id": "c", "text": "Bob fired the kiln twice.", "type": "experience"},
    {"id": "d", "text": "Alice likes pottery.", "type": "observation", "sources": ["a"]},
    {"id": "e", "text": "The and of it.", "type": "world"},  # stopwords only: no lexeme, still a memory
]


async def _drift(engine: Engine, bank: str) -> list[Any]:
    async with engine.db.connect() as conn:
        return await term_stats.drift(conn, bank)


async def _kept(engine: Engine, bank: str) -> dict[tuple[str, str], int]:
    async with engine.db.connect() as conn:
        rows = await conn.execute(text(
            "SELECT fact_type, lexeme, df FROM term_stats WHERE bank_id = :b AND df <> 0"
        ), {"b": bank})
        return {(r.fact_type, r.lexeme): r.df for r in rows}


def _bank() -> str:
    return f"stats-{uuid.uuid4().hex[:10]}"


async def test_retain_update_forget_and_replace_keep_the_counts_exact(engine: Engine) -> None:
    bank = _bank()
    await engine.retain(bank, FIRST)
    kept = await _kept(engine, bank)
    assert kept[("world", "")] == 3 and kept[("experience", "")] == 1 and kept[("observation", "")] == 1
    assert kept[("world", "alic")] == 2 and kept[("world", "kiln")] == 1 and kept[("experience", "kiln")] == 1
    assert await _drift(engine, bank) == []
    # an update changes a memory's words and its fact type; a new memory joins
    await engine.retain(bank, [
        {"id": "b", "text": "Bob walked home.", "type": "experience"},
        {"id": "f", "text": "Alice bought clay.", "type": "world"},
    ])
    kept = await _kept(engine, bank)
    assert kept[("world", "")] == 3 and kept[("experience", "")] == 2
    assert ("world", "studio") not in kept and kept[("experience", "walk")] == 1
    assert await _drift(engine, bank) == []
    # the same memory twice over: an identical rewrite changes nothing
    await engine.retain(bank, [{"id": "f", "text": "Alice bought clay.", "type": "world"}])
    assert await _kept(engine, bank) == kept
    assert await engine.forget(bank, ["a", "c", "missing"]) == 2
    assert await _drift(engine, bank) == []
    kept = await _kept(engine, bank)
    assert ("world", "kiln") not in kept and ("experience", "kiln") not in kept and kept[("world", "")] == 2


async def test_a_replaced_document_keeps_the_counts_exact(engine: Engine) -> None:
    """A document sent again over HTTP: its memories are rewritten and the ones it lost are forgotten."""
    from hindsight_recall.service.items import build_memories
    from hindsight_recall.service.schemas import RetainBody

    bank = _bank()

    async def send(contents: list[str]) -> None:
        body = RetainBody(items=[{"content": c, "document_id": "diary"} for c in contents])
        memories, replaced = build_memories(bank, body, {})
        await engine.retain(bank, memories, replace_documents=replaced)

    await send(["Alice glazed a bowl.", "Bob fired the kiln.", "Carol threw a vase."])
    await send(["Alice glazed a plate."])
    assert await _drift(engine, bank) == []
    kept = await _kept(engine, bank)
    assert sum(df for (_, lexeme), df in kept.items() if lexeme == "") == 1
    assert not any(lexeme in ("kiln", "vase") for _, lexeme in kept)


async def test_delete_bank_removes_its_counts_and_no_other_bank_sees_them(engine: Engine) -> None:
    mine, other = _bank(), _bank()
    await engine.retain(mine, FIRST)
    await engine.retain(other, [{"id": f"p{i}", "text": "pottery pottery kiln"} for i in range(30)])
    mine_before = await _kept(engine, mine)
    assert mine_before[("world", "potteri")] == 1  # the other bank's 30 never count here
    assert await engine.delete_bank(other)
    assert await _kept(engine, other) == {}
    assert await _kept(engine, mine) == mine_before
    assert await _drift(engine, mine) == []


async def test_concurrent_writers_into_one_bank_neither_deadlock_nor_drift(engine: Engine) -> None:
    bank = _bank()
    words = ["kiln", "glaze", "clay", "bowl", "vase", "wheel", "slip", "bisque"]

    def batch(k: int) -> list[dict[str, Any]]:
        # overlapping ids and words, in different orders per writer
        return [{"id": f"m{(k * 7 + i) % 40}", "text": " ".join(words[(i + k) % 8 :] + words[: (i + k) % 8]),
                 "type": ("world", "experience")[(i + k) % 2]} for i in range(20)]

    await engine.retain(bank, batch(0))
    jobs = [engine.retain(bank, batch(k)) for k in range(1, 5)]
    jobs += [engine.forget(bank, [f"m{i}" for i in range(0, 40, 3)]), engine.forget(bank, ["m1", "m2", "m5"])]
    results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), timeout=180)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert await _drift(engine, bank) == []


async def test_a_backend_without_statistics_writes_none(engine: Engine) -> None:
    bank = _bank()
    await engine.retain(bank, FIRST[:1])
    quiet = SimpleNamespace(name="quiet")  # no keeps_term_stats: a backend that never reads them
    async with engine.db.connect() as conn:
        before = await conn.scalar(text("SELECT sum(df) FROM term_stats WHERE bank_id = :b"), {"b": bank})
        ids = list((await conn.execute(text("SELECT id FROM memory_units WHERE bank_id = :b"), {"b": bank})).scalars())
        await term_stats.count_in(conn, quiet, bank, ids)
        await term_stats.count_out(conn, quiet, bank, ids)
        after = await conn.scalar(text("SELECT sum(df) FROM term_stats WHERE bank_id = :b"), {"b": bank})
    assert before == after and term_stats.keeps(engine.text_search)
