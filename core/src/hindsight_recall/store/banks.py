"""Bank rows: creation, validation and per-bank setting overrides."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import InvalidRequest
from ..settings import BankSettings

MAX_BANK_ID = 256


def validate_bank_id(bank_id: Any) -> str:
    """A bank id is a non-empty string without NUL bytes, at most 256 characters."""
    if not isinstance(bank_id, str) or not bank_id.strip():
        raise InvalidRequest("bank_id", "must be a non-empty string")
    if "\x00" in bank_id or len(bank_id) > MAX_BANK_ID:
        raise InvalidRequest("bank_id", f"must not contain NUL bytes or exceed {MAX_BANK_ID} characters")
    return bank_id


async def ensure_bank(conn: AsyncConnection, bank_id: str) -> tuple[uuid.UUID, bool]:
    """Return the bank's internal id, creating the bank if needed; the flag says it was created."""
    created = await conn.scalar(
        text("INSERT INTO banks (bank_id, internal_id) VALUES (:bank, :iid) ON CONFLICT (bank_id) DO NOTHING "
             "RETURNING internal_id"),
        {"bank": bank_id, "iid": uuid.uuid4()},
    )
    if created is not None:
        return created, True
    existing = await conn.scalar(text("SELECT internal_id FROM banks WHERE bank_id = :bank"), {"bank": bank_id})
    return existing, False


async def bank_config(conn: AsyncConnection, bank_id: str) -> dict[str, Any] | None:
    """The bank's stored overrides, or ``None`` when the bank does not exist."""
    row = await conn.execute(text("SELECT config FROM banks WHERE bank_id = :bank"), {"bank": bank_id})
    found = row.first()
    return None if found is None else dict(found.config or {})


async def bank_state(conn: AsyncConnection, bank_id: str) -> tuple[dict[str, Any], bool] | None:
    """The bank's overrides and whether it is in the shared HNSW indexes; ``None`` for an unknown bank."""
    row = (await conn.execute(text("SELECT config, indexed FROM banks WHERE bank_id = :bank"),
                              {"bank": bank_id})).first()
    return None if row is None else (dict(row.config or {}), bool(row.indexed))


async def set_bank_config(conn: AsyncConnection, bank_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """Validate and merge overrides into ``banks.config``; ``None`` values remove a key."""
    unknown = sorted(set(values) - set(BankSettings.model_fields))
    if unknown:
        raise InvalidRequest(unknown[0], f"is not bank-configurable (choices: {', '.join(BankSettings.model_fields)})")
    current = await bank_config(conn, bank_id)
    if current is None:
        await ensure_bank(conn, bank_id)
        current = {}
    merged = {**current, **{k: v for k, v in values.items() if v is not None}}
    for key in (k for k, v in values.items() if v is None):
        merged.pop(key, None)
    checked = BankSettings(**merged)
    stored = {k: getattr(checked, k) for k in merged}
    await conn.execute(text("UPDATE banks SET config = CAST(:config AS jsonb) WHERE bank_id = :bank"),
                       {"config": json.dumps(stored), "bank": bank_id})
    return stored


async def delete_bank(conn: AsyncConnection, bank_id: str) -> bool:
    """Remove a bank with everything in it (rows only: no DDL); False if it did not exist."""
    # Locking the bank row first waits for retains in flight (they hold a key-share lock on it), so
    # no link can be written after its memories' links are deleted. Links and observation sources
    # carry no foreign keys.
    internal_id = await conn.scalar(
        text("SELECT internal_id FROM banks WHERE bank_id = :bank FOR UPDATE"), {"bank": bank_id}
    )
    if internal_id is None:
        return False
    for table, column in (("memory_links", "from_unit_id"), ("memory_links", "to_unit_id"),
                          ("observation_sources", "observation_id")):
        await conn.execute(text(
            f"DELETE FROM {table} d USING memory_units u WHERE u.bank_id = :bank AND d.{column} = u.id"
        ), {"bank": bank_id})
    await conn.execute(text("DELETE FROM banks WHERE bank_id = :bank"), {"bank": bank_id})
    return True
