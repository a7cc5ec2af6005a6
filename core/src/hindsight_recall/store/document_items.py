"""A document's retain items read back from what the store keeps of them, so the document can be retained again.

No request is kept, only what retain wrote: memories with their context, metadata, tags, mention time and
entities, and each memory's source chunk (an item stored verbatim is its memory's chunk; with a retain
model, an item's text is its chunks). So an item read back is one distinct chunk of the document, in place
order, with the fields of its first memory. Where an item's boundaries went is not kept: a long item
extracted in several chunks comes back as one item per chunk, a chunk in which the model found no fact is
gone, and identical items of one document, which share their chunk, come back once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .documents import exists
from .schema import of_document

_PLACE = "m.position NULLS LAST, m.created_at, m.external_id"


@dataclass(frozen=True)
class StoredItem:
    """One item of a document as the store keeps it."""

    content: str
    context: str | None
    #: when it was said (every memory of it has it as ``mentioned_at``); ``None`` when it had no date
    timestamp: datetime | None
    metadata: dict[str, Any]
    tags: tuple[str, ...]
    #: the entities every memory of it names (those its retain named for the whole item among them)
    entities: tuple[str, ...]


async def document_items(conn: AsyncConnection, bank_id: str, document_id: str) -> list[StoredItem] | None:
    """The document's items in place order (see the module docstring): each distinct chunk of its memories
    once, a memory without a chunk as its own text; observations are not items. ``None`` when the bank
    has no such document."""
    if not await exists(conn, bank_id, document_id):
        return None
    rows = (await conn.execute(text(
        "SELECT m.id, m.external_id, m.text, m.chunk_id, c.chunk_text, m.context, m.metadata, m.tags, m.mentioned_at "
        "FROM memory_units m LEFT JOIN chunks c ON c.bank_id = m.bank_id AND c.chunk_id = m.chunk_id "
        f"WHERE m.bank_id = :bank AND {of_document('m', ':doc')} AND m.fact_type <> 'observation' "
        f"ORDER BY {_PLACE}"
    ), {"bank": bank_id, "doc": document_id})).all()
    names: dict[Any, list[str]] = {}
    if rows:
        for unit_id, name in await conn.execute(text(
            "SELECT ue.unit_id, e.canonical_name FROM unit_entities ue "
            "JOIN entities e ON e.bank_id = ue.bank_id AND e.id = ue.entity_id "
            "WHERE ue.bank_id = :bank AND ue.unit_id = ANY(:ids) ORDER BY e.canonical_name"
        ), {"bank": bank_id, "ids": [r.id for r in rows]}):
            names.setdefault(unit_id, []).append(name)
    groups: dict[str, list[Any]] = {}
    for row in rows:
        key = f"chunk\x00{row.chunk_id}" if row.chunk_text is not None else f"memory\x00{row.external_id}"
        groups.setdefault(key, []).append(row)
    return [_item(members, names) for members in groups.values()]


def _item(members: Sequence[Any], names: dict[Any, list[str]]) -> StoredItem:
    first = members[0]
    shared = [n for n in names.get(first.id, []) if all(n in names.get(m.id, []) for m in members[1:])]
    return StoredItem(
        content=first.chunk_text if first.chunk_text is not None else first.text, context=first.context,
        timestamp=first.mentioned_at, metadata=dict(first.metadata or {}), tags=tuple(first.tags or ()),
        entities=tuple(shared))
