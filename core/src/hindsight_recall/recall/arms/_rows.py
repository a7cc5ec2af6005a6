"""Helpers the SQL arms share: one UNION ALL per arm and row mapping."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ...protocols import RetrievalContext
from ...store.driver import fetch
from ...store.schema import ARM_COLUMNS
from ...types import ArmResult, Hit, MemoryRow
from .. import cost

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


#: the MemoryRow fields every arm row carries, and those only a whole row (ROW_COLUMNS) has
_ARM_FIELDS = ("id", "external_id", "fact_type", "occurred_start", "occurred_end", "mentioned_at", "chunk_id",
               "proof_count", "source_memory_ids", "token_count")
_WHOLE_FIELDS = ("text", "context", "tags", "metadata", "document_id")
_UNREAD = {"text": "", "context": None, "tags": (), "metadata": None, "document_id": None}


def row_reader(keys: Sequence[str]) -> Callable[[Sequence[Any]], MemoryRow]:
    """A function that maps a result row (a tuple in ``keys`` order) to a :class:`MemoryRow`.

    Rows with ``text`` among their columns are whole (``ROW_COLUMNS``), others hold what arms read
    (:data:`COLUMNS`). A recall maps hundreds of rows, so the function is written for its columns'
    positions once (as :mod:`dataclasses` writes ``__init__``) and fills the frozen dataclass in one
    step: 0.6 µs a row, against 1.0 looking positions up in a loop and four times that through
    ``__init__``, which sets each field through ``object.__setattr__``.
    """
    return _reader(tuple(keys))


@functools.lru_cache(maxsize=64)
def _reader(keys: tuple[str, ...]) -> Callable[[Sequence[Any]], MemoryRow]:
    at = {k: i for i, k in enumerate(keys)}
    complete = "text" in at
    fields = {name: f"v[{at[name]}]" for name in (*_ARM_FIELDS, *(_WHOLE_FIELDS if complete else ()))}
    fields["proof_count"] = f"1 if v[{at['proof_count']}] is None else v[{at['proof_count']}]"
    fields["source_memory_ids"] = f"tuple(v[{at['source_memory_ids']}] or ())"
    if complete:
        fields["tags"] = f"tuple(v[{at['tags']}] or ())"
    else:
        fields.update((name, repr(value)) for name, value in _UNREAD.items())
    fields["complete"] = repr(complete)
    body = ", ".join(f"{name!r}: {value}" for name, value in fields.items())
    namespace: dict[str, Any] = {"new": object.__new__, "MemoryRow": MemoryRow}
    exec(f"def read(v):\n    row = new(MemoryRow)\n    row.__dict__.update({{{body}}})\n    return row", namespace)
    read: Callable[[Sequence[Any]], MemoryRow] = namespace["read"]
    return read


def hit(row: MemoryRow, score: float) -> Hit:
    """``Hit(row, score)`` for the hundreds of hits a recall makes: filled in one step, as rows are."""
    made: Hit = object.__new__(Hit)
    made.__dict__.update(row=row, score=score, extras={})
    return made


def row_from(m: Mapping[Any, Any], complete: bool | None = None) -> MemoryRow:
    """Map one result row of ``ROW_COLUMNS`` (complete) or :data:`COLUMNS` (incomplete) to a :class:`MemoryRow`.

    :param complete: which of the two; ``None`` looks. For many rows, :func:`row_reader` is faster.
    """
    keys = list(m.keys())
    if complete is False:
        keys = [k for k in keys if k not in _WHOLE_FIELDS]
    return row_reader(keys)([m[k] for k in keys])


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
    async with cost.statement(conn, arm):
        keys, rows = await fetch(conn, " UNION ALL ".join(subselects), params)
    duration = time.perf_counter() - started
    read, at_type, at_score = row_reader(keys), keys.index("fact_type"), keys.index(score_column)
    by_type: dict[str, list[Hit]] = {ft: [] for ft in ctx.fact_types}
    with cost.python(arm):
        for r in rows:
            by_type[r[at_type]].append(hit(read(r), float(r[at_score])))
    return [ArmResult(arm, ft, hits, duration) for ft, hits in by_type.items()]
