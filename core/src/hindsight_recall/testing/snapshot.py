"""A bank's rows in every bank-keyed table, and what must hold between them, for tests that check a write
changed everything it should or nothing at all (refusals, kill -9, export -> import round trips).

Every table with a ``bank_id`` column is read, so a table added later is compared too.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..store import length_stats, term_stats

Rows = dict[str, list[tuple[Any, ...]]]


async def bank_tables(conn: AsyncConnection) -> list[str]:
    """The tables of the current schema that have a ``bank_id`` column, by name."""
    found = await conn.execute(text(
        "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t "
        "ON t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE' "
        "WHERE c.table_schema = current_schema() AND c.column_name = 'bank_id' ORDER BY 1"
    ))
    return list(found.scalars())


def _plain(value: Any) -> Any:
    """A value as something comparable and hashable: vectors as rounded tuples, JSON as sorted text."""
    if hasattr(value, "to_numpy"):  # pgvector's Vector
        value = value.to_numpy()
    if isinstance(value, np.ndarray):
        return tuple(round(float(v), 4) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


async def bank_rows(conn: AsyncConnection, bank_ids: Collection[str], *,
                    skip: Mapping[str, Collection[str]] | None = None) -> Rows:
    """Table -> the banks' rows there (columns by name, sorted), each row a tuple of plain values.

    :param skip: table -> columns left out (``"*"`` leaves the table out). The audit log is always left
        out: it records requests, refused ones too, not what the bank holds.
    """
    from ..store.driver import driver_connection
    from ..store.vector_types import register_vector

    # every connection then reads vectors as vectors (a pooled one a retain used already does, a new one
    # would read text)
    await register_vector(await driver_connection(conn))
    skip = {"audit_log": ("*",), **(skip or {})}
    out: Rows = {}
    for table in await bank_tables(conn):
        left_out = set(skip.get(table, ()))
        if "*" in left_out:
            continue
        result = await conn.execute(text(f"SELECT * FROM {table} WHERE bank_id = ANY(:banks)"),
                                    {"banks": list(bank_ids)})
        columns = list(result.keys())
        names = [n for n in columns if n not in left_out]
        rows = [tuple((n, _plain(row._mapping[n])) for n in sorted(names)) for row in result]
        out[table] = sorted(rows, key=repr)
    return out


def read_bank_rows(url: str, bank_ids: Collection[str], **options: Any) -> Rows:
    """:func:`bank_rows` from outside a running engine (a server in another thread or process): its own
    connection to the database at ``url``, on a loop of its own."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    from ..store.db import sqlalchemy_url

    async def read() -> Rows:
        engine = create_async_engine(sqlalchemy_url(url), poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                return await bank_rows(conn, bank_ids, **options)
        finally:
            await engine.dispose()

    return asyncio.run(read())


async def document_texts(conn: AsyncConnection, bank_id: str) -> dict[str, str]:
    """Each document's text: its chunks in order (what its ``content_hash`` is taken of)."""
    rows = await conn.execute(text(
        "SELECT document_id, string_agg(chunk_text, E'\\n' ORDER BY chunk_index) AS body FROM chunks "
        "WHERE bank_id = :b AND document_id IS NOT NULL GROUP BY document_id"), {"b": bank_id})
    return {r.document_id: r.body for r in rows}


def differences(before: Rows, after: Rows, limit: int = 5) -> list[str]:
    """What differs between two :func:`bank_rows` readings, a line per table (empty when equal)."""
    lines = []
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table, []), after.get(table, [])
        if old == new:
            continue
        gone = [r for r in old if r not in new][:limit]
        came = [r for r in new if r not in old][:limit]
        lines.append(f"{table}: {len(old)} rows -> {len(new)}; gone {gone}; new {came}")
    return lines


