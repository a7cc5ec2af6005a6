"""What the tests of per-bank HNSW slots share: synthetic banks, and the semantic arm's statement
run by hand with the plan it got, beside an exact search."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy import text

from ..protocols import RetrievalContext
from ..recall.filters import tag_filter
from ..store import ann
from .synthetic import generate


def synthetic(n: int, seed: int) -> tuple[list[Any], np.ndarray]:
    """``n`` synthetic memories without references (tests load and remove them in parts) and their vectors."""
    data = generate(n, seed=seed)
    return [replace(m, causes=(), source_ids=()) for m in data.memories], data.vectors


async def load(engine: Any, bank_id: str, memories: list[Any], vectors: np.ndarray) -> Any:
    """One bulk retain with the given vectors."""
    return await engine.retain_many({bank_id: memories}, embeddings={bank_id: vectors}, progress=False)


def world_context(engine: Any, bank_id: str, where: ann.Placement, vector: np.ndarray) -> RetrievalContext:
    """A retrieval context for the bank's world memories nearest ``vector``, placed as ``where`` says."""
    return RetrievalContext(
        bank_id=bank_id, query="q", tokens=(), embedding=vector.tolist(), fact_types=("world",), limit=10,
        filter=tag_filter(None, "any"), settings=engine.settings, db=engine.db.limited(1),
        text_search=engine.text_search, now=None,  # type: ignore[arg-type]
        indexed=where.slot is not None or where.shared, ann_slot=where.slot,
    )


async def nearest_world(engine: Any, ctx: RetrievalContext, *, index_only: bool = False) -> tuple[list[Any], str]:
    """The 10 nearest world rows by the statement the semantic arm runs, and the plan it got.

    :param index_only: sorting off: at a test's size the planner would sort, so this shows whether an
        index can serve the statement.
    """
    sql = (f"SELECT id FROM memory_units WHERE {ctx.where('world')} "
           "ORDER BY embedding <=> CAST(:v AS vector) LIMIT 10")
    params = {**ctx.params(), "v": str(list(ctx.embedding))}
    async with engine.db.connect() as conn:
        if index_only:
            await conn.execute(text("SET LOCAL enable_sort = off"))
        plan = "\n".join((await conn.execute(text(f"EXPLAIN {sql}"), params)).scalars())
        ids = list((await conn.execute(text(sql), params)).scalars())
    return ids, plan


async def exact_world(engine: Any, bank_id: str, vector: np.ndarray) -> list[Any]:
    """The 10 nearest world rows with no index at all."""
    async with engine.db.connect() as conn:
        await conn.execute(text("SET LOCAL enable_indexscan = off"))
        rows = await conn.execute(text(
            "SELECT id FROM memory_units WHERE bank_id = :b AND fact_type = 'world' "
            "ORDER BY embedding <=> CAST(:v AS vector) LIMIT 10"), {"b": bank_id, "v": str(vector.tolist())})
        return list(rows.scalars())
