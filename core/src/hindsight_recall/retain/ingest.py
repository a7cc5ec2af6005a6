"""Retain: embed ready-made facts and bulk-load them with their entities, chunks and links.

Every call is one transaction (:meth:`Ingestor.transaction`; the writes themselves are in
:mod:`._transaction`). No DDL runs in it: a bank that reaches ``VECTOR_INDEX_MIN_ROWS`` memories has its
rows flagged into HNSW indexes of its own (a slot) or the shared ones, a row update; a slot's indexes
are built once after a bulk load commits (see :mod:`..store.ann`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import RetainError
from ..protocols import EmbeddingProvider, TextSearchBackend
from ..settings import Settings
from ..store import ann, banks
from ..store.citus import vacuum_shards
from ..store.db import Database
from ..store.driver import driver_connection
from ..store.vector_types import register_vector
from ..textsearch import backend_parameters
from ..tokens import TokenCounter
from ..types import Memory
from ._embed import embed_passages
from ._rows import entity_id as entity_id  # re-exported: the ids are part of the retain API
from ._rows import unit_id as unit_id
from ._stats import RetainStats as RetainStats  # re-exported: what a retain call returns
from ._transaction import Transaction
from ._transaction import positions as positions
from ._transaction import text_signals as text_signals
from .links import set_index_search

log = logging.getLogger(__name__)

#: a load of this many rows plus a tenth of the table is vacuumed and analyzed before retain returns
#: (autovacuum's analyze threshold)
MAINTAIN_MIN_ROWS = 50
MAINTAINED_TABLES = ("memory_units", "unit_entities", "memory_links", "observation_sources")


class Ingestor:
    """Validates, embeds and writes batches of memories, one transaction per call."""

    def __init__(
        self, db: Database, embedder: EmbeddingProvider, backend: TextSearchBackend, settings: Settings
    ) -> None:
        self.db, self.embedder, self.backend, self.settings = db, embedder, backend, settings
        self.backend_params = backend_parameters(backend)  # checked once, bound in every write
        self._tokens: TokenCounter | None = None

    @property
    def tokens(self) -> TokenCounter:
        """The recall packer's tokenizer: counts stored at retain spare packing a tokenization per recall."""
        if self._tokens is None:
            self._tokens = TokenCounter(self.settings.tokenizer_encoding)
        return self._tokens

    async def retain(
        self,
        batches: Mapping[str, Sequence[Memory]],
        *,
        lines: Mapping[str, Sequence[int]] | None = None,
        progress: bool | None = None,
        embeddings: Mapping[str, Sequence[Sequence[float]] | np.ndarray] | None = None,
        replace_documents: Mapping[str, Collection[str]] | None = None,
        document_sizes: Mapping[str, Mapping[str, int]] | None = None,
        within: Callable[[AsyncConnection], Awaitable[None]] | None = None,
    ) -> RetainStats:
        """Write every bank's memories; all or nothing.

        :param batches: bank id -> memories.
        :param lines: bank id -> source line numbers, for error messages.
        :param progress: show a progress bar (default: when stderr is a terminal).
        :param embeddings: bank id -> precomputed vectors aligned with that bank's memories; when
            given, the embedding model is not run (every bank needs its vectors).
        :param replace_documents: bank id -> documents the batch replaces whole (see :meth:`Transaction.write`).
        :param document_sizes: bank id -> document id -> memories it must hold now (see :meth:`Transaction.write`).
        :param within: more work for the same transaction, run once the memories are written.
        """
        for bank_id, memories in batches.items():
            banks.validate_bank_id(bank_id)
            _check_unique(memories, (lines or {}).get(bank_id))
        t0 = time.perf_counter()
        if embeddings is None:
            texts = [m.text for ms in batches.values() for m in ms]
            vectors = await embed_passages(self.embedder, texts, progress)
        else:
            vectors = self._given(batches, embeddings)
        embedding_seconds = time.perf_counter() - t0
        async with self.transaction({b: len(ms) for b, ms in batches.items()}) as tx:
            tx.stats.embedding_seconds = embedding_seconds
            offset = 0
            for bank_id, memories in batches.items():
                await tx.write(bank_id, memories, vectors[offset : offset + len(memories)],
                               lines=(lines or {}).get(bank_id),
                               replace_documents=(replace_documents or {}).get(bank_id, ()),
                               document_sizes=(document_sizes or {}).get(bank_id))
                offset += len(memories)
            if within is not None:
                await within(tx.conn)
        tx.stats.seconds += embedding_seconds
        return tx.stats

    @contextlib.asynccontextmanager
    async def transaction(self, sizes: Mapping[str, int]) -> AsyncIterator[Transaction]:
        """One transaction holding the locks of the banks in ``sizes`` (bank id -> memories it is about
        to get), committed when the block ends without an error and rolled back otherwise.

        Retains into one bank queue on its lock (taken in bank order, so two transactions never wait on
        each other in a cycle); retains into different banks never wait at all. The lock keeps a bank's
        placement (``indexed``, ``ann_slot``) and its rows' flags in step. After the commit the slots
        the writes placed banks in get their indexes, and a bulk load is vacuumed.
        """
        started = time.perf_counter()
        stats = RetainStats()
        # slots whose indexes were dropped for this load: built again after it, even if it fails
        slots = await ann.before_load(self.db, sizes, self.settings)
        try:
            async with self.db.connect() as conn:
                for key in sorted({_bank_lock_key(b) for b in sizes}):
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
                # once per connection, and before any row: on Citus the type lookup's savepoint then stays
                # on the coordinator instead of going to the worker
                await register_vector(await driver_connection(conn))
                if self.db.citus:  # sent now, these go with the worker's BEGIN instead of costing commands later
                    await set_index_search(conn)
                tx = Transaction(self, conn, stats, sizes)
                yield tx
                # the planner's estimate of the table's rows (on Citus the coordinator holds none)
                table_rows = 0 if self.db.citus or not stats.memories else await conn.scalar(text(
                    "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = 'memory_units'::regclass"
                ))
        except Exception:
            await self._build(slots)
            raise
        stats.index_build_seconds = await self._build(slots | tx.placed)
        t1 = time.perf_counter()
        await self._maintain(stats.per_bank, stats.memories, float(table_rows or 0))
        stats.maintenance_seconds = time.perf_counter() - t1
        stats.seconds = time.perf_counter() - started

    async def _maintain(self, written_per_bank: Mapping[str, int], written: int, table_rows: float) -> None:
        """After a bulk load, what autovacuum would do within a minute of it, done before the first
        recall: statistics for the planner and the keyword arm's term frequencies, and visibility maps,
        without which the graph arm's index-only walks over entity pairs fetch every heap row (a recall
        right after a load into a 50k-memory Citus cluster: 80 ms without, 36 ms with).

        On Citus only the shards holding the loaded banks are vacuumed, on their workers: the
        coordinator holds no rows to estimate the tables by, and a VACUUM of the tables would run on
        every shard of the cluster.
        """
        try:
            if self.db.citus:
                loaded = [b for b, n in written_per_bank.items() if needs_maintenance(n, 0)]
                if loaded:
                    async with self.db.connect() as conn:
                        await vacuum_shards(conn, loaded, MAINTAINED_TABLES)
            elif needs_maintenance(written, table_rows):
                async with ann.maintenance_turn(self.db):  # never beside an index build: they deadlock
                    await self.db.vacuum_analyze(MAINTAINED_TABLES)
        except Exception as exc:  # the memories are committed; this only speeds up recall
            log.warning("VACUUM (ANALYZE) after the load failed, autovacuum will do it later: %s", exc)

    async def _build(self, slots: set[int]) -> float:
        """Build the slots' missing HNSW indexes; seconds spent."""
        try:
            return await ann.build(self.db, slots)
        except Exception as exc:  # the memories are committed and found by exact scans meanwhile
            log.warning("building the HNSW indexes of slots %s failed; the next load or start "
                        "builds them: %s", sorted(slots), exc)
            return 0.0

    def _given(self, batches: Mapping[str, Sequence[Memory]], embeddings: Mapping[str, Any]) -> np.ndarray:
        """Check caller-given vectors (one per memory, the model's dimension); stack them in batch order."""
        dims = self.embedder.dimensions()
        parts = [np.empty((0, dims), dtype=np.float32)]
        for bank_id, memories in batches.items():
            given = embeddings.get(bank_id)
            count = 0 if given is None else len(given)
            if count != len(memories):
                raise RetainError(None, "embeddings",
                                  f"bank {bank_id!r} has {len(memories)} memories but {count} vectors")
            if not memories:
                continue
            try:
                part = np.asarray(given, dtype=np.float32)
            except ValueError:
                part = np.empty(0, dtype=np.float32)  # ragged rows: reported below
            if part.shape != (len(memories), dims) or not np.isfinite(part).all():
                raise RetainError(None, "embeddings",
                                  f"bank {bank_id!r} needs finite {dims}-dimensional vectors, one per memory")
            parts.append(part)
        return np.concatenate(parts)


def _bank_lock_key(bank_id: str) -> int:
    """A signed 64-bit advisory-lock key for a bank (a hash: a rare collision only serialises two banks)."""
    digest = hashlib.blake2b(b"hindsight_recall.bank\0" + bank_id.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def needs_maintenance(written: int, table_rows: float) -> bool:
    """Whether a load is big enough for autovacuum's analyze threshold: 50 rows plus a tenth of the table."""
    return written >= MAINTAIN_MIN_ROWS + 0.1 * table_rows


def _check_unique(memories: Sequence[Memory], lines: Sequence[int] | None) -> None:
    seen: dict[str, int] = {}
    for i, m in enumerate(memories):
        line = lines[i] if lines else None
        if m.id in seen:
            first = lines[seen[m.id]] if lines else seen[m.id]
            raise RetainError(line, "id", f"{m.id!r} appears twice in this batch (first at {first})")
        seen[m.id] = i
