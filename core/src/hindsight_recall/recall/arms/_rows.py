"""Helpers the SQL arms share: one UNION ALL per arm and row mapping."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ...protocols import RetrievalContext
from ...store.schema import ARM_COLUMNS
from ...types import ArmResult, Hit, MemoryRow

#: the columns arms read: what ranking needs, not what the answer shows (see :func:`row_from`)
COLUMNS = ARM_COLUMNS
#: cosine distance to the query vector bound as ``:embedding``
DISTANCE = "(embedding <=> CAST(:embedding AS vector))"


def nearest_sql(where: str, *, limit: str = "limit", floor: str = "floor") -> str:
    """A sub-select of the ``:limit`` memories matching ``where`` nearest the query vector, kept when
    their ``similarity`` is at least ``:floor``, nearest first.

    The floor is applied after the LIMIT, not inside the scan: in distance order it cuts the same rows,
    but inside an HNSW scan it is a filter, and a query with no memory above the floor then walked
    ``ANN_MAX_SCAN_TUPLES`` rows before giving up (6,500 rejected rows, 40 ms at 100k).

    :param where: the predicate (``RetrievalContext.where`` and any more conditions).
    :param limit: the name of the parameter bound to the row limit.
    :param floor: the name of the parameter bound to the least similarity.
    """
    return (
        f"(SELECT * FROM (SELECT {COLUMNS}, 1 - {DISTANCE} AS similarity FROM memory_units "
        f"WHERE {where} AND embedding IS NOT NULL ORDER BY {DISTANCE} LIMIT :{limit}) AS nearest "
        f"WHERE similarity >= :{floor} ORDER BY similarity DESC)"
    )


def row_from(m: Mapping[Any, Any], complete: bool | None = None) -> MemoryRow:
    """Map a result row of ``ROW_COLUMNS`` (complete) or :data:`COLUMNS` (incomplete) to a :class:`MemoryRow`.

    :param complete: which of the two; ``None`` looks (callers mapping many rows say it once).
    """
    if complete is None:
        complete = "text" in m
    return MemoryRow(
        id=m["id"],
        external_id=m["external_id"],
        text=m["text"] if complete else "",
        fact_type=m["fact_type"],
        context=m["context"] if complete else None,
        occurred_start=m["occurred_start"],
        occurred_end=m["occurred_end"],
        mentioned_at=m["mentioned_at"],
        tags=tuple(m["tags"] or ()) if complete else (),
        metadata=m["metadata"] if complete else None,
        document_id=m["document_id"] if complete else None,
        chunk_id=m["chunk_id"],
        proof_count=m["proof_count"] if m["proof_count"] is not None else 1,
        source_memory_ids=tuple(m["source_memory_ids"] or ()),
        token_count=m["token_count"],
        complete=complete,
    )


def where_for(ctx: RetrievalContext, fact_type: str) -> str:
    """The predicate of one sub-select (:meth:`RetrievalContext.where`, public for third-party arms)."""
    return ctx.where(fact_type)


def base_params(ctx: RetrievalContext) -> dict[str, Any]:
    return ctx.params()


async def run_union(
    conn: AsyncConnection,
    arm: str,
    ctx: RetrievalContext,
    subselects: Sequence[str],
    params: Mapping[str, Any],
    score_column: str,
) -> list[ArmResult]:
    """Run one UNION ALL of per-fact-type sub-selects and split the rows by fact type."""
    started = time.perf_counter()
    result = await conn.execute(text(" UNION ALL ".join(subselects)), dict(params))
    complete = "text" in tuple(result.keys())
    rows = result.mappings().all()
    duration = time.perf_counter() - started
    by_type: dict[str, list[Hit]] = {ft: [] for ft in ctx.fact_types}
    for m in rows:
        by_type[m["fact_type"]].append(Hit(row_from(m, complete), float(m[score_column])))
    return [ArmResult(arm, ft, hits, duration) for ft, hits in by_type.items()]
