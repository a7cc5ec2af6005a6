"""A bank's webhooks (migration 20), their events waiting in the outbox (migration 22), and their
deliveries: operations of type ``webhook_delivery``.

An event is written to the outbox in the transaction of the change it tells of, and taken out in the
transaction that queues its deliveries: each event is queued once, whatever process dies in between.
A delivery row's payload is what to send and where (the event's JSON body, the URL and HTTP settings
as they were when it was queued); the secret stays in the webhook's row and is read when the delivery
is made, so no operation payload ever shows it.
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


def outbox_statements() -> list[str]:
    """DDL of the outbox (migration 22): rows live from a change's commit until a worker queues their
    deliveries, so the table is usually empty; on Citus it is distributed by ``bank_id``."""
    return [
        """CREATE TABLE IF NOT EXISTS webhook_outbox (
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            event_id uuid NOT NULL,
            event_type text NOT NULL,
            body text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (bank_id, event_id))""",
        "CREATE INDEX IF NOT EXISTS idx_webhook_outbox_created ON webhook_outbox (created_at)",
    ]


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


async def any_subscribed(conn: AsyncConnection, bank_id: str, event_type: str) -> bool:
    """Whether an enabled webhook of the bank takes ``event_type`` (one indexed read)."""
    return bool(await conn.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM webhooks WHERE bank_id = :bank AND enabled AND :event = ANY(event_types))"
    ), {"bank": bank_id, "event": event_type}))


async def record(conn: AsyncConnection, bank_id: str, events: Sequence[tuple[uuid.UUID, str, str]]) -> None:
    """Write events, (event id, type, JSON body) each, to the outbox in the caller's transaction, in one
    statement; an id already there stays as it was (a write tried again records its events once)."""
    if not events:
        return
    await conn.execute(text(
        "INSERT INTO webhook_outbox (bank_id, event_id, event_type, body) "
        "SELECT :bank, e.id, e.type, e.body "
        "FROM unnest(CAST(:ids AS uuid[]), CAST(:types AS text[]), CAST(:bodies AS text[])) AS e (id, type, body) "
        "ON CONFLICT DO NOTHING"
    ), {"bank": bank_id, "ids": [e[0] for e in events], "types": [e[1] for e in events],
        "bodies": [e[2] for e in events]})


async def waiting(conn: AsyncConnection, limit: int) -> list[tuple[str, uuid.UUID]]:
    """Up to ``limit`` events of the outbox, (bank id, event id) each, oldest first (no lock taken)."""
    rows = await conn.execute(text(
        "SELECT bank_id, event_id FROM webhook_outbox ORDER BY created_at, event_id LIMIT :n"), {"n": limit})
    return [(r[0], r[1]) for r in rows]


async def take(conn: AsyncConnection, bank_id: str, event_ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, str, str]]:
    """Remove the bank's events from the outbox and return them, (event id, type, JSON body) each, oldest
    first: those another transaction took first are not among them (it holds or removed their rows)."""
    rows = await conn.execute(text(
        "DELETE FROM webhook_outbox WHERE bank_id = :bank AND event_id = ANY(CAST(:ids AS uuid[])) "
        "RETURNING event_id, event_type, body, created_at"
    ), {"bank": bank_id, "ids": list(event_ids)})
    return [(r[0], r[1], r[2]) for r in sorted(rows, key=lambda r: (r[3], r[0]))]


async def queue(conn: AsyncConnection, bank_id: str, deliveries: Sequence[tuple[uuid.UUID, str]]) -> None:
    """Queue deliveries, (operation id, payload) each, as pending operations, in one statement; an id
    already queued stays as it was."""
    if not deliveries:
        return
    await conn.execute(text(
        "INSERT INTO operations (bank_id, operation_id, operation_type, status, payload, items_count) "
        "SELECT :bank, d.id, :type, 'pending', d.payload, 1 "
        "FROM unnest(CAST(:ids AS uuid[]), CAST(:payloads AS text[])) AS d (id, payload) "
        "ON CONFLICT DO NOTHING"
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
