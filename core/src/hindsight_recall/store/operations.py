"""The queue of async operations: one row per operation, claimed by any ``serve`` process on the database.

A worker claims a row with ``FOR UPDATE SKIP LOCKED`` and holds it by a lease (``lease_until``) that it
renews while it runs; a row whose lease ran out (its process died) is claimable again. One bank runs one
operation at a time (its retains queue on the bank's lock anyway), so a bank's operations run in order.
Every statement names its bank: on Citus the table is distributed by ``bank_id`` with the other bank tables.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

#: every status an operation can have (upstream's)
STATUSES = ("pending", "processing", "completed", "failed", "cancelled")
#: the statuses an operation ends in
TERMINAL = ("completed", "failed", "cancelled")
#: the statuses :func:`cancel` and :func:`requeue` change
CANCELLABLE = ("pending", "processing")
RETRYABLE = ("failed", "cancelled")

#: a row may be claimed: waiting (and not held back for a later retry), or processing under a lease that
#: ran out
_CLAIMABLE = ("((status = 'pending' AND (not_before IS NULL OR not_before <= now())) "
              "OR (status = 'processing' AND lease_until < now()))")
_LIVE = "status = 'processing' AND lease_until >= now()"
#: the queue's two lanes: webhook deliveries, and the rest (retains...). A bank runs one operation of each
#: lane at a time, so a slow or failing endpoint never holds back the bank's retains.
DELIVERY_TYPE = "webhook_delivery"
_LANE = {False: f"operation_type <> '{DELIVERY_TYPE}'", True: f"operation_type = '{DELIVERY_TYPE}'"}
#: the columns of :class:`Operation`
_COLUMNS = ("bank_id, operation_id, operation_type, status, items_count, document_id, processed, stage, "
            "progress_at, error_message, retry_count, attempts, worker_id, lease_until, created_at, updated_at, "
            "completed_at, result")


def table_statements() -> list[str]:
    """DDL of the queue (migration 13): keyed by bank first, so one bank's operations are one index range."""
    states = ", ".join(f"'{s}'" for s in STATUSES)
    return [
        f"""CREATE TABLE IF NOT EXISTS operations (
            bank_id text NOT NULL,
            operation_id uuid NOT NULL,
            operation_type text NOT NULL,
            status text NOT NULL CHECK (status IN ({states})),
            payload text,
            plan jsonb,
            items_count int NOT NULL DEFAULT 0,
            document_id text,
            processed int NOT NULL DEFAULT 0,
            stage text,
            progress_at timestamptz,
            error_message text,
            retry_count int NOT NULL DEFAULT 0,
            attempts int NOT NULL DEFAULT 0,
            worker_id text,
            lease_until timestamptz,
            result jsonb,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            completed_at timestamptz,
            PRIMARY KEY (bank_id, operation_id))""",
        "CREATE INDEX IF NOT EXISTS idx_operations_queue ON operations (created_at) "
        "WHERE status IN ('pending', 'processing')",
        "CREATE INDEX IF NOT EXISTS idx_operations_bank_created ON operations (bank_id, created_at DESC)",
    ]


@dataclass(frozen=True)
class Operation:
    """One row of the queue, without its payload."""

    bank_id: str
    operation_id: uuid.UUID
    operation_type: str
    status: str
    items_count: int
    document_id: str | None
    processed: int
    stage: str | None
    progress_at: datetime | None
    error_message: str | None
    retry_count: int
    attempts: int
    worker_id: str | None
    lease_until: datetime | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    result: dict[str, Any] | None


def _operation(row: Any) -> Operation:
    return Operation(*row[:18])


#: a bank transfer (an export, import or clone, done before its request was answered; see
#: :mod:`.transfer`) in the columns of an operation, so the queue's routes list and read it
_TRANSFER = ("bank_id, id, kind, status, 0, NULL::text, 0, status, updated_at, error, 0, 1, NULL::text, "
             "NULL::timestamptz, created_at, updated_at, updated_at, result")
#: every operation of the bank ``:bank``: the queue's and the transfers'
_ALL = (f"(SELECT {_COLUMNS} FROM operations WHERE bank_id = :bank "
        f"UNION ALL SELECT {_TRANSFER} FROM bank_transfers WHERE bank_id = :bank) AS o")


