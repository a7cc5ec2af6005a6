"""Read-only pages of one bank for the console: its documents, its entities, a memory's links.

Every statement is scoped by ``bank_id``, so a page never shows another bank's rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def document_page(conn: AsyncConnection, bank_id: str, *, search: str | None = None, limit: int = 50,
                        offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The bank's documents (memories grouped by ``document_id``), newest first, and how many match."""
    params = {"bank": bank_id, "q": search, "limit": limit, "offset": offset}
    where = ("bank_id = :bank AND document_id IS NOT NULL "
             "AND (CAST(:q AS text) IS NULL OR strpos(lower(document_id), lower(CAST(:q AS text))) > 0)")
    rows = await conn.execute(text(
        f"SELECT document_id, count(*) AS memories, min(created_at) AS first_seen, "
        f"max(greatest(created_at, updated_at)) AS last_write FROM memory_units WHERE {where} "
        f"GROUP BY document_id ORDER BY last_write DESC, document_id LIMIT :limit OFFSET :offset"), params)
    total = await conn.scalar(text(f"SELECT count(DISTINCT document_id) FROM memory_units WHERE {where}"), params)
    page = [{"document_id": r.document_id, "memories": r.memories, "first_seen": _iso(r.first_seen),
             "last_write": _iso(r.last_write)} for r in rows]
    return page, int(total or 0)


async def entity_page(conn: AsyncConnection, bank_id: str, *, search: str | None = None, limit: int = 50,
                      offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The bank's entities, most mentioned first, with how many memories name each."""
    params = {"bank": bank_id, "q": search, "limit": limit, "offset": offset}
    where = ("e.bank_id = :bank AND (CAST(:q AS text) IS NULL "
             "OR strpos(lower(e.canonical_name), lower(CAST(:q AS text))) > 0)")
    rows = await conn.execute(text(
        f"SELECT e.id, e.canonical_name, (SELECT count(*) FROM unit_entities ue WHERE ue.bank_id = :bank "
        f"AND ue.entity_id = e.id) AS memories FROM entities e WHERE {where} "
        f"ORDER BY memories DESC, e.canonical_name, e.id LIMIT :limit OFFSET :offset"), params)
    total = await conn.scalar(text(f"SELECT count(*) FROM entities e WHERE {where}"), params)
    return [{"id": str(r.id), "name": r.canonical_name, "memories": r.memories} for r in rows], int(total or 0)


async def entity_pairs(conn: AsyncConnection, bank_id: str, entity_ids: list[str],
                       limit: int = 200) -> list[dict[str, Any]]:
    """How often two of ``entity_ids`` are named by the same memory: the edges of the entity graph."""
    if len(entity_ids) < 2:
        return []
    rows = await conn.execute(text(
        "SELECT a.entity_id AS a, b.entity_id AS b, count(*) AS n FROM unit_entities a "
        "JOIN unit_entities b ON b.bank_id = a.bank_id AND b.unit_id = a.unit_id AND a.entity_id < b.entity_id "
        "WHERE a.bank_id = :bank AND a.entity_id = ANY(CAST(:ids AS uuid[])) "
        "AND b.entity_id = ANY(CAST(:ids AS uuid[])) "
        "GROUP BY 1, 2 ORDER BY n DESC LIMIT :limit"), {"bank": bank_id, "ids": entity_ids, "limit": limit})
    return [{"a": str(r.a), "b": str(r.b), "n": r.n} for r in rows]


async def memory_links(conn: AsyncConnection, bank_id: str, memory_id: str, limit: int = 100) -> list[dict[str, Any]]:
    """A memory's links both ways (strongest first), each with the other memory's id and text."""
    rows = await conn.execute(text(
        "SELECT 'out' AS direction, l.link_type, l.weight, o.external_id, o.text FROM memory_units u "
        "JOIN memory_links l ON l.bank_id = :bank AND l.from_unit_id = u.id "
        "JOIN memory_units o ON o.bank_id = :bank AND o.id = l.to_unit_id "
        "WHERE u.bank_id = :bank AND u.external_id = :id "
        "UNION ALL "
        "SELECT 'in', l.link_type, l.weight, o.external_id, o.text FROM memory_units u "
        "JOIN memory_links l ON l.bank_id = :bank AND l.to_unit_id = u.id "
        "JOIN memory_units o ON o.bank_id = :bank AND o.id = l.from_unit_id "
        "WHERE u.bank_id = :bank AND u.external_id = :id "
        "ORDER BY weight DESC, external_id LIMIT :limit"), {"bank": bank_id, "id": memory_id, "limit": limit})
    return [{"direction": r.direction, "type": r.link_type, "weight": r.weight, "id": r.external_id,
             "text": r.text} for r in rows]


async def entity_name(conn: AsyncConnection, bank_id: str, entity_id: str) -> str | None:
    """An entity's name, if the bank has it."""
    name: str | None = await conn.scalar(text(
        "SELECT canonical_name FROM entities WHERE bank_id = :bank AND id = CAST(:id AS uuid)"),
        {"bank": bank_id, "id": entity_id})
    return name


async def entity_count(conn: AsyncConnection, bank_id: str) -> int:
    """How many entities the bank has."""
    return int(await conn.scalar(text("SELECT count(*) FROM entities WHERE bank_id = :bank"), {"bank": bank_id}) or 0)
