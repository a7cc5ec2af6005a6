"""The queue of async operations: what callers queue, read and change, and what a queue worker claims, renews,
records and ends. Each call is one transaction of its own (see :mod:`~hindsight_recall.store.operations`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import OperationIdInUse
from ..store import banks
from ..store import operations as store
from ..store.operations import Operation as Operation
from ._part import Part, require_bank

#: every status an operation can have, those a cancel and a retry change, and those it ends in
STATUSES = store.STATUSES
CANCELLABLE = store.CANCELLABLE
RETRYABLE = store.RETRYABLE
TERMINAL = store.TERMINAL
#: the operation type of one webhook event sent to one webhook (the queue's second lane)
DELIVERY_TYPE = store.DELIVERY_TYPE

#: what a caller may do to an operation: cancel it, queue it again, or remove its record once it ended
Change = Literal["cancel", "retry", "delete"]
_CHANGES: dict[str, Callable[[AsyncConnection, str, uuid.UUID], Awaitable[bool]]] = {
    "cancel": store.cancel, "retry": store.requeue, "delete": store.delete}

#: more work for a retain's transaction (see :meth:`~hindsight_recall.engine.Engine.retain_many`)
Within = Callable[[AsyncConnection], Awaitable[None]]


def chained(*steps: Within) -> Within:
    """One ``within`` that runs ``steps`` in order, in the same transaction.

    :param steps: the steps.
    """

    async def run(conn: AsyncConnection) -> None:
        for step in steps:
            await step(conn)

    return run


class Lost(Exception):
    """The operation is no longer this worker's to run (cancelled, deleted, or taken after its lease)."""


