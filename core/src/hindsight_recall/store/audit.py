"""The audit log (migration 20): one row per write, kept after its bank is deleted."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_SUMMARY = ("id, action, transport, bank_id, started_at, ended_at, "
            "(extract(epoch FROM ended_at - started_at) * 1000)::int AS duration_ms, metadata")
#: a stats ``period`` -> how far back it reaches (upstream's: by day, from now)
PERIODS = {"1d": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}


def _row(row: Any) -> dict[str, Any]:
    found = dict(row._mapping)
    found["id"] = str(found["id"])
    for key in ("started_at", "ended_at"):
        found[key] = found[key].isoformat()
    return found


async def record(conn: AsyncConnection, entry: Mapping[str, Any]) -> None:
    """Keep one entry: ``bank_id``, ``action``, ``transport``, ``started_at``, ``ended_at``, ``request``,
    ``response`` (JSON-ready values or None) and ``metadata``."""
    await conn.execute(text(
        "INSERT INTO audit_log (bank_id, id, action, transport, started_at, ended_at, request, response, metadata) "
        "VALUES (:bank_id, :id, :action, :transport, :started_at, :ended_at, CAST(:request AS jsonb), "
        "CAST(:response AS jsonb), CAST(:metadata AS jsonb))"
    ), {**entry, "id": uuid.uuid4(), "request": _json(entry.get("request")), "response": _json(entry.get("response")),
        "metadata": json.dumps(entry.get("metadata") or {})})


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


async def known(conn: AsyncConnection, bank_id: str) -> bool:
    """Whether the bank exists or has entries (a deleted bank's log stays readable)."""
    return bool(await conn.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM banks WHERE bank_id = :bank) "
        "OR EXISTS (SELECT 1 FROM audit_log WHERE bank_id = :bank)"), {"bank": bank_id}))


async def page(conn: AsyncConnection, bank_id: str, *, action: str | None, transport: str | None,
               start: datetime | None, end: datetime | None, limit: int, offset: int
               ) -> tuple[list[dict[str, Any]], int]:
    """The bank's entries, newest first, with upstream's filters; and how many match."""
    where = ["bank_id = :bank"]
    params: dict[str, Any] = {"bank": bank_id, "action": action, "transport": transport, "start": start,
                              "end": end, "limit": limit, "offset": offset}
    where += [clause for value, clause in ((action, "action = :action"), (transport, "transport = :transport"),
                                           (start, "started_at >= :start"), (end, "started_at < :end"))
              if value is not None]
    clause = " AND ".join(where)
    total = await conn.scalar(text(f"SELECT count(*) FROM audit_log WHERE {clause}"), params)
    rows = await conn.execute(text(
        f"SELECT {_SUMMARY} FROM audit_log WHERE {clause} ORDER BY started_at DESC, id LIMIT :limit OFFSET :offset"
    ), params)
    return [_row(r) for r in rows], int(total or 0)


async def get(conn: AsyncConnection, bank_id: str, log_id: uuid.UUID) -> dict[str, Any] | None:
    row = (await conn.execute(text(
        f"SELECT {_SUMMARY}, request, response FROM audit_log WHERE bank_id = :bank AND id = :id"
    ), {"bank": bank_id, "id": log_id})).first()
    return None if row is None else _row(row)


async def stats(conn: AsyncConnection, bank_id: str, *, action: str | None, start: datetime
                ) -> list[dict[str, Any]]:
    """Entries per UTC day and action since ``start``, oldest day first."""
    rows = await conn.execute(text(
        "SELECT date_trunc('day', started_at, 'UTC') AS day, action, count(*) FROM audit_log "
        "WHERE bank_id = :bank AND started_at >= :start AND (CAST(:action AS text) IS NULL OR action = :action) "
        "GROUP BY day, action ORDER BY day, action"
    ), {"bank": bank_id, "start": start, "action": action})
    buckets: dict[str, dict[str, int]] = {}
    for day, name, count in rows:
        buckets.setdefault(day.isoformat(), {})[name] = int(count)
    return [{"time": day, "actions": actions, "total": sum(actions.values())} for day, actions in buckets.items()]


async def prune(conn: AsyncConnection, before: datetime) -> int:
    """Remove every bank's entries that started before ``before``; how many went."""
    result = await conn.execute(text("DELETE FROM audit_log WHERE started_at < :before"), {"before": before})
    return int(result.rowcount or 0)