async def submit(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID, operation_type: str, payload: str,
                 items_count: int, document_id: str | None) -> bool:
    """Queue an operation; False when this bank already has one with this id (nothing is queued)."""
    created = await conn.scalar(text(
        "INSERT INTO operations (bank_id, operation_id, operation_type, status, payload, items_count, document_id) "
        "VALUES (:bank, :id, :type, 'pending', :payload, :items, :doc) ON CONFLICT DO NOTHING RETURNING operation_id"
    ), {"bank": bank_id, "id": operation_id, "type": operation_type, "payload": payload, "items": items_count,
        "doc": document_id})
    return created is not None


async def owner_of(conn: AsyncConnection, operation_id: uuid.UUID) -> tuple[str, str, int] | None:
    """(bank, type, items) of the operation with this id in any bank (a client-chosen id is unique)."""
    row = (await conn.execute(text(
        "SELECT bank_id, operation_type, items_count FROM operations WHERE operation_id = :id LIMIT 1"
    ), {"id": operation_id})).first()
    return None if row is None else (row[0], row[1], row[2])


async def get(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID) -> Operation | None:
    """One operation of the bank: queued, or a transfer's record."""
    params = {"bank": bank_id, "id": operation_id}
    row = (await conn.execute(text(
        f"SELECT {_COLUMNS} FROM operations WHERE bank_id = :bank AND operation_id = :id"), params)).first()
    if row is None:
        row = (await conn.execute(text(
            f"SELECT {_TRANSFER} FROM bank_transfers WHERE bank_id = :bank AND id = :id"), params)).first()
    return None if row is None else _operation(row)


async def payload_of(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID) -> tuple[str | None, Any]:
    """The operation's stored request and its plan (``None`` until a worker first ran it)."""
    row = (await conn.execute(text(
        "SELECT payload, plan FROM operations WHERE bank_id = :bank AND operation_id = :id"
    ), {"bank": bank_id, "id": operation_id})).first()
    return (None, None) if row is None else (row[0], row[1])


async def listing(conn: AsyncConnection, bank_id: str, *, status: str | None, operation_type: str | None,
                  limit: int, offset: int) -> tuple[list[Operation], int]:
    """A page of the bank's operations (the transfers' among them), newest first, and how many match in all."""
    where = "true"
    params: dict[str, Any] = {"bank": bank_id, "limit": limit, "offset": offset}
    if status is not None:
        where += " AND status = :status"
        params["status"] = status
    if operation_type is not None:
        where += " AND operation_type = :type"
        params["type"] = operation_type
    total = await conn.scalar(text(f"SELECT count(*) FROM {_ALL} WHERE {where}"), params)
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM {_ALL} WHERE {where} ORDER BY created_at DESC, operation_id "
        "LIMIT :limit OFFSET :offset"
    ), params)
    return [_operation(r) for r in rows], int(total or 0)


async def cancel(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID) -> bool:
    """Mark a pending or processing operation cancelled (its worker stops at its next checkpoint)."""
    done = await conn.scalar(text(
        "UPDATE operations SET status = 'cancelled', updated_at = clock_timestamp() "
        "WHERE bank_id = :bank AND operation_id = :id AND status = ANY(:states) RETURNING 1"
    ), {"bank": bank_id, "id": operation_id, "states": list(CANCELLABLE)})
    return done is not None


async def requeue(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID) -> bool:
    """Queue a failed or cancelled operation again; it resumes after the work it had committed."""
    done = await conn.scalar(text(
        "UPDATE operations SET status = 'pending', error_message = NULL, completed_at = NULL, worker_id = NULL, "
        "lease_until = NULL, retry_count = 0, not_before = NULL, updated_at = clock_timestamp() "
        "WHERE bank_id = :bank AND operation_id = :id AND status = ANY(:states) RETURNING 1"
    ), {"bank": bank_id, "id": operation_id, "states": list(RETRYABLE)})
    return done is not None


