"""A bank's directives: named rules its reflect gives the model, highest priority first (migration 20)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_COLUMNS = "bank_id, id, name, content, priority, is_active, tags, created_at, updated_at"
#: how a tagged directive matches the requested scope (``tags_match``)
MATCHES = {"any": "tags && CAST(:tags AS text[])", "all": "tags @> CAST(:tags AS text[])",
           "exact": "(tags @> CAST(:tags AS text[]) AND tags <@ CAST(:tags AS text[]))"}
#: the most directives a template carries
MAX_TEMPLATE = 1000
#: the most directives one reflect is given (the highest priority ones)
MAX_APPLIED = 50
#: a directive's fields a change may set
FIELDS = ("name", "content", "priority", "is_active", "tags")


def _row(row: Any) -> dict[str, Any]:
    found = dict(row._mapping)
    found["id"] = str(found["id"])
    found["tags"] = list(found["tags"] or ())
    for key in ("created_at", "updated_at"):
        found[key] = found[key].isoformat()
    return found


async def create(conn: AsyncConnection, bank_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    row = (await conn.execute(text(
        "INSERT INTO directives (bank_id, id, name, content, priority, is_active, tags) "
        f"VALUES (:bank, :id, :name, :content, :priority, :is_active, :tags) RETURNING {_COLUMNS}"
    ), {"bank": bank_id, "id": uuid.uuid4(), **fields})).one()
    return _row(row)


async def page(conn: AsyncConnection, bank_id: str, *, tags: Sequence[str] | None, tags_match: str,
               active_only: bool, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The bank's directives, highest priority first, then oldest; and how many match in all."""
    where = ["bank_id = :bank"]
    params: dict[str, Any] = {"bank": bank_id, "limit": limit, "offset": offset, "tags": list(tags or ())}
    if active_only:
        where.append("is_active")
    if tags:  # as upstream: untagged (bank-wide) directives apply in every scope
        where.append(f"(cardinality(tags) = 0 OR {MATCHES[tags_match]})")
    clause = " AND ".join(where)
    total = await conn.scalar(text(f"SELECT count(*) FROM directives WHERE {clause}"), params)
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM directives WHERE {clause} ORDER BY priority DESC, created_at, id "
        "LIMIT :limit OFFSET :offset"), params)
    return [_row(r) for r in rows], int(total or 0)


async def get(conn: AsyncConnection, bank_id: str, directive_id: uuid.UUID) -> dict[str, Any] | None:
    row = (await conn.execute(text(f"SELECT {_COLUMNS} FROM directives WHERE bank_id = :bank AND id = :id"),
                              {"bank": bank_id, "id": directive_id})).first()
    return None if row is None else _row(row)


async def update(conn: AsyncConnection, bank_id: str, directive_id: uuid.UUID,
                 changes: Mapping[str, Any]) -> dict[str, Any] | None:
    """Set the given fields (names from :data:`FIELDS` only); ``None`` when the bank has no such directive."""
    sets = ", ".join(f"{name} = :{name}" for name in FIELDS if name in changes)
    row = (await conn.execute(text(
        f"UPDATE directives SET {sets}{', ' if sets else ''}updated_at = clock_timestamp() "
        f"WHERE bank_id = :bank AND id = :id RETURNING {_COLUMNS}"
    ), {"bank": bank_id, "id": directive_id, **{k: v for k, v in changes.items() if k in FIELDS}})).first()
    return None if row is None else _row(row)


async def ids_by_name(conn: AsyncConnection, bank_id: str) -> dict[str, uuid.UUID]:
    """Each directive's id by its name (a template names its directives)."""
    rows = await conn.execute(text("SELECT name, id FROM directives WHERE bank_id = :bank ORDER BY created_at"),
                              {"bank": bank_id})
    return {name: directive_id for name, directive_id in rows}


async def delete(conn: AsyncConnection, bank_id: str, directive_id: uuid.UUID) -> bool:
    done = await conn.scalar(text("DELETE FROM directives WHERE bank_id = :bank AND id = :id RETURNING 1"),
                             {"bank": bank_id, "id": directive_id})
    return done is not None


async def active(conn: AsyncConnection, bank_id: str, tags: Sequence[str] | None) -> list[dict[str, Any]]:
    """The active directives a reflect on ``tags`` follows, highest priority first: the untagged ones, and
    those sharing a tag with ``tags`` (as upstream, a reflect without tags follows only untagged ones)."""
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM directives WHERE bank_id = :bank AND is_active "
        "AND (cardinality(tags) = 0 OR tags && CAST(:tags AS text[])) ORDER BY priority DESC, created_at, id "
        "LIMIT :limit"), {"bank": bank_id, "tags": list(tags or ()), "limit": MAX_APPLIED})
    return [_row(r) for r in rows]
