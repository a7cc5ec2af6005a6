"""Which HNSW indexes hold a large bank's rows: a slot of its own, built once after a bulk load.

A bank below ``VECTOR_INDEX_MIN_ROWS`` memories is ranked exactly over its own rows. A bank that
reaches it claims one of ``VECTOR_INDEX_SLOTS`` slots: its rows carry ``ann_slot = n``, and three
partial HNSW indexes (``idx_mu_slot<n>_<fact type>``, ``WHERE ann_slot = n AND fact_type = ...``)
hold them and no other bank's rows. The index set is bounded by the slot count, not the bank
count, so planning time stays flat, and no retain runs DDL inside its transaction.

A load that claims a slot, or that brings a large part of a slotted bank's rows, writes its rows
while the slot has no index (the slot's indexes are dropped first) and builds them once after the
commit with ``CREATE INDEX CONCURRENTLY``: rows entering a live HNSW graph one by one cost about
13 times what a build costs. Meanwhile the bank is ranked exactly (``ann_slot = n`` holds for all
of its rows, with or without an index) and other banks go on. An interrupted build leaves an
INVALID index, which the planner never uses; the next load into the bank or the next start drops
it and builds again.

When every slot is taken, or on Citus, a bank goes into the three shared indexes (``ann``) as
before: its rows enter them one by one.

A slot is given back when its bank is deleted, or shrinks below half the threshold: the bank is
then ranked exactly, and claims a slot again once it reaches the threshold. :func:`reclaim` runs
after the deleting commit and drops the indexes of slots no bank holds, so none are left behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..settings import Settings
from ..types import FACT_TYPES
from ..types import Placement as Placement  # re-exported: where a bank's rows are indexed
from .schema import raise_maintenance_memory

if TYPE_CHECKING:
    from .db import Database

log = logging.getLogger(__name__)

#: a load of at least this many rows into a bank with a slot may rebuild the slot's indexes ...
REBUILD_MIN_ROWS = 1_000
#: ... and does when it brings at least 1/REBUILD_RATIO of the bank's rows: building the whole bank
#: then costs less than the load's rows entering the live graph one at a time
REBUILD_RATIO = 8
_SLOT_INDEX = re.compile(r"^idx_mu_slot([0-9]+)_")
#: seconds between two tries for :func:`maintenance_turn`
TURN_POLL_SECONDS = 0.2


#: what a setting's name and value may hold: they are inlined, as SET takes no parameters
_PLAIN = re.compile(r"^[A-Za-z0-9_.]+$")


def set_local(wanted: Mapping[str, str]) -> str:
    """``SET LOCAL`` statements for the settings, in one string (one round trip).

    ``SET LOCAL`` rather than ``set_config``: Citus passes ``SET LOCAL`` on to the workers that run
    the transaction's statements (``citus.propagate_set_commands = local``), and a function call not.

    :raises ValueError: a name or value that is not a plain word or number.
    """
    for name, value in wanted.items():
        if not (_PLAIN.match(name) and _PLAIN.match(value)):
            raise ValueError(f"not a plain setting: {name}={value!r}")
    return "; ".join(f"SET LOCAL {name} = '{value}'" for name, value in wanted.items())



def slot_indexes(slot: int) -> dict[str, str]:
    """The slot's HNSW indexes, one per fact type: name -> ``CREATE INDEX`` body."""
    n = int(slot)
    return {
        f"idx_mu_slot{n}_{ft}":
            f"memory_units USING hnsw (embedding vector_cosine_ops) WHERE ann_slot = {n} AND fact_type = '{ft}'"
        for ft in FACT_TYPES
    }


async def placement(conn: AsyncConnection, bank_id: str) -> Placement:
    """The bank's placement (no index for an unknown bank)."""
    row = (await conn.execute(text("SELECT ann_slot, indexed FROM banks WHERE bank_id = :bank"),
                              {"bank": bank_id})).first()
    if row is None:
        return Placement()
    return Placement(None if row.ann_slot is None else int(row.ann_slot), bool(row.indexed))


