"""Reading a bank's memories back one by one or a page at a time (not ranked: that is recall)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..types import TagsMatch
from .filters import tag_filter

_COLUMNS = (
    "u.external_id, u.text, u.fact_type, u.context, u.occurred_start, u.occurred_end, u.mentioned_at, u.tags, "
    "u.metadata, u.document_id, u.chunk_id, u.proof_count, u.created_at, u.updated_at, "
    # every table names the bank itself: only so does Citus plan the statement on the bank's one shard
    "(SELECT coalesce(array_agg(e.canonical_name ORDER BY e.canonical_name), '{}') FROM unit_entities ue "
    "JOIN entities e ON e.bank_id = :bank AND e.id = ue.entity_id WHERE ue.bank_id = :bank "
    "AND ue.unit_id = u.id) AS entities, "
    "(SELECT coalesce(array_agg(s.external_id ORDER BY s.external_id), '{}') FROM memory_units s "
    "WHERE s.bank_id = :bank AND s.id = ANY(u.source_memory_ids)) AS sources"
)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _row(r: Any) -> dict[str, Any]:
    return {
        "id": r.external_id, "text": r.text, "type": r.fact_type, "context": r.context,
        "occurred_start": _iso(r.occurred_start), "occurred_end": _iso(r.occurred_end),
        "mentioned_at": _iso(r.mentioned_at), "tags": list(r.tags or ()), "metadata": dict(r.metadata or {}),
        "document_id": r.document_id, "chunk_id": r.chunk_id, "proof_count": r.proof_count,
        "entities": list(r.entities), "source_ids": list(r.sources),
        "created_at": _iso(r.created_at), "updated_at": _iso(r.updated_at),
    }


async def get_memory(conn: AsyncConnection, bank_id: str, memory_id: str) -> dict[str, Any] | None:
    """One memory by the caller's id, or ``None``."""
    found = (await conn.execute(text(
        f"SELECT {_COLUMNS} FROM memory_units u WHERE u.bank_id = :bank AND u.external_id = :id"
    ), {"bank": bank_id, "id": memory_id})).first()
    return None if found is None else _row(found)


#: the time axes a listing may be windowed and ordered by (upstream's names)
TIME_FIELDS = ("created_at", "updated_at", "mentioned_at", "occurred_start", "occurred_end")


def _filters(
    bank_id: str, *, fact_type: str | None = None, search: str | None = None, document_id: str | None = None,
    entity_id: uuid.UUID | None = None, tags: Sequence[str] | None = None, tags_match: TagsMatch | str = TagsMatch.ANY,
    time_field: str | None = None, start: datetime | None = None, end: datetime | None = None,
) -> tuple[str, dict[str, Any], str]:
    """The condition, its parameters and the order of a listing (see :func:`list_memories`)."""
    where = ["u.bank_id = :bank"]
    params: dict[str, Any] = {"bank": bank_id}
    if fact_type is not None:
        where.append("u.fact_type = :type")
        params["type"] = fact_type
    if search:
        where.append("(strpos(lower(u.text), lower(:q)) > 0 OR strpos(lower(coalesce(u.context, '')), lower(:q)) > 0)")
        params["q"] = search
    if document_id is not None:
        where.append("u.document_id = :doc")
        params["doc"] = document_id
    if entity_id is not None:
        where.append("u.id IN (SELECT ue.unit_id FROM unit_entities ue WHERE ue.bank_id = :bank "
                     "AND ue.entity_id = :entity)")
        params["entity"] = entity_id
    tag_sql = tag_filter(tags, tags_match)
    if tag_sql.sql:
        where.append(re.sub(r"(?<![\w:.])tags\b", "u.tags", tag_sql.sql))  # the column, not :filter_tags
        params.update(tag_sql.params)
    order = "coalesce(u.mentioned_at, u.created_at) DESC, u.external_id"
    if time_field is not None or start is not None or end is not None:
        # one of TIME_FIELDS, never caller text
        column = f"u.{TIME_FIELDS[TIME_FIELDS.index(time_field or 'created_at')]}"
        where.append(f"{column} IS NOT NULL")
        if start is not None:
            where.append(f"{column} >= :start")
            params["start"] = start
        if end is not None:
            where.append(f"{column} < :end")
            params["end"] = end
        order = f"{column} DESC, u.external_id"
    return " AND ".join(where), params, order


