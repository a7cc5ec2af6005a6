"""Invalidated memories: out of ``memory_units`` (so out of every arm's reach) until restored.

A memory invalidated as no longer true is stored here as the JSON object that retains it again
(:func:`~hindsight_recall.jsonl.memory_line`), with the reason and the time; restoring it
is a retain of that object, so its embedding and links are made anew. Deleting its bank deletes it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..jsonl import memory_line, parse_memory
from ..types import Memory

_COLUMNS = "external_id, memory, reason, invalidated_at"


def _record(row: Any) -> dict[str, Any]:
    return {"memory": row.memory, "reason": row.reason, "invalidated_at": row.invalidated_at.isoformat()}


async def keep(conn: AsyncConnection, bank_id: str, memory: Memory, reason: str | None,
               at: datetime | None = None) -> None:
    """Store ``memory`` as invalidated (the caller removes it from the bank in the same transaction).

    :param at: when it was invalidated (a restore gives back the time an archive carries); default now.
    """
    await conn.execute(text(
        "INSERT INTO invalidated_memories (bank_id, external_id, memory, reason, invalidated_at) "
        "VALUES (:bank, :id, CAST(:memory AS jsonb), :reason, coalesce(CAST(:at AS timestamptz), now())) "
        "ON CONFLICT (bank_id, external_id) DO UPDATE SET memory = excluded.memory, reason = excluded.reason, "
        "invalidated_at = excluded.invalidated_at"
    ), {"bank": bank_id, "id": memory.id, "memory": json.dumps(memory_line(memory)), "reason": reason, "at": at})


async def take(conn: AsyncConnection, bank_id: str, memory_id: str) -> Memory | None:
    """Remove an invalidated memory and return it, ready to retain again; ``None`` if there is none."""
    row = (await conn.execute(text(
        "DELETE FROM invalidated_memories WHERE bank_id = :bank AND external_id = :id RETURNING memory"
    ), {"bank": bank_id, "id": memory_id})).first()
    return None if row is None else parse_memory(row.memory)[1]


def as_memory(record: dict[str, Any]) -> Memory:
    """An invalidated memory (as :func:`find` reads it) as the memory that retains it again."""
    return parse_memory(record["memory"])[1]


async def find(conn: AsyncConnection, bank_id: str, memory_id: str) -> dict[str, Any] | None:
    """One invalidated memory: ``{memory, reason, invalidated_at}``, or ``None``."""
    row = (await conn.execute(text(
        f"SELECT {_COLUMNS} FROM invalidated_memories WHERE bank_id = :bank AND external_id = :id"
    ), {"bank": bank_id, "id": memory_id})).first()
    return None if row is None else _record(row)


async def page(conn: AsyncConnection, bank_id: str, *, fact_type: str | None, search: str | None, limit: int,
               offset: int) -> tuple[list[dict[str, Any]], int]:
    """A page of the bank's invalidated memories, most recently invalidated first, and their total."""
    where = "bank_id = :bank"
    params: dict[str, Any] = {"bank": bank_id, "limit": limit, "offset": offset}
    if fact_type is not None:
        where += " AND memory->>'type' = :type"
        params["type"] = fact_type
    if search:
        where += " AND strpos(lower(memory->>'text'), lower(:search)) > 0"
        params["search"] = search
    total = await conn.scalar(text(f"SELECT count(*) FROM invalidated_memories WHERE {where}"), params)
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM invalidated_memories WHERE {where} "
        "ORDER BY invalidated_at DESC, external_id LIMIT :limit OFFSET :offset"), params)
    return [_record(r) for r in rows], int(total or 0)
