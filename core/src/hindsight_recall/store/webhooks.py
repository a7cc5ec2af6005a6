"""A bank's webhooks (migration 20), and their deliveries: operations of type ``webhook_delivery``.

A delivery row's payload is what to send and where (the event's JSON body, the URL and HTTP settings
as they were when the event happened); the secret stays in the webhook's row and is read when the
delivery is made, so no operation payload ever shows it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

#: the operation type of one event sent to one webhook (upstream's)
DELIVERY = "webhook_delivery"
_COLUMNS = "bank_id, id, url, secret, event_types, enabled, http_config, created_at, updated_at"
#: a webhook's fields a change may set
FIELDS = ("url", "secret", "event_types", "enabled", "http_config")


def _row(row: Any) -> dict[str, Any]:
    found = dict(row._mapping)
    found["id"] = str(found["id"])
    found["event_types"] = list(found["event_types"] or ())
    for key in ("created_at", "updated_at"):
        found[key] = found[key].isoformat()
    return found


def _params(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v) if k == "http_config" else v for k, v in fields.items() if k in FIELDS}


async def create(conn: AsyncConnection, bank_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    row = (await conn.execute(text(
        "INSERT INTO webhooks (bank_id, id, url, secret, event_types, enabled, http_config) "
        "VALUES (:bank, :id, :url, :secret, :event_types, :enabled, CAST(:http_config AS jsonb)) "
        f"RETURNING {_COLUMNS}"
    ), {"bank": bank_id, "id": uuid.uuid4(), **_params(fields)})).one()
    return _row(row)


async def page(conn: AsyncConnection, bank_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The bank's webhooks, oldest first, and how many it has."""
    params = {"bank": bank_id, "limit": limit, "offset": offset}
    total = await conn.scalar(text("SELECT count(*) FROM webhooks WHERE bank_id = :bank"), params)
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM webhooks WHERE bank_id = :bank ORDER BY created_at, id LIMIT :limit OFFSET :offset"
    ), params)
    return [_row(r) for r in rows], int(total or 0)


async def get(conn: AsyncConnection, bank_id: str, webhook_id: uuid.UUID) -> dict[str, Any] | None:
    row = (await conn.execute(text(f"SELECT {_COLUMNS} FROM webhooks WHERE bank_id = :bank AND id = :id"),
                              {"bank": bank_id, "id": webhook_id})).first()
    return None if row is None else _row(row)


async def update(conn: AsyncConnection, bank_id: str, webhook_id: uuid.UUID,
                 changes: Mapping[str, Any]) -> dict[str, Any] | None:
    """Set the given fields (a null ``secret`` clears it); ``None`` when the bank has no such webhook."""
    sets = ", ".join(f"{k} = CAST(:{k} AS jsonb)" if k == "http_config" else f"{k} = :{k}"
                     for k in FIELDS if k in changes)
    row = (await conn.execute(text(
        f"UPDATE webhooks SET {sets}{', ' if sets else ''}updated_at = clock_timestamp() "
        f"WHERE bank_id = :bank AND id = :id RETURNING {_COLUMNS}"
    ), {"bank": bank_id, "id": webhook_id, **_params(changes)})).first()
    return None if row is None else _row(row)


async def delete(conn: AsyncConnection, bank_id: str, webhook_id: uuid.UUID) -> bool:
    done = await conn.scalar(text("DELETE FROM webhooks WHERE bank_id = :bank AND id = :id RETURNING 1"),
                             {"bank": bank_id, "id": webhook_id})
    return done is not None


async def subscribed(conn: AsyncConnection, bank_id: str, event_type: str) -> list[dict[str, Any]]:
    """The bank's enabled webhooks that take ``event_type`` (one indexed read: usually none)."""
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM webhooks WHERE bank_id = :bank AND enabled AND :event = ANY(event_types)"
    ), {"bank": bank_id, "event": event_type})
    return [_row(r) for r in rows]


async def queue(conn: AsyncConnection, bank_id: str, deliveries: Sequence[tuple[uuid.UUID, str]]) -> None:
    """Queue deliveries, (operation id, payload) each, as pending operations, in one statement."""
    if not deliveries:
        return
    await conn.execute(text(
        "INSERT INTO operations (bank_id, operation_id, operation_type, status, payload, items_count) "
        "SELECT :bank, d.id, :type, 'pending', d.payload, 1 "
        "FROM unnest(CAST(:ids AS uuid[]), CAST(:payloads AS text[])) AS d (id, payload)"
    ), {"bank": bank_id, "type": DELIVERY, "ids": [d[0] for d in deliveries], "payloads": [d[1] for d in deliveries]})


async def secret_of(conn: AsyncConnection, bank_id: str, webhook_id: str) -> tuple[bool, str | None]:
    """(whether the webhook still exists, its secret)."""
    row = (await conn.execute(text("SELECT secret FROM webhooks WHERE bank_id = :bank AND id = :id"),
                              {"bank": bank_id, "id": uuid.UUID(webhook_id)})).first()
    return (False, None) if row is None else (True, row[0])


async def deliveries(conn: AsyncConnection, bank_id: str, webhook_id: uuid.UUID, limit: int,
                     before: Any | None) -> list[dict[str, Any]]:
    """The webhook's deliveries, newest first, ``limit`` + 1 of them (one more says there is a next page);
    ``before``: only those created before it (the cursor)."""
    rows = await conn.execute(text(
        "SELECT operation_id, status, payload, retry_count, not_before, error_message, result, created_at, "
        "updated_at FROM operations WHERE bank_id = :bank AND operation_type = :type "
        "AND payload::jsonb ->> 'webhook_id' = :webhook "
        "AND (CAST(:before AS timestamptz) IS NULL OR created_at < CAST(:before AS timestamptz)) "
        "ORDER BY created_at DESC, operation_id LIMIT :limit"
    ), {"bank": bank_id, "type": DELIVERY, "webhook": str(webhook_id), "before": before, "limit": limit + 1})
    return [dict(r._mapping) for r in rows]


async def document_counts(conn: AsyncConnection, bank_id: str, documents: Sequence[str]) -> dict[str, int]:
    """How many memories each document has now."""
    if not documents:
        return {}
    rows = await conn.execute(text(
        "SELECT document_id, count(*) FROM memory_units WHERE bank_id = :bank AND document_id = ANY(:docs) "
        "GROUP BY document_id"), {"bank": bank_id, "docs": list(documents)})
    return {r[0]: int(r[1]) for r in rows}