async def place(conn: AsyncConnection, bank_id: str, adding: int, settings: Settings, *, citus: bool) -> Placement:
    """Where this load's rows go, in the retain transaction (under the bank's lock), before they are
    written. A bank that reaches ``VECTOR_INDEX_MIN_ROWS`` with them claims a free slot, else goes into
    the shared indexes; either way its present rows are flagged (row updates, no DDL)."""
    current = await placement(conn, bank_id)
    if current.slot is not None or current.shared:
        return current
    if not await reaches_threshold(conn, bank_id, adding, settings.vector_index_min_rows):
        return current
    if settings.vector_index_slots and not citus:
        slot = await _claim(conn, bank_id, settings.vector_index_slots)
        if slot is not None:
            return Placement(slot=slot)
    await conn.execute(text("UPDATE memory_units SET ann = true WHERE bank_id = :bank AND NOT ann"), {"bank": bank_id})
    await conn.execute(text("UPDATE banks SET indexed = true WHERE bank_id = :bank"), {"bank": bank_id})
    return Placement(shared=True)


async def reaches_threshold(conn: AsyncConnection, bank_id: str, adding: int, threshold: int) -> bool:
    """Whether the bank holds ``threshold`` memories once ``adding`` more are written (an upper bound)."""
    if adding >= threshold:
        return True
    return await _rows(conn, bank_id, threshold - adding) + adding >= threshold


async def _rows(conn: AsyncConnection, bank_id: str, upto: int) -> int:
    """The bank's memories, counted up to ``upto``."""
    return int(await conn.scalar(text(
        "SELECT count(*) FROM (SELECT 1 FROM memory_units WHERE bank_id = :bank LIMIT :n) t"
    ), {"bank": bank_id, "n": upto}) or 0)


def _lock_key(name: str) -> int:
    """A signed 64-bit advisory-lock key."""
    digest = hashlib.blake2b(f"hindsight_recall.{name}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def _slot_lock_key(slot: int) -> int:
    return _lock_key(f"ann_slot\0{int(slot)}")


@asynccontextmanager
async def maintenance_turn(db: Database) -> AsyncIterator[AsyncConnection]:
    """An autocommit connection that holds the turn for index builds, drops and vacuums of
    ``memory_units``, across processes.

    Two such commands on one table deadlock: each waits for the other's transaction to end (a
    concurrent build waits for every older snapshot), then for the other's lock. The turn is
    polled with ``pg_try_advisory_lock``: a waiter blocked in ``pg_advisory_lock`` would hold a
    snapshot, and the build holding the turn would wait for it.
    """
    async with db.maintenance() as conn:
        key = _lock_key("memory_units.maintenance")
        while not await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}):
            await asyncio.sleep(TURN_POLL_SECONDS)
        try:
            yield conn
        finally:
            await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})


