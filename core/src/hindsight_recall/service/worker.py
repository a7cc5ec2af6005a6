"""The queue worker inside ``serve``: claims operations from the database and runs them.

Every ``serve`` process on a database runs one (SERVICE_OPERATION_WORKERS operations at once; 0 runs
none), so several processes share one queue. Webhook deliveries run in a lane of their own
(WEBHOOK_DELIVERY_WORKERS at once), so an endpoint that hangs or fails never holds back a retain. Before
each look at the queue the worker queues the deliveries of the webhook events waiting in the outbox
(those a process that died left there too, from the first look on).

A running operation's lease is renewed every third of SERVICE_OPERATION_LEASE; losing it (the operation
was cancelled, deleted, or its lease ran out and another worker took it) stops the run. On shutdown the
runs are cancelled (the chunk in flight rolls back) and their operations handed back to the queue, to
resume at the next start.

Between looks at the queue the worker keeps the database tidy, even in a process that runs no
operations: it prunes the audit log (AUDIT_LOG_RETENTION_DAYS) at start and every :data:`PRUNE_SECONDS` after.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from typing import Any

import httpx

from ..engine import Engine
from ..engine.operations import DELIVERY_TYPE, Lost, Operation
from ..engine.webhooks import DISPATCH_EVENTS
from ..errors import describe_error, redact
from . import async_retain, webhook_delivery, webhook_targets
from .errors import classify

log = logging.getLogger("hindsight_recall.service.worker")

#: seconds between looks at the queue when nothing woke the worker
POLL_SECONDS = 1.0
#: seconds an operation waits before it runs again after the database was away
PAUSE_SECONDS = 2.0
#: seconds a shutdown waits for the runs to roll back and be handed back
STOP_SECONDS = 3.0
#: seconds between prunes of the audit log; after a failed one, :data:`PRUNE_RETRY_SECONDS`
PRUNE_SECONDS = 3600.0
PRUNE_RETRY_SECONDS = 60.0

Key = tuple[str, uuid.UUID]


class Worker:
    """Claims and runs queued operations for one process.

    :param engine: the service's engine (opened before :meth:`run` is started).
    """

    def __init__(self, engine: Engine) -> None:
        settings = engine.settings
        self.engine = engine
        self.slots = settings.service_operation_workers
        #: deliveries run at once, in their own lane (none when the worker runs nothing)
        self.delivery_slots = settings.webhook_delivery_workers if self.slots else 0
        self.lease = settings.service_operation_lease
        self.chunk_items = settings.service_operation_chunk_items
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.running: dict[Key, asyncio.Task[None]] = {}
        self.delivering: dict[Key, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._http: httpx.AsyncClient | None = None
        #: when the audit log is pruned next (time.monotonic())
        self._prune_at = 0.0

    def wake(self) -> None:
        """Look at the queue now (an operation was just queued)."""
        self._wake.set()

    async def run(self) -> None:
        """Claim whenever a slot is free (never with no slots), and tidy up, until cancelled; at once
        when there is nothing to do (no slots, every audit entry kept)."""
        if self.slots == 0 and self.engine.settings.audit_log_retention_days == -1:
            return
        if self.slots:
            log.info("operation worker %s: %d at once", self.id, self.slots)
        while True:
            self._wake.clear()
            await self._dispatch()
            await self._prune()
            for lane, slots in ((self.running, self.slots), (self.delivering, self.delivery_slots)):
                if slots - len(lane) > 0:
                    try:
                        await self._claim(lane, slots - len(lane))
                    except Exception as exc:  # the database is away: look again later
                        log.warning("claiming operations failed: %s", redact(describe_error(exc) or repr(exc)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_SECONDS):
                    await self._wake.wait()

    async def _dispatch(self) -> None:
        """Queue the deliveries of the events in the outbox; with more left, look again at once."""
        try:
            if await self.engine.webhooks.dispatch() >= DISPATCH_EVENTS:
                self._wake.set()
        except Exception as exc:  # the database is away: the events wait in the outbox
            log.warning("queueing webhook deliveries failed: %s", redact(describe_error(exc) or repr(exc)))

    async def _prune(self) -> None:
        """Prune the audit log when it is time (never with AUDIT_LOG_RETENTION_DAYS=-1)."""
        if self.engine.settings.audit_log_retention_days == -1 or time.monotonic() < self._prune_at:
            return
        try:
            removed = await self.engine.audit.prune()
        except Exception as exc:  # the database is away: try again soon
            self._prune_at = time.monotonic() + PRUNE_RETRY_SECONDS
            log.warning("pruning the audit log failed: %s", redact(describe_error(exc) or repr(exc)))
            return
        self._prune_at = time.monotonic() + PRUNE_SECONDS
        if removed:
            log.info("pruned %d audit log entries older than %d days", removed,
                     self.engine.settings.audit_log_retention_days)

    async def _claim(self, lane: dict[Key, asyncio.Task[None]], free: int) -> None:
        queue = self.engine.operations
        found = await queue.candidates(free + len(lane), deliveries=lane is self.delivering)
        for key in found:
            if free == 0:
                return
            if key in lane:
                continue
            op = await queue.claim(key[0], key[1], self.id, self.lease)
            if op is None:
                continue
            free -= 1
            task = asyncio.create_task(self._run(op), name=f"operation-{op.operation_id}")
            lane[key] = task
            task.add_done_callback(functools.partial(self._ended, lane, key))

    def _ended(self, lane: dict[Key, asyncio.Task[None]], key: Key, task: asyncio.Task[None]) -> None:
        """A run ended: free its slot and look at the queue again."""
        lane.pop(key, None)
        self._wake.set()

    async def _run(self, op: Operation) -> None:
        """Run one claimed operation under its lease; record how it ended."""
        log.info("operation %s (%s, bank %s) started, attempt %d", op.operation_id, op.operation_type, op.bank_id,
                 op.attempts)
        work = asyncio.create_task(self._work(op))
        keeper = asyncio.create_task(self._keep_lease(op, work))
        try:
            result = await work
        except Lost:
            log.info("operation %s stopped: it was cancelled or is no longer this worker's", op.operation_id)
            return
        except webhook_delivery.RetryLater as later:
            log.info("delivery %s failed (%s); trying again in %g s", op.operation_id, later.message, later.seconds)
            await self._finish(op, "retry", error=later.message, result=later.result, delay=later.seconds)
            return
        except webhook_delivery.DeliveryFailed as failed:
            log.warning("delivery %s failed: %s", op.operation_id, failed)
            await self._finish(op, "failed", error=str(failed), result=failed.result)
            return
        except asyncio.CancelledError:
            work.cancel()
            await asyncio.wait({work}, timeout=STOP_SECONDS)  # its chunk in flight rolls back
            if not self._lost(keeper):
                raise
            log.info("operation %s stopped: it was cancelled or is no longer this worker's", op.operation_id)
            return
        except Exception as exc:
            error = classify(exc)  # the message a synchronous request would have answered
            message = redact(error.message)
            if error.code == "database_unavailable":  # not the operation's fault: it waits for the database
                log.warning("operation %s paused: %s", op.operation_id, message)
                await self._finish(op, "retry", error=message, delay=PAUSE_SECONDS)
                return
            log.warning("operation %s failed: %s", op.operation_id, message,
                        exc_info=exc if error.code == "internal_error" else None)
            await self._finish(op, "failed", error=message)
            return
        finally:
            keeper.cancel()
            with contextlib.suppress(BaseException):
                await keeper
        await self._finish(op, "completed", result=result)
        log.info("operation %s completed", op.operation_id)

    @staticmethod
    def _lost(keeper: asyncio.Task[None]) -> bool:
        return keeper.done() and not keeper.cancelled() and isinstance(keeper.exception(), Lost)

    async def _work(self, op: Operation) -> dict[str, Any]:
        if op.operation_type == DELIVERY_TYPE:
            return await webhook_delivery.deliver(self.engine, op, self._client())
        if op.operation_type != async_retain.RETAIN:
            raise ValueError(f"this server cannot run operations of type {op.operation_type!r}")
        result, told = await async_retain.run(self.engine, op, self.id, self.chunk_items)
        if told:
            self.wake()
        return result

    def _client(self) -> httpx.AsyncClient:
        """The HTTP client of every delivery (its connections kept between them, each opened only to an
        address that passed the webhook checks)."""
        if self._http is None:
            self._http = webhook_targets.client(self.engine.settings)
        return self._http

    async def _keep_lease(self, op: Operation, work: asyncio.Task[Any]) -> None:
        """Renew the lease while ``work`` runs; cancel it once the lease is lost or about to run out."""
        renewed = time.monotonic()
        while not work.done():
            await asyncio.sleep(self.lease / 3)
            try:
                mine = await self.engine.operations.renew(op, self.id, self.lease)
            except Exception as exc:
                log.warning("renewing the lease of operation %s failed: %s", op.operation_id,
                            redact(describe_error(exc) or repr(exc)))
                mine = time.monotonic() - renewed < self.lease * 2 / 3
            else:
                renewed = time.monotonic() if mine else renewed
            if not mine:
                work.cancel()
                raise Lost()

    async def _finish(self, op: Operation, status: str, *, error: str | None = None,
                      result: dict[str, Any] | None = None, delay: float = 0) -> None:
        """Record how the run ended; ``retry`` queues the operation again after ``delay`` seconds."""
        try:
            if status == "retry":
                await self.engine.operations.retry_later(op, self.id, delay, error or "", result)
            else:
                await self.engine.operations.finish(op, self.id, status, error=error, result=result)
        except Exception as exc:  # the lease runs out and another worker resumes it
            log.warning("recording the end of operation %s failed: %s", op.operation_id,
                        redact(describe_error(exc) or repr(exc)))

    async def stop(self) -> None:
        """Cancel the runs (the chunks in flight roll back) and hand their operations back to the queue."""
        runs = {**self.running, **self.delivering}
        if self._http is not None:  # a delivery cut short is attempted again (its lease runs out)
            await self._http.aclose()
        for task in runs.values():
            task.cancel()
        if not runs:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_SECONDS):
                await asyncio.gather(*runs.values(), return_exceptions=True)
                released = await self.engine.operations.release(list(runs), self.id)
                log.info("handed %d running operation(s) back to the queue", released)
