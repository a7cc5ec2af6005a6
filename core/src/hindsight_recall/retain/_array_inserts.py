"""Retain's rows as INSERTs of bound arrays joined to the bank's row: how they are written on Citus.

On a Citus coordinator a COPY into a distributed table, and an INSERT ... SELECT from a table on the
coordinator (the staging table), each send the worker an extra command (the rows go into an
intermediate result first) and make the transaction commit in two phases (PREPARE and COMMIT
PREPARED). An INSERT whose rows come from ``unnest`` of bound arrays, joined to the bank's row, is
planned as one task on the bank's shard: one command, and the commit stays one command. Past
:data:`ARRAY_MAX_ROWS` memories the COPY is faster, and the retain uses it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..store.driver import driver_connection
from ..store.vector_types import register_vector
from .links import Link, Links

#: The largest batch of a bank written so. On a local cluster (no network between the nodes) the arrays
#: cost about 0.1 ms a memory more than a COPY (most of it the vectors), while the COPY costs two
#: commands more and a PREPARE the worker writes to disk: a retain of one memory took 25 ms with arrays
#: against 37 ms, of 30 memories the same, of 100 memories 78 ms against 58 ms.
ARRAY_MAX_ROWS = 32
#: memories per statement (each carries its vector)
UNIT_ROWS = 1_000
#: entity pairs or links per statement
NARROW_ROWS = 20_000

#: (column, array type, how the column is read from the unnested value ``u.<column>``) of a staged memory
#: row, in the order of the retain's staging columns; tags and sources differ in length from row to row,
#: which a two-dimensional array cannot hold, so they travel as JSON
UNIT_COLUMNS = (
    ("id", "uuid", "u.id"), ("bank_id", None, "b.bank_id"), ("external_id", "text", "u.external_id"),
    ("fact_type", "text", "u.fact_type"), ("text", "text", "u.text"), ("context", "text", "u.context"),
    ("embedding", "vector", "u.embedding"), ("occurred_start", "timestamptz", "u.occurred_start"),
    ("occurred_end", "timestamptz", "u.occurred_end"), ("mentioned_at", "timestamptz", "u.mentioned_at"),
    ("event_date", "timestamptz", "u.event_date"),
    ("tags", "jsonb", "CAST(ARRAY(SELECT jsonb_array_elements_text(u.tags)) AS varchar[])"),
    ("metadata", "jsonb", "u.metadata"), ("document_id", "text", "u.document_id"), ("chunk_id", "text", "u.chunk_id"),
    ("proof_count", "int", "u.proof_count"),
    ("source_memory_ids", "jsonb",
     "CAST(nullif(ARRAY(SELECT jsonb_array_elements_text(u.source_memory_ids)), '{}') AS uuid[])"),
    ("text_signals", "text", "u.text_signals"), ("token_count", "int", "u.token_count"), ("ann", "boolean", "u.ann"),
    ("ann_slot", "int", "u.ann_slot"), ("position", "int", "u.position"), ("document", "text", "u.document"),
)


class _Binary(list):  # type: ignore[type-arg]
    """A list bound in binary (psycopg binds a plain list as text: each vector written out as digits)."""


async def _binary_lists(conn: AsyncConnection) -> None:
    from psycopg.types.array import ListBinaryDumper  # late: only Citus writes rows this way

    raw = await driver_connection(conn)
    await register_vector(raw)  # vectors bound as vector[]
    raw.adapters.register_dumper(_Binary, ListBinaryDumper)


def _unnest(columns: Sequence[tuple[str, str]]) -> str:
    """``unnest(CAST(:<name> AS <type>[]), ...) AS u(<name>, ...)`` for (name, type) pairs."""
    arrays = ", ".join(f"CAST(:{name} AS {kind}[])" for name, kind in columns)
    return f"unnest({arrays}) AS u({', '.join(name for name, _ in columns)})"


async def insert_units(
    conn: AsyncConnection, bank_id: str, rows: Sequence[tuple[Any, ...]], search_vector: str,
    params: dict[str, Any], *, upsert: str, now: datetime,
) -> None:
    """Write staged memory rows (tuples in :data:`UNIT_COLUMNS` order).

    :param search_vector: the backend's expression for the search column, over ``u.document``.
    :param params: the backend's bound parameters.
    :param upsert: the ``ON CONFLICT`` clause (empty for a new bank).
    :param now: ``updated_at`` of every row.
    """
    from psycopg.types.json import Jsonb  # late: only Citus writes rows this way

    await _binary_lists(conn)
    arrays = [(name, kind) for name, kind, _ in UNIT_COLUMNS if kind is not None]
    statement = text(
        f"INSERT INTO memory_units ({', '.join(name for name, _, _ in UNIT_COLUMNS[:-1])}, search_vector, updated_at) "
        f"SELECT {', '.join(read for _, _, read in UNIT_COLUMNS[:-1])}, {search_vector}, :now "
        f"FROM banks b CROSS JOIN {_unnest(arrays)} WHERE b.bank_id = :bank{upsert}"
    )
    positions = [i for i, (_, kind, _) in enumerate(UNIT_COLUMNS) if kind is not None]
    tags, sources, vectors = _index("tags"), _index("source_memory_ids"), _index("embedding")
    for start in range(0, len(rows), UNIT_ROWS):
        part = rows[start : start + UNIT_ROWS]
        bound: dict[str, Any] = {**params, "bank": bank_id, "now": now}
        for i in positions:
            values = [row[i] for row in part]
            if i == tags:
                values = [Jsonb(list(v or ())) for v in values]
            elif i == sources:
                values = [Jsonb([str(s) for s in v or ()]) for v in values]
            elif i == vectors:
                values = _Binary(values)
            bound[UNIT_COLUMNS[i][0]] = values
        await conn.execute(statement, bound)


def _index(column: str) -> int:
    return next(i for i, (name, _, _) in enumerate(UNIT_COLUMNS) if name == column)


async def insert_pairs(conn: AsyncConnection, bank_id: str, pairs: dict[tuple[bytes, bytes], str]) -> None:
    """Write unit-entity pairs: (unit id bytes, entity id bytes) -> the memory's fact type, in id order."""
    ordered = sorted(pairs)
    statement = text(
        "INSERT INTO unit_entities (unit_id, entity_id, fact_type, bank_id) SELECT u.unit_id, u.entity_id, "
        f"u.fact_type, b.bank_id FROM banks b CROSS JOIN "
        f"{_unnest([('unit_id', 'uuid'), ('entity_id', 'uuid'), ('fact_type', 'text')])} WHERE b.bank_id = :bank"
    )
    for start in range(0, len(ordered), NARROW_ROWS):
        part = ordered[start : start + NARROW_ROWS]
        await conn.execute(statement, {
            "bank": bank_id, "unit_id": [uuid.UUID(bytes=u) for u, _ in part],
            "entity_id": [uuid.UUID(bytes=e) for _, e in part], "fact_type": [pairs[p] for p in part],
        })