class Operations(Part):
    """Queue, list, read and change a bank's operations; claim and run them as a queue worker."""

    async def submit(self, bank_id: str, operation_id: uuid.UUID, operation_type: str, payload: str, items: int,
                     document_id: str | None, *, chosen: bool) -> int | None:
        """Queue an operation (the bank is created if needed); ``None`` when it was queued.

        An id the caller ``chosen`` that already names this bank's operation of the same type queues
        nothing and answers that operation's item count.

        :raises OperationIdInUse: the chosen id names another bank's operation, or another type of one.
        """
        async with self._transaction("queueing a retain") as conn:
            await banks.ensure_bank(conn, bank_id)
            replay = await _replay(conn, bank_id, operation_id, operation_type) if chosen else None
            if replay is None and not await store.submit(conn, bank_id, operation_id, operation_type, payload,
                                                         items, document_id):
                replay = await _replay(conn, bank_id, operation_id, operation_type)
            return replay

    async def submit_all(self, bank_id: str, operation_type: str,
                         queued: Sequence[tuple[uuid.UUID, str, int, str | None]]) -> None:
        """Queue several operations of one type in one transaction (the bank is created if needed): all
        of them or none.

        :param queued: each operation's (new) id, stored request, item count and document id.
        """
        async with self._transaction("queueing operations") as conn:
            await banks.ensure_bank(conn, bank_id)
            for operation_id, payload, items, document_id in queued:
                await store.submit(conn, bank_id, operation_id, operation_type, payload, items, document_id)

    async def page(self, bank_id: str, *, status: str | None, operation_type: str | None, limit: int,
                   offset: int) -> tuple[list[Operation], int]:
        """A page of the bank's operations, newest first, and how many match in all.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("listing operations") as conn:
            await require_bank(conn, bank_id)
            return await store.listing(conn, bank_id, status=status, operation_type=operation_type, limit=limit,
                                       offset=offset)

    async def get(self, bank_id: str, operation_id: uuid.UUID, *, with_payload: bool = False
                  ) -> tuple[Operation | None, str | None]:
        """The operation (``None`` when the bank has none with this id) and, when asked, its stored request."""
        async with self._transaction("reading an operation") as conn:
            op = await store.get(conn, bank_id, operation_id)
            payload = (await store.payload_of(conn, bank_id, operation_id))[0] if op and with_payload else None
            return op, payload

    async def of_bank(self, bank_id: str, operation_id: uuid.UUID | None) -> Operation | None:
        """The bank's operation with this id, or ``None`` (always for no id).

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("reading an operation") as conn:
            await require_bank(conn, bank_id)
            return None if operation_id is None else await store.get(conn, bank_id, operation_id)

    async def change(self, bank_id: str, operation_id: uuid.UUID, change: Change, *, bank_required: bool = False
                     ) -> tuple[bool, Operation | None]:
        """Cancel, retry or delete the operation: (True, None) when done; else (False, the operation as it is,
        whose status forbids it, or ``None`` when the bank has no such operation).

        :raises BankNotFound: ``bank_required`` and no such bank.
        """
        what = {"cancel": "cancelled", "retry": "retried", "delete": "deleted"}[change]
        async with self._transaction(f"{what} an operation") as conn:
            if bank_required:
                await require_bank(conn, bank_id)
            if await _CHANGES[change](conn, bank_id, operation_id):
                return True, None
            return False, await store.get(conn, bank_id, operation_id)

    # ---- the queue worker's side: each call its own transaction, driver errors left as they are ----------

    async def candidates(self, limit: int, *, deliveries: bool) -> list[tuple[str, uuid.UUID]]:
        """Up to ``limit`` claimable operations of one lane (webhook deliveries or the rest), oldest first."""
        async with self._db.connect() as conn:
            return await store.candidates(conn, limit, deliveries=deliveries)

    async def claim(self, bank_id: str, operation_id: uuid.UUID, worker_id: str, lease: float) -> Operation | None:
        """Take the operation for ``worker_id`` under a lease of ``lease`` seconds; ``None`` when not to be had."""
        async with self._db.connect() as conn:
            return await store.claim(conn, bank_id, operation_id, worker_id, lease)

    async def payload(self, op: Operation) -> tuple[str | None, Any]:
        """The operation's stored request and its plan (``None`` until a worker first ran it)."""
        async with self._db.connect() as conn:
            return await store.payload_of(conn, op.bank_id, op.operation_id)

    async def renew(self, op: Operation, worker_id: str, lease: float) -> bool:
        """Extend the lease; False when the operation is no longer this worker's."""
        async with self._db.connect() as conn:
            return await store.renew(conn, op, worker_id, lease)

    async def record_plan(self, op: Operation, worker_id: str, plan: Any) -> None:
        """Keep what the first run decided, so that a resumed run repeats the same writes.

        :raises Lost: the operation is no longer this worker's.
        """
        async with self._db.connect() as conn:
            if not await store.record_plan(conn, op, worker_id, json.dumps(plan)):
                raise Lost()

    async def progress(self, op: Operation, worker_id: str, stage: str, processed: int) -> None:
        """Record progress.

        :raises Lost: the operation is no longer this worker's.
        """
        async with self._db.connect() as conn:
            await self.progress_within(op, worker_id, stage, processed)(conn)

    def progress_within(self, op: Operation, worker_id: str, stage: str, processed: int) -> Within:
        """Progress recorded inside a retain's own transaction (its ``within``): a chunk is never written and
        not counted; raising :class:`Lost` rolls the chunk back."""

        async def record(conn: AsyncConnection) -> None:
            if not await store.progress(conn, op, worker_id, stage, processed):
                raise Lost()

        return record

    async def finish(self, op: Operation, worker_id: str, status: str, *, error: str | None = None,
                     result: dict[str, Any] | None = None) -> None:
        """End the run as ``completed`` or ``failed`` (a cancelled operation stays cancelled)."""
        stored = None if result is None else json.dumps(result)
        async with self._db.connect() as conn:
            await store.finish(conn, op, worker_id, status, error=error, result=stored)

    async def retry_later(self, op: Operation, worker_id: str, seconds: float, error: str,
                          result: dict[str, Any] | None) -> None:
        """End this attempt and queue the operation again in ``seconds``."""
        stored = None if result is None else json.dumps(result)
        async with self._db.connect() as conn:
            await store.retry_later(conn, op, worker_id, seconds, error, stored)

    async def release(self, keys: Sequence[tuple[str, uuid.UUID]], worker_id: str) -> int:
        """Hand this worker's running operations back to the queue (a clean shutdown); how many it had."""
        async with self._db.connect() as conn:
            return await store.release(conn, keys, worker_id)


async def _replay(conn: AsyncConnection, bank_id: str, operation_id: uuid.UUID, operation_type: str) -> int | None:
    """The item count of the operation a chosen id already names in this bank; raises if it names another."""
    owner = await store.owner_of(conn, operation_id)
    if owner is None:
        return None
    if owner[0] != bank_id or owner[1] != operation_type:
        raise OperationIdInUse(operation_id)
    return owner[2]