async def delete(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID) -> bool:
    """Remove an operation that has ended (a transfer's record with its archive)."""
    params = {"bank": bank_id, "id": operation_id, "states": list(TERMINAL)}
    done = await conn.scalar(text(
        "DELETE FROM operations WHERE bank_id = :bank AND operation_id = :id "
        "AND status = ANY(:states) RETURNING 1"
    ), params)
    if done is None:
        done = await conn.scalar(text(
            "DELETE FROM bank_transfers WHERE bank_id = :bank AND id = :id AND status = ANY(:states) RETURNING 1"
        ), params)
    return done is not None


async def delete_bank(conn: AsyncConnection, bank_id: str) -> None:
    await conn.execute(text("DELETE FROM operations WHERE bank_id = :bank"), {"bank": bank_id})


# ---- the worker's side ---------------------------------------------------------------------------

async def candidates(conn: AsyncConnection, limit: int, deliveries: bool = False) -> list[tuple[str, uuid.UUID]]:
    """The oldest claimable operation of each bank that runs none of its lane now, oldest first (no lock
    taken); ``deliveries`` picks the lane of webhook deliveries, else the other one."""
    lane = _LANE[deliveries]
    rows = await conn.execute(text(
        "SELECT bank_id, operation_id FROM ("
        "  SELECT DISTINCT ON (o.bank_id) o.bank_id, o.operation_id, o.created_at FROM operations o"
        f"  WHERE {_CLAIMABLE}"
        f"   AND o.{lane} AND NOT EXISTS (SELECT 1 FROM operations p WHERE p.bank_id = o.bank_id"
        f"                   AND p.{lane} AND p.status = 'processing' AND p.lease_until >= now())"
        "  ORDER BY o.bank_id, o.created_at, o.operation_id"
        ") c ORDER BY created_at LIMIT :n"
    ), {"n": limit})
    return [(r[0], r[1]) for r in rows]


async def claim(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID, worker_id: str,
                lease: float) -> Operation | None:
    """Take the operation for ``worker_id`` under a lease of ``lease`` seconds; ``None`` when another worker
    has it, took it first, or runs another operation of its bank.

    Call in a transaction of its own: the bank's advisory lock and the row lock are held until it commits.
    """
    params = {"bank": bank_id, "id": operation_id}
    kind = await conn.scalar(text(
        f"SELECT operation_type FROM operations WHERE bank_id = :bank AND operation_id = :id AND {_CLAIMABLE} "
        "FOR UPDATE SKIP LOCKED"
    ), params)
    if kind is None:
        return None
    delivery = kind == DELIVERY_TYPE
    if not await conn.scalar(text("SELECT pg_try_advisory_xact_lock(hashtextextended(:key, 0))"),
                             {"key": f"hindsight-operations:{bank_id}:{'delivery' if delivery else 'work'}"}):
        return None
    busy = await conn.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM operations WHERE bank_id = :bank AND operation_id <> :id "
        f"AND {_LANE[delivery]} AND {_LIVE})"
    ), params)
    if busy:
        return None
    row = (await conn.execute(text(
        "UPDATE operations SET status = 'processing', worker_id = :worker, attempts = attempts + 1, "
        "lease_until = clock_timestamp() + make_interval(secs => :lease), stage = 'claimed', "
        "progress_at = clock_timestamp(), updated_at = clock_timestamp() "
        f"WHERE bank_id = :bank AND operation_id = :id RETURNING {_COLUMNS}"
    ), {**params, "worker": worker_id, "lease": float(lease)})).first()
    return None if row is None else _operation(row)


#: the row is still this worker's to run
_OWNED = "bank_id = :bank AND operation_id = :id AND worker_id = :worker AND status = 'processing'"


async def renew(conn: AsyncConnection, op: Operation, worker_id: str, lease: float) -> bool:
    """Extend the lease; False when the operation is no longer this worker's (cancelled, deleted, taken)."""
    params = {"bank": op.bank_id, "id": op.operation_id, "worker": worker_id, "lease": float(lease)}
    done = await conn.scalar(text(
        "UPDATE operations SET lease_until = clock_timestamp() + make_interval(secs => :lease) "
        f"WHERE {_OWNED} RETURNING 1"
    ), params)
    return done is not None


