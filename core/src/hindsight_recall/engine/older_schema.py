"""A database built as an older release left it, so that the upgrade :meth:`Engine.open` runs on it can be
timed and tested: opened without migrating, filled fast (see :mod:`hindsight_recall.store.older_schema`),
then handed to an engine, with a reader beside the upgrade that shows whether readers stalled."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from ..settings import Settings
from ..store import older_schema as store
from ..store.db import Database as Database  # re-exported: the handle these calls take
from ..store.schema import MIGRATIONS

#: the schema version an engine of this release upgrades a database to
LATEST = max(MIGRATIONS)
#: memories per generating statement (each its own transaction)
LOAD_BATCH = 50_000


@contextlib.asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[Database]:
    """The settings' database, opened as it is (no migration runs) and closed when the block ends; while it
    is open the embedded server stays up, also between engines."""
    db = Database(settings)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def build(db: Database, version: int, memories: int, bank_size: int, *, dimensions: int,
                loaded: Callable[[int], None] = lambda rows: None) -> None:
    """Create the schema of ``version`` in an empty database, then generate ``memories`` memories in banks of
    ``bank_size``, :data:`LOAD_BATCH` per transaction, and vacuum and analyze.

    :param db: an empty database, opened without migrating (:func:`opened`).
    :param version: the schema version to build.
    :param memories: how many memories.
    :param bank_size: memories per bank.
    :param dimensions: the embedding size.
    :param loaded: told how many memories are in after each batch.
    """
    async with db.connect() as conn:
        await store.create(conn, version, dimensions)
        await store.add_banks(conn, -(-memories // bank_size))
    for first in range(0, memories, LOAD_BATCH):
        last = min(first + LOAD_BATCH, memories)
        async with db.connect() as conn:
            await store.generate(conn, first, last - 1, bank_size=bank_size, dimensions=dimensions)
        loaded(last)
    await db.vacuum_analyze(["memory_units", "banks"])


async def upgraded(db: Database) -> dict[str, int]:
    """What the upgrade of a built database left: ``ann_rows``, ``positioned_rows``, ``invalid_indexes``."""
    async with db.connect() as conn:
        return await store.upgraded(conn)


@contextlib.contextmanager
def reads_watched(db: Database, interval: float) -> Iterator[dict[str, Any]]:
    """For the block, a reader in a thread reads one built memory every ``interval`` s on a connection of its
    own; once the block ends the dict yielded holds ``probe_reads`` and ``probe_slowest_seconds``."""
    out: dict[str, Any] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=store.probe, args=(db.url.replace("postgresql+psycopg", "postgresql"), stop,
                                                         interval, out))
    watcher.start()
    try:
        yield out
    finally:
        stop.set()
        watcher.join()