#: statements that find rows no bank should hold: each names what is wrong
_ORPHANS = {
    "a link from or to a memory that is gone":
        "SELECT l.bank_id, l.from_unit_id, l.to_unit_id FROM memory_links l WHERE l.bank_id = ANY(:banks) AND ("
        "NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = l.bank_id AND u.id = l.from_unit_id) OR "
        "NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = l.bank_id AND u.id = l.to_unit_id))",
    "an observation source naming a memory that is gone":
        "SELECT s.bank_id, s.source_id, s.observation_id FROM observation_sources s WHERE s.bank_id = ANY(:banks) "
        "AND (NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = s.bank_id AND u.id = s.source_id) OR "
        "NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = s.bank_id AND u.id = s.observation_id))",
    "a memory citing a source that is gone":
        "SELECT u.bank_id, u.external_id FROM memory_units u CROSS JOIN LATERAL unnest(u.source_memory_ids) AS s "
        "WHERE u.bank_id = ANY(:banks) AND NOT EXISTS "
        "(SELECT 1 FROM memory_units x WHERE x.bank_id = u.bank_id AND x.id = s)",
    "an entity no memory names":
        "SELECT e.bank_id, e.canonical_name FROM entities e WHERE e.bank_id = ANY(:banks) AND NOT EXISTS "
        "(SELECT 1 FROM unit_entities ue WHERE ue.bank_id = e.bank_id AND ue.entity_id = e.id)",
    "an entity pair of a memory that is gone":
        "SELECT ue.bank_id, ue.unit_id FROM unit_entities ue WHERE ue.bank_id = ANY(:banks) AND NOT EXISTS "
        "(SELECT 1 FROM memory_units u WHERE u.bank_id = ue.bank_id AND u.id = ue.unit_id)",
    "a chunk no memory uses":
        "SELECT c.bank_id, c.chunk_id FROM chunks c WHERE c.bank_id = ANY(:banks) AND NOT EXISTS "
        "(SELECT 1 FROM memory_units u WHERE u.bank_id = c.bank_id AND u.chunk_id = c.chunk_id)",
    "a memory whose chunk is gone":
        "SELECT u.bank_id, u.external_id FROM memory_units u WHERE u.bank_id = ANY(:banks) AND u.chunk_id IS NOT "
        "NULL AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.bank_id = u.bank_id AND c.chunk_id = u.chunk_id)",
    "a document without memories":
        "SELECT d.bank_id, d.document_id FROM documents d WHERE d.bank_id = ANY(:banks) AND NOT EXISTS "
        "(SELECT 1 FROM memory_units u WHERE u.bank_id = d.bank_id AND u.document_id = d.document_id)",
    "a memory of a document that has no row":
        "SELECT u.bank_id, u.document_id FROM memory_units u WHERE u.bank_id = ANY(:banks) AND u.document_id IS "
        "NOT NULL AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.bank_id = u.bank_id "
        "AND d.document_id = u.document_id)",
    "a memory both stored and invalidated":
        "SELECT i.bank_id, i.external_id FROM invalidated_memories i JOIN memory_units u ON u.bank_id = i.bank_id "
        "AND u.external_id = i.external_id WHERE i.bank_id = ANY(:banks)",
    "rows of a bank that does not exist":
        "SELECT u.bank_id FROM memory_units u WHERE u.bank_id = ANY(:banks) AND NOT EXISTS "
        "(SELECT 1 FROM banks b WHERE b.bank_id = u.bank_id) LIMIT 1",
}


async def orphans(conn: AsyncConnection, bank_ids: Sequence[str]) -> list[str]:
    """Every row of the banks that nothing should have left behind, and term or length statistics that
    drifted, as lines saying what is wrong (empty when all holds)."""
    found = []
    for what, statement in _ORPHANS.items():
        rows = (await conn.execute(text(statement), {"banks": list(bank_ids)})).all()
        if rows:
            found.append(f"{what}: {[tuple(r) for r in rows[:5]]} ({len(rows)} in all)")
    for bank_id in bank_ids:
        drift = await term_stats.drift(conn, bank_id)
        if drift:
            found.append(f"term counts of bank {bank_id!r} drifted: {drift[:5]}")
        lengths = await length_stats.drift(conn, bank_id)
        if lengths:
            found.append(f"length statistics of bank {bank_id!r} drifted: {lengths[:5]}")
    return found

