"""A bank's webhooks, their events and their deliveries (the deliveries themselves run in the queue's own lane).

An event (``retain.completed`` after each retained item) is written to the outbox in the transaction of
the change it tells of (:class:`Retained`, the retain's ``within``), when a webhook of the bank takes it:
the event commits with its change or not at all. A queue worker then dispatches it (:meth:`Webhooks.dispatch`):
one queued delivery per subscribed webhook, in the transaction that takes the event out of the outbox.
Each delivery's payload is what to send and where (the event's JSON body as upstream sends it, the URL and
HTTP settings as they were); its ``event_id`` is the same for every webhook and attempt, so receivers
dedupe on it, and its operation id is derived from the event and the webhook, so it is queued once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ..store import banks, operations
from ..store import webhooks as store
from ._part import Part, require_bank

RETAIN_COMPLETED = "retain.completed"
#: events a worker takes from the outbox at a time
DISPATCH_EVENTS = 200


class Retained:
    """``retain.completed`` for each retained item, written to the outbox by the retain's own transaction:
    pass it as the retain's ``within``. Nothing is written when no enabled webhook of the bank takes the event.

    :param bank_id: the bank.
    :param items: (document id, tags) of each retained item.
    :param operation_id: the retain's operation (default: a new id, for a retain that was not queued).
    :param event_ids: each item's event id (default: new ones); a retain run again names the same ones.
    """

    def __init__(self, bank_id: str, items: Sequence[tuple[str | None, Sequence[str]]],
                 operation_id: str | None = None, event_ids: Sequence[uuid.UUID] | None = None) -> None:
        self.bank_id, self.items = bank_id, list(items)
        self.operation_id = operation_id or uuid.uuid4().hex
        self.event_ids = list(event_ids) if event_ids is not None else [uuid.uuid4() for _ in self.items]
        #: how many events the last transaction wrote
        self.recorded = 0

    async def __call__(self, conn: AsyncConnection) -> None:
        self.recorded = 0
        if not self.items or not await store.any_subscribed(conn, self.bank_id, RETAIN_COMPLETED):
            return
        counts = await store.document_counts(conn, self.bank_id, sorted({d for d, _ in self.items if d}))
        now = _iso(datetime.now(UTC))
        events = [(event_id, RETAIN_COMPLETED, _body(event_id, self.bank_id, self.operation_id, now, document, tags,
                                                     counts))
                  for event_id, (document, tags) in zip(self.event_ids, self.items, strict=True)]
        await store.record(conn, self.bank_id, events)
        self.recorded = len(events)


class Webhooks(Part):
    """Register, list, change and delete a bank's webhooks; queue the deliveries of their events and read them."""

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

    async def dispatch(self, limit: int = DISPATCH_EVENTS) -> int:
        """Queue the deliveries of up to ``limit`` events of the outbox, oldest first: one per enabled webhook
        of the bank that takes the event, in the transaction that takes the bank's events out of the outbox
        (an event another process took first is skipped). Returns how many events were taken."""
        async with self._db.connect() as conn:
            found = await store.waiting(conn, limit)
        by_bank: dict[str, list[uuid.UUID]] = {}
        for bank_id, event_id in found:
            by_bank.setdefault(bank_id, []).append(event_id)
        taken = 0
        for bank_id, event_ids in by_bank.items():
            async with self._db.connect() as conn:
                events = await store.take(conn, bank_id, event_ids)
                hooks: dict[str, list[dict[str, Any]]] = {}
                queued = []
                for event_id, event_type, body in events:
                    if event_type not in hooks:
                        hooks[event_type] = await store.subscribed(conn, bank_id, event_type)
                    queued += [(uuid.uuid5(event_id, hook["id"]), json.dumps({
                        "webhook_id": hook["id"], "url": hook["url"], "event_type": event_type,
                        "event_id": str(event_id), "http_config": hook["http_config"], "body": body}))
                        for hook in hooks[event_type]]
                await store.queue(conn, bank_id, queued)
            taken += len(events)
        return taken

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


def _body(event_id: uuid.UUID, bank_id: str, operation_id: str, now: str, document: str | None, tags: Sequence[str],
          counts: dict[str, int]) -> str:
    """The JSON body of one ``retain.completed``; null fields left out, as upstream."""
    data: dict[str, Any] = {"tags": list(tags)} if tags else {}
    if document:
        data = {"document_id": document, **data, "memory_unit_count": counts.get(document, 0)}
    body = {"event_id": str(event_id), "event": RETAIN_COMPLETED, "bank_id": bank_id, "operation_id": operation_id,
            "status": "completed", "timestamp": now, "data": data}
    return json.dumps(body, separators=(",", ":"))
