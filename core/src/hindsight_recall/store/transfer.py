"""What a bank transfer reads and keeps: a bank's memories in document order, its links, and the
record of each transfer with an export's archive in parts.

Reads stream from one server-side cursor inside one transaction, so an export sees one moment of the
bank and never holds the whole bank in memory.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import IO, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import banks

#: bytes per stored archive part
PART_BYTES = 1 << 20

#: every table names the bank itself (not through a join): only so does Citus plan the statement on the
#: bank's one shard
_MEMORY_ROWS = """
SELECT u.external_id, u.fact_type, u.text, u.context, u.occurred_start, u.occurred_end, u.mentioned_at,
       u.event_date, u.tags, u.metadata, u.document_id, u.chunk_id, u.proof_count, u.position, u.created_at,
       c.chunk_text, c.chunk_index, d.created_at AS document_created_at, d.updated_at AS document_updated_at,
       (SELECT array_agg(e.canonical_name ORDER BY e.canonical_name) FROM unit_entities ue
          JOIN entities e ON e.bank_id = :bank AND e.id = ue.entity_id
         WHERE ue.bank_id = :bank AND ue.unit_id = u.id) AS entities,
       (SELECT array_agg(s.external_id ORDER BY array_position(u.source_memory_ids, s.id)) FROM memory_units s
         WHERE s.bank_id = :bank AND s.id = ANY(u.source_memory_ids)) AS sources
  FROM memory_units u LEFT JOIN chunks c ON c.bank_id = :bank AND c.chunk_id = u.chunk_id
  LEFT JOIN documents d ON d.bank_id = :bank AND d.document_id = u.document_id
 WHERE u.bank_id = :bank
 ORDER BY u.document_id NULLS LAST, u.position NULLS LAST, c.chunk_index NULLS LAST, u.external_id
"""

_LINK_ROWS = """
SELECT f.external_id AS source, t.external_id AS target, l.link_type, l.weight
  FROM memory_links l
  JOIN memory_units f ON f.bank_id = :bank AND f.id = l.from_unit_id
  JOIN memory_units t ON t.bank_id = :bank AND t.id = l.to_unit_id
 WHERE l.bank_id = :bank
 ORDER BY f.external_id, t.external_id, l.link_type
"""


async def memory_rows(conn: AsyncConnection, bank_id: str) -> AsyncIterator[Any]:
    """Every memory of the bank with its chunk text, entity names and source ids: documents together,
    in their order; memories without a document last."""
    result = await conn.stream(text(_MEMORY_ROWS), {"bank": bank_id})
    async for row in result:
        yield row


async def link_rows(conn: AsyncConnection, bank_id: str) -> AsyncIterator[Any]:
    """Every link of the bank, its ends as the memories' own ids."""
    result = await conn.stream(text(_LINK_ROWS), {"bank": bank_id})
    async for row in result:
        yield row


async def invalidated_rows(conn: AsyncConnection, bank_id: str) -> AsyncIterator[Any]:
    """Every invalidated memory of the bank (its JSON line, reason and time), by id."""
    result = await conn.stream(text(
        "SELECT external_id, memory, reason, invalidated_at FROM invalidated_memories WHERE bank_id = :bank "
        "ORDER BY external_id"), {"bank": bank_id})
    async for row in result:
        yield row


async def bank_row(conn: AsyncConnection, bank_id: str) -> dict[str, Any] | None:
    """The bank as ``banks.json`` carries it: upstream's fields (name, mission, disposition, config, the
    defaults filled in) and, under ``hindsight_recall``, the profile and settings exactly as stored."""
    row = (await conn.execute(text("SELECT profile, config, updated_at FROM banks WHERE bank_id = :bank"),
                              {"bank": bank_id})).first()
    if row is None:
        return None
    profile = banks.bank_profile_of(bank_id, row.profile or {}, row.updated_at)
    return {"bank_id": bank_id, "name": profile["name"], "mission": profile["mission"],
            "disposition": profile["disposition"], "config": dict(row.config or {}),
            "hindsight_recall": {"profile": dict(row.profile or {}), "config": dict(row.config or {})}}


async def set_created(conn: AsyncConnection, bank_id: str, created: list[tuple[str, Any]]) -> None:
    """Give restored memories the creation times they had: (memory id, time) pairs."""
    if created:
        await conn.execute(text(
            "UPDATE memory_units u SET created_at = x.at FROM unnest(CAST(:ids AS text[]), "
            "CAST(:ats AS timestamptz[])) AS x(id, at) WHERE u.bank_id = :bank AND u.external_id = x.id"
        ), {"bank": bank_id, "ids": [c[0] for c in created], "ats": [c[1] for c in created]})


async def set_document_dates(conn: AsyncConnection, bank_id: str, dates: list[tuple[str, Any, Any]]) -> None:
    """Give restored documents the dates they had: (document id, created at, updated at); a missing
    date leaves the one the write gave."""
    if dates:
        await conn.execute(text(
            "UPDATE documents d SET created_at = coalesce(x.created, d.created_at), "
            "updated_at = coalesce(x.updated, d.updated_at) FROM unnest(CAST(:ids AS text[]), "
            "CAST(:created AS timestamptz[]), CAST(:updated AS timestamptz[])) AS x(id, created, updated) "
            "WHERE d.bank_id = :bank AND d.document_id = x.id"
        ), {"bank": bank_id, "ids": [d[0] for d in dates], "created": [d[1] for d in dates],
            "updated": [d[2] for d in dates]})


