"""Reading a stored memory back as the :class:`~hindsight_recall.types.Memory` that would retain it again.

An edit is a retain of the same id with some fields changed: retain then re-embeds the text and
rebuilds the memory's links, so an edited memory is exactly what retaining it so would have stored.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..types import Memory

_MEMORY = (
    "SELECT u.external_id, u.text, u.fact_type, u.context, u.occurred_start, u.occurred_end, u.mentioned_at, "
    "u.tags, u.metadata, u.document_id, u.proof_count, u.position, c.chunk_text, "
    "(SELECT coalesce(array_agg(e.canonical_name ORDER BY e.canonical_name), '{}') FROM unit_entities ue "
    " JOIN entities e ON e.bank_id = :bank AND e.id = ue.entity_id "
    " WHERE ue.bank_id = :bank AND ue.unit_id = u.id) AS entities, "
    "(SELECT coalesce(array_agg(s.external_id ORDER BY s.external_id), '{}') FROM memory_units s "
    " WHERE s.bank_id = :bank AND s.id = ANY(u.source_memory_ids)) AS sources, "
    "(SELECT coalesce(array_agg(t.external_id ORDER BY t.external_id), '{}') FROM memory_links l "
    " JOIN memory_units t ON t.bank_id = :bank AND t.id = l.to_unit_id "
    " WHERE l.bank_id = :bank AND l.from_unit_id = u.id AND l.link_type = 'causes') AS causes "
    "FROM memory_units u LEFT JOIN chunks c ON c.bank_id = :bank AND c.chunk_id = u.chunk_id "
    "WHERE u.bank_id = :bank AND u.external_id = :id"
)


async def stored_memory(conn: AsyncConnection, bank_id: str, memory_id: str) -> Memory | None:
    """The memory as a retain would give it (text, dates, entities, tags, chunk, causes, sources), or ``None``."""
    row = (await conn.execute(text(_MEMORY), {"bank": bank_id, "id": memory_id})).first()
    if row is None:
        return None
    return Memory(
        id=row.external_id, text=row.text, type=row.fact_type, context=row.context,
        occurred_start=row.occurred_start, occurred_end=row.occurred_end, mentioned_at=row.mentioned_at,
        entities=tuple(row.entities), tags=tuple(row.tags or ()), chunk=row.chunk_text,
        document_id=row.document_id, proof_count=row.proof_count, metadata=dict(row.metadata or {}),
        causes=tuple(row.causes), source_ids=tuple(row.sources), position=row.position,
    )


async def memory_ids(conn: AsyncConnection, bank_id: str, fact_type: str | None = None) -> list[str]:
    """The caller ids of a bank's memories, of one type when given."""
    params: dict[str, Any] = {"bank": bank_id}
    where = "bank_id = :bank"
    if fact_type is not None:
        where += " AND fact_type = :type"
        params["type"] = fact_type
    return list((await conn.execute(text(f"SELECT external_id FROM memory_units WHERE {where}"), params)).scalars())


async def drop_links_into(conn: AsyncConnection, bank_id: str, memory_id: str) -> int:
    """Remove the semantic links other memories have *to* this one.

    A retain of an existing id rebuilds the memory's own links; the ones other memories made to it
    were chosen for its old text, so an edit drops them (as upstream's does). Neighbours in time are
    read from the dates, so a new date needs nothing dropped.
    """
    result = await conn.execute(text(
        "DELETE FROM memory_links l USING memory_units u WHERE u.bank_id = :bank AND u.external_id = :id "
        "AND l.bank_id = :bank AND l.to_unit_id = u.id AND l.link_type = 'semantic'"
    ), {"bank": bank_id, "id": memory_id})
    return int(getattr(result, "rowcount", 0) or 0)
