"""Reads of a bank's observations by what they are built on and the tag sets they carry."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


async def built_on(conn: AsyncConnection, bank_id: str, memory_id: str) -> list[str] | None:
    """The ids of the observations that name memory ``memory_id`` among their sources; ``None`` when the
    bank has no such memory."""
    if not await conn.scalar(text("SELECT 1 FROM memory_units WHERE bank_id = :bank AND external_id = :memory"),
                             {"bank": bank_id, "memory": memory_id}):
        return None
    rows = await conn.execute(text(
        "SELECT o.external_id FROM memory_units m "
        "JOIN observation_sources s ON s.bank_id = m.bank_id AND s.source_id = m.id "
        "JOIN memory_units o ON o.bank_id = s.bank_id AND o.id = s.observation_id "
        "WHERE m.bank_id = :bank AND m.external_id = :memory ORDER BY o.external_id"
    ), {"bank": bank_id, "memory": memory_id})
    return list(rows.scalars())


async def scopes(conn: AsyncConnection, bank_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Each distinct (sorted) tag set of the bank's observations with its count, most first; and how many
    sets there are."""
    grouped = ("SELECT ARRAY(SELECT DISTINCT t FROM unnest(tags) AS t ORDER BY t) AS scope, count(*) AS n "
               "FROM memory_units WHERE bank_id = :bank AND fact_type = 'observation' GROUP BY 1")
    params = {"bank": bank_id, "limit": limit, "offset": offset}
    total = await conn.scalar(text(f"SELECT count(*) FROM ({grouped}) g"), params)
    rows = await conn.execute(text(f"{grouped} ORDER BY n DESC, scope LIMIT :limit OFFSET :offset"), params)
    return [{"tags": list(scope), "count": int(n)} for scope, n in rows], int(total or 0)
