"""A bank's webhooks and their deliveries (the deliveries themselves run in the queue's own lane)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..store import banks
from ..store import webhooks as store
from ._part import Part, require_bank


class Webhooks(Part):
    """Register, list, change and delete a bank's webhooks; read a webhook's deliveries."""

    async def create(self, bank_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Register a webhook; the bank is created if needed."""
        async with self._transaction("register webhook") as conn:
            await banks.ensure_bank(conn, bank_id)
            return await store.create(conn, bank_id, fields)

    async def page(self, bank_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of the bank's webhooks and how many it has.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("list webhooks") as conn:
            await require_bank(conn, bank_id)
            return await store.page(conn, bank_id, limit, offset)

    async def update(self, bank_id: str, webhook_id: uuid.UUID, changes: Mapping[str, Any]) -> dict[str, Any] | None:
        """The webhook changed, or ``None`` when there is no such webhook."""
        async with self._transaction("update webhook") as conn:
            return await store.update(conn, bank_id, webhook_id, changes)

    async def delete(self, bank_id: str, webhook_id: uuid.UUID) -> bool:
        """False when there was no such webhook."""
        async with self._transaction("delete webhook") as conn:
            return await store.delete(conn, bank_id, webhook_id)

    async def deliveries(self, bank_id: str, webhook_id: uuid.UUID, limit: int,
                         before: datetime | None) -> list[dict[str, Any]] | None:
        """Up to ``limit`` + 1 deliveries, newest first, created before ``before``; ``None`` when there is no
        such webhook."""
        async with self._transaction("list webhook deliveries") as conn:
            if await store.get(conn, bank_id, webhook_id) is None:
                return None
            return await store.deliveries(conn, bank_id, webhook_id, limit, before)
