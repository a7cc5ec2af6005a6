"""A bank's audit log: every write recorded (who, what, when; kept after the bank is deleted), read, and
pruned after AUDIT_LOG_RETENTION_DAYS."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ..store import audit as store
from ._part import Part

#: the periods the log's stats cover, by name
PERIODS = store.PERIODS


class Audit(Part):
    """Record entries, read a bank's log, and prune old entries."""

    async def record(self, entry: Mapping[str, Any]) -> None:
        """Store one entry, in a transaction of its own."""
        async with self._db.connect() as conn:
            await store.record(conn, entry)

    async def known(self, bank_id: str) -> bool:
        """Whether the bank exists or has entries (its log outlives it)."""
        async with self._transaction("read the audit log") as conn:
            return await store.known(conn, bank_id)

    async def page(self, bank_id: str, **filters: Any) -> tuple[list[dict[str, Any]], int]:
        """Entries newest first and how many match: ``action``, ``transport``, ``start``, ``end``, ``limit``,
        ``offset``."""
        async with self._db.connect() as conn:
            return await store.page(conn, bank_id, **filters)

    async def stats(self, bank_id: str, *, action: str | None, start: datetime) -> list[dict[str, Any]]:
        """Entries per UTC day and action since ``start``."""
        async with self._db.connect() as conn:
            return await store.stats(conn, bank_id, action=action, start=start)

    async def get(self, bank_id: str, log_id: uuid.UUID) -> dict[str, Any] | None:
        """One entry with its request and response bodies, or ``None``."""
        async with self._db.connect() as conn:
            return await store.get(conn, bank_id, log_id)

    async def prune(self, days: int | None = None) -> int:
        """Remove the entries of every bank older than ``days`` (default AUDIT_LOG_RETENTION_DAYS, where -1
        keeps every entry); how many went.

        :raises ValueError: ``days`` is neither -1 nor at least 1.
        """
        days = self._db.settings.audit_log_retention_days if days is None else days
        if days != -1 and days < 1:
            raise ValueError(f"days: must be at least 1, or -1 to keep every entry; got {days}")
        if days == -1:
            return 0
        async with self._transaction("prune the audit log") as conn:
            return await store.prune(conn, datetime.now(UTC) - timedelta(days=days))