async def list_memories(
    conn: AsyncConnection, bank_id: str, *, limit: int = 100, offset: int = 0, **filters: Any,
) -> tuple[list[dict[str, Any]], int]:
    """A page of a bank's memories, most recently mentioned first, and how many match in all.

    The filters are keywords: ``search`` is a case-insensitive substring of the text or the context
    (no pattern syntax); ``fact_type``; ``document_id``; ``entity_id`` keeps the memories linked to
    that entity; ``tags`` and ``tags_match`` filter as recall's do. A ``time_field`` (or either bound
    ``start``, ``end``, which then window ``created_at``) keeps the memories dated on that axis, in
    ``[start, end)``, newest first. An unknown bank has no memories.
    """
    condition, params, order = _filters(bank_id, **filters)
    total = int(await conn.scalar(text(f"SELECT count(*) FROM memory_units u WHERE {condition}"), params) or 0)
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM memory_units u WHERE {condition} ORDER BY {order} LIMIT :limit OFFSET :offset"
    ), {**params, "limit": limit, "offset": offset})
    return [_row(r) for r in rows], total


async def memory_page(
    conn: AsyncConnection, bank_id: str, *, limit: int = 100, offset: int = 0, **filters: Any,
) -> tuple[list[dict[str, Any]], bool]:
    """A page of :func:`list_memories` without the count of every match, and whether more follow.

    Counting the matches of a substring reads every memory of the bank; a page ordered as an index
    orders it stops after ``limit + 1`` of them.
    """
    condition, params, order = _filters(bank_id, **filters)
    rows = list(await conn.execute(text(
        f"SELECT {_COLUMNS} FROM memory_units u WHERE {condition} ORDER BY {order} LIMIT :limit OFFSET :offset"
    ), {**params, "limit": limit + 1, "offset": offset}))
    return [_row(r) for r in rows[:limit]], len(rows) > limit


async def document_memory_ids(conn: AsyncConnection, bank_id: str, documents: Sequence[str]) -> dict[str, list[str]]:
    """Each document's memory ids (the caller's), in document order; an unknown document has none."""
    found: dict[str, list[str]] = {d: [] for d in documents}
    if not found:
        return found
    rows = await conn.execute(text(
        "SELECT document_id, external_id FROM memory_units WHERE bank_id = :bank AND document_id = ANY(:docs) "
        "ORDER BY document_id, position NULLS LAST, created_at, external_id"
    ), {"bank": bank_id, "docs": list(found)})
    for document_id, external_id in rows:
        found[document_id].append(external_id)
    return found


def _like_pattern(pattern: str) -> str:
    """``*`` as the only wildcard: the LIKE metacharacters of the pattern are matched literally."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%")


async def list_tags(conn: AsyncConnection, bank_id: str, *, pattern: str | None = None, limit: int = 100,
                    offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """A page of the bank's tags with how many memories carry each, most used first, and the number of
    distinct tags matching in all.

    :param pattern: case-insensitive, the whole tag, with ``*`` matching any run of characters.
    """
    where = "u.bank_id = :bank AND tag <> ''"
    params: dict[str, Any] = {"bank": bank_id, "limit": limit, "offset": offset}
    if pattern:
        where += " AND tag ILIKE :pattern ESCAPE '\\'"
        params["pattern"] = _like_pattern(pattern)
    source = f"FROM memory_units u CROSS JOIN LATERAL unnest(u.tags) AS tag WHERE {where}"
    total = int(await conn.scalar(text(f"SELECT count(DISTINCT tag) {source}"), params) or 0)
    rows = await conn.execute(text(
        f"SELECT tag, count(*) AS n {source} GROUP BY tag ORDER BY n DESC, tag LIMIT :limit OFFSET :offset"
    ), params)
    return [{"tag": r.tag, "count": r.n} for r in rows], total
