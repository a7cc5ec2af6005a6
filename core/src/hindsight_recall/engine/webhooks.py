"""A bank's webhooks and their deliveries (the deliveries themselves run in the queue's own lane).

An event (``retain.completed`` after each retained item) becomes one queued delivery per subscribed
webhook, in one statement after the retain committed. Each delivery's payload is what to send and where
(the event's JSON body as upstream sends it, the URL and HTTP settings as they were); its ``event_id`` is
the same for every webhook and attempt, so receivers dedupe on it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..store import banks, operations
from ..store import webhooks as store
from ._part import Part, require_bank

RETAIN_COMPLETED = "retain.completed"


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

    async def retain_completed(self, bank_id: str, items: Sequence[tuple[str | None, Sequence[str]]],
                               operation_id: str | None = None) -> int:
        """Queue ``retain.completed`` for each retained item, (document id, tags) each, to every enabled
        webhook of the bank that takes it, in one transaction; how many deliveries were queued.

        :param operation_id: the retain's operation (default: a new id, for a retain that was not queued).
        """
        async with self._db.connect() as conn:
            hooks = await store.subscribed(conn, bank_id, RETAIN_COMPLETED)
            if not hooks:
                return 0
            documents = sorted({d for d, _ in items if d})
            counts = await store.document_counts(conn, bank_id, documents)
            now, op = _iso(datetime.now(UTC)), operation_id or uuid.uuid4().hex
            events = [_event(bank_id, op, now, document, tags, counts) for document, tags in items]
            queued = [(uuid.uuid4(), json.dumps({"webhook_id": hook["id"], "url": hook["url"],
                                                 "event_type": RETAIN_COMPLETED, "event_id": event_id,
                                                 "http_config": hook["http_config"], "body": body}))
                      for event_id, body in events for hook in hooks]
            await store.queue(conn, bank_id, queued)
        return len(queued)

    async def delivery(self, op: operations.Operation) -> tuple[dict[str, Any], bool, str | None]:
        """What the delivery ``op`` sends (its task: ``webhook_id``, ``url``, ``event_type``, ``event_id``,
        ``http_config``, ``body``), whether its webhook still exists, and the webhook's secret (read now:
        no payload holds it)."""
        async with self._db.connect() as conn:
            payload, _ = await operations.payload_of(conn, op.bank_id, op.operation_id)
            task = json.loads(payload or "{}")
            exists, secret = await store.secret_of(conn, op.bank_id, task["webhook_id"])
        return task, exists, secret


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _event(bank_id: str, operation_id: str, now: str, document: str | None, tags: Sequence[str],
           counts: dict[str, int]) -> tuple[str, str]:
    """(event id, the JSON body) of one ``retain.completed``; null fields left out, as upstream."""
    event_id = str(uuid.uuid4())
    data: dict[str, Any] = {"tags": list(tags)} if tags else {}
    if document:
        data = {"document_id": document, **data, "memory_unit_count": counts.get(document, 0)}
    body = {"event_id": event_id, "event": RETAIN_COMPLETED, "bank_id": bank_id, "operation_id": operation_id,
            "status": "completed", "timestamp": now, "data": data}
    return event_id, json.dumps(body, separators=(",", ":"))