async def document_ids(conn: AsyncConnection, bank_id: str, wanted: list[str]) -> set[str]:
    """Which of ``wanted`` the bank holds memories of."""
    rows = await conn.execute(text(
        "SELECT DISTINCT document_id FROM memory_units WHERE bank_id = :bank AND document_id = ANY(:docs)"
    ), {"bank": bank_id, "docs": wanted})
    return set(rows.scalars())


async def replace_links(conn: AsyncConnection, bank_id: str, links: list[tuple[str, str, str, float]]) -> int:
    """Add links between the bank's memories (named by their own ids); ends not in the bank are skipped.
    Returns the number written."""
    if not links:
        return 0
    result = await conn.execute(text(
        "INSERT INTO memory_links (from_unit_id, to_unit_id, link_type, weight, bank_id) "
        "SELECT f.id, t.id, x.link_type, x.weight, :bank "
        "FROM unnest(CAST(:sources AS text[]), CAST(:targets AS text[]), CAST(:types AS text[]), "
        "CAST(:weights AS float8[])) AS x(source, target, link_type, weight) "
        "JOIN memory_units f ON f.bank_id = :bank AND f.external_id = x.source "
        "JOIN memory_units t ON t.bank_id = :bank AND t.external_id = x.target "
        "ON CONFLICT ON CONSTRAINT memory_links_pkey DO UPDATE SET weight = excluded.weight"
    ), {"bank": bank_id, "sources": [x[0] for x in links], "targets": [x[1] for x in links],
        "types": [x[2] for x in links], "weights": [x[3] for x in links]})
    return int(result.rowcount or 0)


async def clear_links(conn: AsyncConnection, bank_id: str) -> None:
    """Remove every link of the bank (a restore then writes the archive's own)."""
    await conn.execute(text("DELETE FROM memory_links WHERE bank_id = :bank"), {"bank": bank_id})


async def record(
    conn: AsyncConnection, bank_id: str, kind: str, status: str, result: dict[str, Any], error: str | None = None,
    transfer_id: uuid.UUID | None = None,
) -> uuid.UUID:
    """Record one transfer run against ``bank_id``; returns its id."""
    transfer_id = transfer_id or uuid.uuid4()
    await conn.execute(text(
        "INSERT INTO bank_transfers (bank_id, id, kind, status, result, error) "
        "VALUES (:bank, :id, :kind, :status, CAST(:result AS jsonb), :error)"
    ), {"bank": bank_id, "id": transfer_id, "kind": kind, "status": status, "result": json.dumps(result),
        "error": error})
    return transfer_id


async def store_archive(conn: AsyncConnection, bank_id: str, transfer_id: uuid.UUID, source: IO[bytes]) -> int:
    """Copy an archive file into parts of :data:`PART_BYTES`; returns its size."""
    size, part = 0, 0
    while chunk := source.read(PART_BYTES):
        await conn.execute(text(
            "INSERT INTO transfer_archive_parts (bank_id, transfer_id, part, data) VALUES (:bank, :id, :part, :data)"
        ), {"bank": bank_id, "id": transfer_id, "part": part, "data": chunk})
        size += len(chunk)
        part += 1
    return size


async def archive_parts(conn: AsyncConnection, bank_id: str, transfer_id: uuid.UUID) -> AsyncIterator[bytes]:
    """An export's archive, one part at a time."""
    result = await conn.stream(text(
        "SELECT data FROM transfer_archive_parts WHERE bank_id = :bank AND transfer_id = :id ORDER BY part"
    ), {"bank": bank_id, "id": transfer_id})
    async for row in result:
        yield bytes(row.data)


async def transfer(conn: AsyncConnection, bank_id: str, transfer_id: uuid.UUID) -> dict[str, Any] | None:
    """One transfer run in upstream's operation-status shape, or ``None``."""
    row = (await conn.execute(text(
        "SELECT id, kind, status, result, error, created_at, updated_at FROM bank_transfers "
        "WHERE bank_id = :bank AND id = :id"
    ), {"bank": bank_id, "id": transfer_id})).first()
    if row is None:
        return None
    return {"operation_id": str(row.id), "status": row.status, "operation_type": row.kind,
            "created_at": row.created_at.isoformat(), "updated_at": row.updated_at.isoformat(),
            "completed_at": row.updated_at.isoformat() if row.status in ("completed", "failed") else None,
            "error_message": row.error, "result_metadata": row.result}


async def record_result(conn: AsyncConnection, bank_id: str, transfer_id: uuid.UUID, result: dict[str, Any]) -> None:
    """Replace a transfer's result (an export's size is known once its archive is stored)."""
    await conn.execute(text(
        "UPDATE bank_transfers SET result = CAST(:result AS jsonb), updated_at = now() "
        "WHERE bank_id = :bank AND id = :id"
    ), {"bank": bank_id, "id": transfer_id, "result": json.dumps(result)})