def _uuids(keys: np.ndarray) -> list[uuid.UUID]:
    raw = np.ascontiguousarray(keys).tobytes()
    return [uuid.UUID(bytes=raw[i : i + 16]) for i in range(0, len(raw), 16)]


async def insert_links(conn: AsyncConnection, bank_id: str, batches: Sequence[Links], causal: Sequence[Link]) -> int:
    """Write links computed in numpy and caller-given causal ones in one statement (per slice);
    a link given twice keeps its highest weight. Returns how many were given."""
    sources: list[uuid.UUID] = []
    targets: list[uuid.UUID] = []
    kinds: list[str] = []
    weights: list[float] = []
    for batch in batches:
        sources += _uuids(batch.sources)
        targets += _uuids(batch.targets)
        kinds += [batch.link_type] * len(batch)
        weights += np.asarray(batch.weights, dtype=np.float64).tolist()
    for source, target, kind, weight in causal:
        sources.append(source)
        targets.append(target)
        kinds.append(kind)
        weights.append(weight)
    statement = text(
        "INSERT INTO memory_links (from_unit_id, to_unit_id, link_type, weight, bank_id) "
        "SELECT DISTINCT ON (u.from_unit_id, u.to_unit_id, u.link_type) u.from_unit_id, u.to_unit_id, u.link_type, "
        f"u.weight, b.bank_id FROM banks b CROSS JOIN "
        f"{_unnest([('from_unit_id', 'uuid'), ('to_unit_id', 'uuid'), ('link_type', 'text'), ('weight', 'float8')])} "
        "WHERE b.bank_id = :bank ORDER BY u.from_unit_id, u.to_unit_id, u.link_type, u.weight DESC "
        "ON CONFLICT ON CONSTRAINT memory_links_pkey DO UPDATE SET weight = excluded.weight"
    )
    for start in range(0, len(weights), NARROW_ROWS):
        stop = start + NARROW_ROWS
        await conn.execute(statement, {"bank": bank_id, "from_unit_id": sources[start:stop],
                                       "to_unit_id": targets[start:stop], "link_type": kinds[start:stop],
                                       "weight": weights[start:stop]})
    return len(weights)