async def _claim(conn: AsyncConnection, bank_id: str, slots: int) -> int | None:
    """Take the first free slot for the bank, or None when all are taken.

    A claim is a row update held to the end of its retain; a transaction-level advisory lock per
    slot keeps two loads from claiming the same one without either waiting for the other.
    """
    taken = await _held(conn)
    for slot in range(1, slots + 1):
        if slot in taken:
            continue
        if not await conn.scalar(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": _slot_lock_key(slot)}):
            continue  # another load is claiming it
        # a claim committed since the read above (its lock goes only after its commit is visible)
        if await conn.scalar(text("SELECT EXISTS (SELECT 1 FROM banks WHERE ann_slot = :slot)"), {"slot": slot}):
            continue
        params = {"bank": bank_id, "slot": slot}
        await conn.execute(text("UPDATE memory_units SET ann_slot = :slot WHERE bank_id = :bank"), params)
        await conn.execute(text("UPDATE banks SET ann_slot = :slot WHERE bank_id = :bank"), params)
        return slot
    return None


async def reclaim(db: Database, settings: Settings, bank_id: str | None = None) -> None:
    """After a commit that deleted a bank or some of a bank's memories: a slotted bank left with
    fewer than half of ``VECTOR_INDEX_MIN_ROWS`` memories gives its slot back, then the indexes of
    every slot no bank holds are dropped (``DROP INDEX CONCURRENTLY``, which no transaction may hold).

    A failure is logged, not raised: the delete is committed, and a slot held by a small bank or an
    orphan index costs only space until the next call, bulk load or start.

    :param db: the database.
    :param settings: the threshold (``VECTOR_INDEX_MIN_ROWS``).
    :param bank_id: the bank that lost memories; ``None`` after a bank was deleted.
    """
    if db.citus:
        return
    try:
        if bank_id is not None:
            await _release_if_small(db, bank_id, settings.vector_index_min_rows)
        async with db.connect() as conn:
            if not _orphans(await index_state(conn), await _held(conn)):
                return
        async with maintenance_turn(db) as conn:
            dropped = await _drop_orphans(conn)
        log.info("dropped the HNSW indexes %s of slots given back", dropped)
    except Exception as exc:  # the delete is committed; what is left is dropped at the next chance
        log.warning("giving back HNSW slots after a delete failed; the next delete, bulk load or start "
                    "does it: %s", exc)


async def _release_if_small(db: Database, bank_id: str, threshold: int) -> int | None:
    """Give the bank's slot back if it holds fewer than half of ``threshold`` memories; the slot, if so.

    Half, not the threshold itself: a bank hovering around the threshold would otherwise give its
    slot back and claim it again, dropping and rebuilding three HNSW indexes each time.
    """
    keep = (threshold + 1) // 2  # rows < threshold / 2, in integers
    async with db.connect() as conn:
        slot = (await placement(conn, bank_id)).slot
        if slot is None or await _rows(conn, bank_id, keep) >= keep:
            return None
        # the bank row's lock, as forget's: a retain in flight (which holds a key-share lock from
        # before its placement) commits first, and the next one reads the placement left here
        slot = await conn.scalar(text("SELECT ann_slot FROM banks WHERE bank_id = :bank FOR UPDATE"),
                                 {"bank": bank_id})
        if slot is None or await _rows(conn, bank_id, keep) >= keep:
            return None
        params = {"bank": bank_id}
        await conn.execute(text(
            "UPDATE memory_units SET ann_slot = NULL WHERE bank_id = :bank AND ann_slot IS NOT NULL"), params)
        await conn.execute(text("UPDATE banks SET ann_slot = NULL, indexed = false WHERE bank_id = :bank"), params)
    log.info("bank %r gave back HNSW slot %d", bank_id, slot)
    return int(slot)


async def _drop_orphans(conn: AsyncConnection) -> list[str]:
    """In turn: drop the indexes of slots no bank holds; the names dropped.

    A load claims a slot without the turn, so one may claim a slot while its indexes are dropped, its
    build after the commit having found them still valid: slots held by the end are built again here.
    """
    names = _orphans(await index_state(conn), await _held(conn))
    for name in names:
        await conn.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
    claimed = {_slot_of(name) for name in names} & await _held(conn)
    if claimed:
        built = await index_state(conn)
        await _create(conn, built, _missing(built, claimed))
    return names


async def _create(conn: AsyncConnection, built: Mapping[str, bool], todo: Mapping[str, str]) -> None:
    """In turn: build the indexes (name -> body), dropping an INVALID one of the same name first."""
    await raise_maintenance_memory(conn)
    for name, body in todo.items():
        if name in built:
            await conn.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
        await conn.execute(text(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {body}"))


async def before_load(db: Database, sizes: Mapping[str, int], settings: Settings) -> set[int]:
    """Before a retain's transaction: drop the indexes its rows should not enter one by one.

    A bulk load (``REBUILD_MIN_ROWS`` or more) into a slotted bank it grows by 1/``REBUILD_RATIO`` or
    more drops that slot's indexes (rebuilt after the commit); one into a bank that may claim a slot
    drops the indexes left by deleted banks. ``DROP INDEX CONCURRENTLY``: nothing is locked for long.
    Returns the slots of banks whose indexes were dropped (for :func:`build` after the load).
    """
    if not settings.vector_index_slots or db.citus:
        return set()
    bulk = {bank: n for bank, n in sizes.items() if n >= REBUILD_MIN_ROWS}
    if not bulk:
        return set()
    rebuild: set[int] = set()
    async with db.connect() as conn:
        orphans = False
        for bank_id, n in bulk.items():
            current = await placement(conn, bank_id)
            if current.slot is not None:
                if await _rows(conn, bank_id, n * REBUILD_RATIO) < n * REBUILD_RATIO:
                    rebuild.add(current.slot)
            elif not current.shared:
                orphans = True
        built = await index_state(conn)
        orphans = orphans and bool(_orphans(built, await _held(conn)))
    if not orphans and not any(name in built for slot in rebuild for name in slot_indexes(slot)):
        return rebuild
    async with maintenance_turn(db) as conn:
        # again, in turn: a slot claimed meanwhile may be building its indexes
        built = await index_state(conn)
        names = [name for slot in sorted(rebuild) for name in slot_indexes(slot) if name in built]
        for name in names:
            await conn.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
        if orphans:
            names += await _drop_orphans(conn)
    log.info("dropped HNSW indexes %s before a bulk load", names)
    return rebuild


async def build(db: Database, slots: Collection[int]) -> float:
    """Build the slots' missing indexes (an INVALID one, left by an interrupted build, is dropped
    first) with ``CREATE INDEX CONCURRENTLY``, outside any transaction; seconds spent."""
    if not slots:
        return 0.0
    async with db.connect() as conn:
        if not _missing(await index_state(conn), slots):
            return 0.0
    started = time.perf_counter()
    async with maintenance_turn(db) as conn:
        # again, in turn: an index that was being built (INVALID until done) may be valid by now, and
        # a slot given back meanwhile is left alone (its indexes would be orphans)
        built, held = await index_state(conn), await _held(conn)
        todo = _missing(built, set(slots) & held)
        if not todo:
            return 0.0
        await _create(conn, built, todo)
    seconds = time.perf_counter() - started
    log.info("built %d HNSW indexes of slots %s in %.1f s", len(todo), sorted(set(slots)), seconds)
    return seconds


def _missing(built: Mapping[str, bool], slots: Collection[int]) -> dict[str, str]:
    """The slots' indexes that are not there or not valid: name -> body."""
    return {name: body for slot in sorted(set(slots)) for name, body in slot_indexes(slot).items()
            if not built.get(name, False)}


def _orphans(built: Mapping[str, bool], held: Collection[int]) -> list[str]:
    """Slot indexes of slots no bank holds (left by deleted banks)."""
    return [name for name in built if _slot_of(name) not in held]


async def repair(db: Database) -> None:
    """At start: drop the slot indexes no bank holds and build the held slots' missing or INVALID
    ones (a load or build that was interrupted)."""
    if db.citus:
        return
    async with db.connect() as conn:
        built, held = await index_state(conn), await _held(conn)
    if not _orphans(built, held) and not _missing(built, held):
        return
    async with maintenance_turn(db) as conn:
        # again, in turn: a slot claimed meanwhile may be building its indexes
        built, held = await index_state(conn), await _held(conn)
        await _drop_orphans(conn)
    if _missing(built, held):
        log.warning("building the HNSW indexes of slots %s, left unbuilt by an interrupted load", sorted(held))
        await build(db, held)


async def searchable(conn: AsyncConnection, where: Placement) -> bool:
    """Whether the bank's rows can be searched through an index now (a slot's may be in a rebuild)."""
    if where.slot is None:
        return where.shared
    built = await index_state(conn)
    return all(built.get(name, False) for name in slot_indexes(where.slot))


async def index_state(conn: AsyncConnection) -> dict[str, bool]:
    """Every slot index in the schema: name -> valid (False for one an interrupted build left)."""
    rows = await conn.execute(text(
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relname LIKE 'idx\\_mu\\_slot%'"
    ))
    return {r.relname: bool(r.indisvalid) for r in rows}


async def _held(conn: AsyncConnection) -> set[int]:
    return {int(s) for s in (await conn.execute(text(
        "SELECT ann_slot FROM banks WHERE ann_slot IS NOT NULL"))).scalars()}


def _slot_of(name: str) -> int:
    found = _SLOT_INDEX.match(name)
    return int(found.group(1)) if found else 0