async def record_plan(conn: AsyncConnection, op: Operation, worker_id: str, plan: str) -> bool:
    """Keep what the first run decided (a JSON text), so a resumed run repeats the same writes."""
    params = {"bank": op.bank_id, "id": op.operation_id, "worker": worker_id, "plan": plan}
    done = await conn.scalar(text(
        f"UPDATE operations SET plan = CAST(:plan AS jsonb) WHERE {_OWNED} AND plan IS NULL RETURNING 1"
    ), params)
    return done is not None


async def progress(conn: AsyncConnection, op: Operation, worker_id: str, stage: str, processed: int) -> bool:
    """Record progress; False when the operation is no longer this worker's."""
    params = {"bank": op.bank_id, "id": op.operation_id, "worker": worker_id, "stage": stage, "n": processed}
    done = await conn.scalar(text(
        "UPDATE operations SET stage = :stage, processed = :n, progress_at = clock_timestamp(), "
        f"updated_at = clock_timestamp() WHERE {_OWNED} RETURNING 1"
    ), params)
    return done is not None


async def finish(conn: AsyncConnection, op: Operation, worker_id: str, status: str, *,
                 error: str | None = None, result: str | None = None) -> bool:
    """End the run as ``completed`` or ``failed`` (a cancelled row stays cancelled)."""
    params = {"bank": op.bank_id, "id": op.operation_id, "worker": worker_id, "status": status, "error": error,
              "result": result}
    done = await conn.scalar(text(
        "UPDATE operations SET status = :status, error_message = :error, result = CAST(:result AS jsonb), "
        "stage = :status, progress_at = clock_timestamp(), lease_until = NULL, completed_at = clock_timestamp(), "
        f"updated_at = clock_timestamp() WHERE {_OWNED} RETURNING 1"
    ), params)
    return done is not None


async def retry_later(conn: AsyncConnection, op: Operation, worker_id: str, seconds: float, error: str,
                      result: str | None) -> bool:
    """End this attempt and queue the operation again in ``seconds`` (``retry_count`` goes up by one)."""
    params = {"bank": op.bank_id, "id": op.operation_id, "worker": worker_id, "secs": float(seconds),
              "error": error, "result": result}
    done = await conn.scalar(text(
        "UPDATE operations SET status = 'pending', retry_count = retry_count + 1, error_message = :error, "
        "result = CAST(:result AS jsonb), worker_id = NULL, lease_until = NULL, stage = 'waiting to retry', "
        "not_before = clock_timestamp() + make_interval(secs => :secs), progress_at = clock_timestamp(), "
        f"updated_at = clock_timestamp() WHERE {_OWNED} RETURNING 1"
    ), params)
    return done is not None


async def release(conn: AsyncConnection, keys: Sequence[tuple[str, uuid.UUID]], worker_id: str) -> int:
    """Hand this worker's running operations back to the queue (a clean shutdown): pending again at once."""
    released = 0
    for bank_id, operation_id in keys:
        params = {"bank": bank_id, "id": operation_id, "worker": worker_id}
        done = await conn.scalar(text(
            "UPDATE operations SET status = 'pending', worker_id = NULL, lease_until = NULL, stage = 'released', "
            f"updated_at = clock_timestamp() WHERE {_OWNED} RETURNING 1"
        ), params)
        released += done is not None
    return released


async def retains_of_document(conn: AsyncConnection, bank_id: str, document_id: str, limit: int, offset: int
                              ) -> tuple[list[tuple[uuid.UUID, str, dict[str, Any], datetime]], int]:
    """The bank's completed retains that wrote ``document_id`` (their plan counts it), newest first:
    (operation id, stored request, plan, when it completed); and how many there are."""
    where = ("bank_id = :bank AND operation_type = 'retain' AND status = 'completed' "
             "AND jsonb_exists(plan -> 'before', :doc)")
    params = {"bank": bank_id, "doc": document_id, "limit": limit, "offset": offset}
    total = await conn.scalar(text(f"SELECT count(*) FROM operations WHERE {where}"), params)
    rows = await conn.execute(text(
        f"SELECT operation_id, payload, plan, completed_at FROM operations WHERE {where} "
        "ORDER BY completed_at DESC, operation_id LIMIT :limit OFFSET :offset"), params)
    return [(r[0], r[1], r[2], r[3]) for r in rows], int(total or 0)
