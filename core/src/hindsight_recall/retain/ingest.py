"""Retain: embed ready-made facts and bulk-load them with their entities, chunks and links.

Rows go in with one binary COPY into a staging table and one INSERT ... ON CONFLICT. On a new bank
the links are computed in a worker thread while the database loads the rows, and they are written
with one binary COPY. No DDL runs in the transaction: a bank that reaches ``VECTOR_INDEX_MIN_ROWS``
memories has its rows flagged into HNSW indexes of its own (a slot) or the shared ones, a row update;
a slot's indexes are built once after a bulk load commits (see :mod:`..store.ann`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import RetainError
from ..limits import int32_problem
from ..protocols import EmbeddingProvider, TextSearchBackend
from ..settings import Settings
from ..store import ann, banks, term_stats
from ..store._bincopy import driver_connection
from ..store.citus import vacuum_shards
from ..store.db import Database
from ..store.schema import DOCUMENT_KEY
from ..store.vector_types import register_vector
from ..textsearch import backend_parameters
from ..tokens import TokenCounter
from ..types import Memory
from ._array_inserts import ARRAY_MAX_ROWS, insert_links, insert_units
from ._embed import embed_passages
from ._open_bank import OpenBank, open_bank
from ._rows import check_references, clear_rewritten, write_chunks, write_documents, write_entities, write_sources
from ._rows import entity_id as entity_id  # re-exported: the ids are part of the retain API
from ._rows import unit_id as unit_id
from .links import (
    Links,
    causal_links,
    copy_links,
    count_bound,
    existing_bank_links,
    semantic_pairs,
    set_index_search,
    uuid_keys,
)

log = logging.getLogger(__name__)

_STAGE_COLUMNS = (
    "id uuid, bank_id text, external_id text, fact_type text, text text, context text, embedding vector, "
    "occurred_start timestamptz, occurred_end timestamptz, mentioned_at timestamptz, event_date timestamptz, "
    "tags varchar[], metadata jsonb, document_id text, chunk_id text, proof_count int, "
    "source_memory_ids uuid[], text_signals text, token_count int, ann boolean, ann_slot int, position int, "
    "document text"
)
#: the binary COPY types of the staging columns, in order
_STAGE_TYPES = [
    c.split(" ", 1)[1].replace("int", "int4").replace("boolean", "bool") for c in _STAGE_COLUMNS.split(", ")
]
#: a load of this many rows plus a tenth of the table is vacuumed and analyzed before retain returns
#: (autovacuum's analyze threshold)
MAINTAIN_MIN_ROWS = 50
MAINTAINED_TABLES = ("memory_units", "unit_entities", "memory_links", "observation_sources")
_UNIT_COLUMNS = (
    "id, bank_id, external_id, fact_type, text, context, embedding, occurred_start, occurred_end, "
    "mentioned_at, event_date, tags, metadata, document_id, chunk_id, proof_count, source_memory_ids, "
    "text_signals, token_count, ann, ann_slot, position"
)
_UPDATE = (
    # not the id or the bank: the id is derived from the bank, and Citus never moves a row's bank
    ", ".join(f"{c} = excluded.{c}" for c in _UNIT_COLUMNS.split(", ")[2:])
    # the time comes in with the row: Citus runs no function in an upsert's SET on the workers
    + ", search_vector = excluded.search_vector, updated_at = excluded.updated_at"
)


def text_signals(memory: Memory) -> str:
    """Entity names plus the occurrence dates as "Month D YYYY", for keyword matching."""
    dates = dict.fromkeys(d for d in (memory.occurred_start, memory.occurred_end) if d is not None)
    return " ".join([*memory.entities, *(f"{d:%B} {d.day} {d.year}" for d in dates)])


@dataclass
class RetainStats:
    """What a retain call did and how long each part took."""

    memories: int = 0
    banks: int = 0
    links: int = 0
    seconds: float = 0.0
    embedding_seconds: float = 0.0
    #: rows, entities and chunks written
    load_seconds: float = 0.0
    #: what links add to the call: on a new bank, waiting for their computation (which overlaps the
    #: load and the index build) plus writing them
    link_seconds: float = 0.0
    #: computing the links on their own, overlapped or not
    link_compute_seconds: float = 0.0
    #: flagging a bank that reached VECTOR_INDEX_MIN_ROWS into HNSW indexes (row updates)
    index_seconds: float = 0.0
    #: building a slot's HNSW indexes after the load committed (``CREATE INDEX CONCURRENTLY``)
    index_build_seconds: float = 0.0
    #: VACUUM (ANALYZE) after a bulk load
    maintenance_seconds: float = 0.0
    per_bank: dict[str, int] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.memories / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "memories": self.memories, "banks": self.banks, "links": self.links,
            "seconds": round(self.seconds, 3), "embedding_seconds": round(self.embedding_seconds, 3),
            "load_seconds": round(self.load_seconds, 3), "link_seconds": round(self.link_seconds, 3),
            "link_compute_seconds": round(self.link_compute_seconds, 3),
            "index_seconds": round(self.index_seconds, 3),
            "index_build_seconds": round(self.index_build_seconds, 3),
            "maintenance_seconds": round(self.maintenance_seconds, 3),
            "memories_per_second": round(self.per_second, 1),
        }


class Ingestor:
    """Validates, embeds and writes batches of memories, one transaction per call."""

    def __init__(
        self, db: Database, embedder: EmbeddingProvider, backend: TextSearchBackend, settings: Settings
    ) -> None:
        self.db, self.embedder, self.backend, self.settings = db, embedder, backend, settings
        self._backend_params = backend_parameters(backend)  # checked once, bound in every write
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
    ) -> RetainStats:
        """Write every bank's memories; all or nothing.

        :param batches: bank id -> memories.
        :param lines: bank id -> source line numbers, for error messages.
        :param progress: show a progress bar (default: when stderr is a terminal).
        :param embeddings: bank id -> precomputed vectors aligned with that bank's memories; when
            given, the embedding model is not run (every bank needs its vectors).
        """
        started = time.perf_counter()
        stats = RetainStats()
        for bank_id, memories in batches.items():
            banks.validate_bank_id(bank_id)
            _check_unique(memories, (lines or {}).get(bank_id))
        t0 = time.perf_counter()
        if embeddings is None:
            texts = [m.text for ms in batches.values() for m in ms]
            vectors = await embed_passages(self.embedder, texts, progress)
        else:
            vectors = self._given(batches, embeddings)
        stats.embedding_seconds = time.perf_counter() - t0
        # slots whose indexes were dropped for this load: built again after it, even if it fails
        slots = await ann.before_load(self.db, {b: len(ms) for b, ms in batches.items()}, self.settings)
        try:
            table_rows = await self._write(batches, vectors, lines, stats, slots)
        except Exception:
            await self._build(slots)
            raise
        stats.index_build_seconds = await self._build(slots)
        t1 = time.perf_counter()
        await self._maintain(batches, stats.memories, table_rows)
        stats.maintenance_seconds = time.perf_counter() - t1
        stats.seconds = time.perf_counter() - started
        return stats

    async def _maintain(self, batches: Mapping[str, Sequence[Memory]], written: int, table_rows: float) -> None:
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
                loaded = [b for b, ms in batches.items() if needs_maintenance(len(ms), 0)]
                if loaded:
                    async with self.db.connect() as conn:
                        await vacuum_shards(conn, loaded, MAINTAINED_TABLES)
            elif needs_maintenance(written, table_rows):
                async with ann.maintenance_turn(self.db):  # never beside an index build: they deadlock
                    await self.db.vacuum_analyze(MAINTAINED_TABLES)
        except Exception as exc:  # the memories are committed; this only speeds up recall
            log.warning("VACUUM (ANALYZE) after the load failed, autovacuum will do it later: %s", exc)

    async def _write(
        self, batches: Mapping[str, Sequence[Memory]], vectors: np.ndarray, lines: Mapping[str, Sequence[int]] | None,
        stats: RetainStats, slots: set[int],
    ) -> float:
        """Every bank's rows in one transaction; once it commits, adds the slots they went into to
        ``slots``. Returns the planner's estimate of the table's rows."""
        placed: set[int] = set()
        async with self.db.connect() as conn:
            # Retains into one bank queue here (in bank order, so two calls never wait on each other
            # in a cycle); retains into different banks never wait at all. The lock keeps a bank's
            # placement (`indexed`, `ann_slot`) and its rows' flags in step.
            for key in sorted({_bank_lock_key(b) for b, ms in batches.items() if ms}):
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            # once per connection, and before any row: on Citus the type lookup's savepoint then stays
            # on the coordinator instead of going to the worker
            await register_vector(await driver_connection(conn))
            if self.db.citus:  # sent now, these go with the worker's BEGIN instead of costing commands later
                await set_index_search(conn)
            offset = 0
            for bank_id, memories in batches.items():
                if not memories:
                    continue
                where = await self._retain_bank(conn, bank_id, memories, vectors[offset : offset + len(memories)],
                                                (lines or {}).get(bank_id), stats)
                if where.slot is not None:
                    placed.add(where.slot)
                offset += len(memories)
            # the planner's estimate of the table's rows (on Citus the coordinator holds none)
            table_rows = 0 if self.db.citus else await conn.scalar(text(
                "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = 'memory_units'::regclass"
            ))
        slots |= placed
        return float(table_rows or 0)

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

    async def _retain_bank(
        self,
        conn: AsyncConnection,
        bank_id: str,
        memories: Sequence[Memory],
        vectors: np.ndarray,
        lines: Sequence[int] | None,
        stats: RetainStats,
    ) -> ann.Placement:
        t0 = time.perf_counter()
        ids = [unit_id(bank_id, m.id) for m in memories]
        # the bank's memories are counted as far as placement and link finding need to know
        upto = max(self.settings.vector_index_min_rows - len(memories), count_bound(len(memories)))
        bank = await open_bank(conn, bank_id, ids, upto)
        created = bank.created
        # before the load, so its rows are written flagged, not updated after
        t_index = time.perf_counter()
        where = await self._place(conn, bank_id, len(memories), bank)
        stats.index_seconds += time.perf_counter() - t_index
        await check_references(conn, bank_id, memories, lines)
        pending: asyncio.Future[tuple[Links, float]] | None = None
        if created:
            # A new bank holds only this batch: its links need no database reads, so compute them in a
            # thread while the database loads the rows.
            work = asyncio.to_thread(self._fresh_links, uuid_keys(ids), vectors)
            pending = asyncio.ensure_future(work)
        try:
            chunk_ids = await write_chunks(conn, bank_id, memories)
            after = {} if created else await _document_ends(conn, bank_id, ids, memories, chunk_ids)
            places = positions(memories, chunk_ids, after)
            if bank.present:  # rewritten memories: what they had goes first
                await clear_rewritten(conn, bank_id, ids)
            await self._write_units(conn, bank_id, ids, memories, vectors, chunk_ids, places, bank=bank,
                                    where=where)
            await write_entities(conn, bank_id, ids, memories, arrays=self._arrays(memories))
            await write_documents(conn, bank_id, memories, fresh=created)
            t2 = time.perf_counter()
            stats.load_seconds += t2 - t0
            if pending is not None:
                computed, seconds = await pending
                stats.link_compute_seconds += seconds
            else:
                computed = await existing_bank_links(
                    conn, bank_id, ids, self.settings.semantic_link_min_similarity,
                    total=bank.total_after(len(ids)), where=where, search_set=self.db.citus)
                stats.link_compute_seconds += time.perf_counter() - t2
            stats.links += await self._write_links(conn, bank_id, ids, memories, computed)
            stats.link_seconds += time.perf_counter() - t2
        finally:
            if pending is not None and not pending.done():
                # the thread finishes on its own; retrieve its outcome so none is reported as lost
                pending.add_done_callback(lambda f: f.cancelled() or f.exception())
        stats.memories += len(memories)
        stats.banks += 1
        stats.per_bank[bank_id] = len(memories)
        return where

    def _fresh_links(self, keys: np.ndarray, vectors: np.ndarray) -> tuple[Links, float]:
        """Semantic links among the rows of a new bank (runs in a worker thread)."""
        started = time.perf_counter()
        links = semantic_pairs(keys, vectors, np.arange(len(keys)), self.settings.semantic_link_min_similarity)
        return links, time.perf_counter() - started

    def _arrays(self, memories: Sequence[Memory]) -> bool:
        """Whether a bank's rows go as inserts of bound arrays (see :mod:`._array_inserts`): on Citus, up to
        ARRAY_MAX_ROWS memories; a larger batch goes by COPY, which moves its rows faster than the
        arrays once the command and the two-phase commit it costs more are small beside the load."""
        return self.db.citus and len(memories) <= ARRAY_MAX_ROWS

    async def _place(self, conn: AsyncConnection, bank_id: str, adding: int, bank: OpenBank) -> ann.Placement:
        """The bank's placement for this load: as read, unless the load makes it reach
        ``VECTOR_INDEX_MIN_ROWS`` (then :func:`~hindsight_recall.store.ann.place` flags it into an index)."""
        where = bank.placement
        if where.slot is not None or where.shared or bank.rows + adding < self.settings.vector_index_min_rows:
            return where
        return await ann.place(conn, bank_id, adding, self.settings, citus=self.db.citus)

    async def _write_units(
        self, conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory],
        vectors: np.ndarray, chunk_ids: list[str | None], places: list[int | None], *, bank: OpenBank,
        where: ann.Placement,
    ) -> None:
        """The memories' rows with their term statistics and observation sources.

        Rows are written in id order: the primary key then fills page by page, and the entity pairs'
        foreign-key checks (also sent in id order) read the table in order.
        """
        order = sorted(range(len(ids)), key=lambda i: ids[i].bytes)
        rows = [self._stage_row(bank_id, ids[i], memories[i], vectors[i], chunk_ids[i], where, places[i])
                for i in order]
        # a new bank has none of these ids yet (they are derived from the bank id): no conflict check
        upsert = "" if bank.created else f" ON CONFLICT ON CONSTRAINT memory_units_pkey DO UPDATE SET {_UPDATE}"
        if bank.present:  # only rows the bank holds have counts to take out
            await term_stats.count_out(conn, self.backend, bank_id, ids)
        if self._arrays(memories):
            await insert_units(conn, bank_id, rows, self.backend.write_expression("u.document"),
                               self._backend_params, upsert=upsert, now=datetime.now(UTC))
        else:
            await self._copy_units(conn, rows, upsert)
        await term_stats.count_in(conn, self.backend, bank_id, None if bank.created else ids)
        await write_sources(conn, bank_id, ids, memories)

    async def _copy_units(self, conn: AsyncConnection, rows: list[tuple[Any, ...]], upsert: str) -> None:
        """Binary COPY into a staging table (vectors go as raw floats, not text), then one insert."""
        raw = await driver_connection(conn)
        await register_vector(raw)
        await conn.execute(text(
            f"CREATE TEMP TABLE IF NOT EXISTS retain_stage ({_STAGE_COLUMNS}) ON COMMIT DELETE ROWS"
        ))
        stage = f"COPY retain_stage ({_UNIT_COLUMNS}, document) FROM STDIN (FORMAT BINARY)"
        async with raw.cursor().copy(stage) as copy:
            copy.set_types(_STAGE_TYPES)
            for row in rows:
                await copy.write_row(row)
        await conn.execute(text(
            f"INSERT INTO memory_units ({_UNIT_COLUMNS}, search_vector, updated_at) "
            f"SELECT id, bank_id, external_id, fact_type, text, context, embedding, "
            f"occurred_start, occurred_end, mentioned_at, event_date, tags, metadata, document_id, chunk_id, "
            f"proof_count, source_memory_ids, text_signals, token_count, ann, ann_slot, position, "
            f"{self.backend.write_expression('document')}, now() "
            f"FROM retain_stage{upsert}"
        ), self._backend_params)
        await conn.execute(text("TRUNCATE retain_stage"))

    def _stage_row(
        self, bank_id: str, uid: uuid.UUID, m: Memory, vector: np.ndarray, chunk_id: str | None,
        where: ann.Placement, position: int | None = None,
    ) -> tuple[Any, ...]:
        from psycopg.types.json import Jsonb  # late: only retain writes rows

        signals = text_signals(m)
        document = self.backend.prepare_document(" ".join([m.text, m.context or "", signals]))
        return (
            uid, bank_id, m.id, m.type, m.text, m.context, vector,
            m.occurred_start, m.occurred_end, m.mentioned_at,
            m.occurred_start or m.mentioned_at or m.occurred_end,
            list(m.tags), Jsonb(dict(m.metadata)) if m.metadata else None,
            m.document_id, chunk_id, m.proof_count,
            [unit_id(bank_id, s) for s in m.source_ids] or None,
            signals, self.tokens.count_returned(m.text, m.context, m.metadata), where.shared, where.slot,
            position, document,
        )

    async def _write_links(
        self, conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory],
        computed: Links,
    ) -> int:
        """Semantic links by binary COPY (none exist from these rows now); causal by upsert.
        On Citus all of them in one insert of bound arrays (see :mod:`._array_inserts`)."""
        causal = causal_links(ids, [[unit_id(bank_id, c) for c in m.causes] for m in memories])
        if self._arrays(memories):
            return await insert_links(conn, bank_id, [computed], causal)
        written = await copy_links(conn, bank_id, [computed])
        if not causal:
            return written
        raw = await driver_connection(conn)
        await conn.execute(text(
            "CREATE TEMP TABLE IF NOT EXISTS stage_links (from_unit_id uuid, to_unit_id uuid, link_type text, "
            "weight double precision) ON COMMIT DELETE ROWS"
        ))
        async with raw.cursor().copy("COPY stage_links FROM STDIN") as copy:
            for link in causal:
                await copy.write_row(link)
        await conn.execute(text(
            "INSERT INTO memory_links (from_unit_id, to_unit_id, link_type, weight, bank_id) "
            "SELECT DISTINCT ON (from_unit_id, to_unit_id, link_type) *, CAST(:bank AS text) FROM stage_links "
            "ORDER BY from_unit_id, to_unit_id, link_type, weight DESC "
            "ON CONFLICT ON CONSTRAINT memory_links_pkey DO UPDATE SET weight = excluded.weight"
        ), {"bank": bank_id})
        await conn.execute(text("TRUNCATE stage_links"))
        return written + len(causal)


def _bank_lock_key(bank_id: str) -> int:
    """A signed 64-bit advisory-lock key for a bank (a hash: a rare collision only serialises two banks)."""
    digest = hashlib.blake2b(b"hindsight_recall.bank\0" + bank_id.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def positions(
    memories: Sequence[Memory], chunk_ids: Sequence[str | None], after: Mapping[str, int] | None = None
) -> list[int | None]:
    """Each memory's place in its document (its document id, else its chunk): the given ``position``,
    else the order within the batch, counted on from ``after`` (the next free place of a document
    already in the bank). A memory with neither a document nor a chunk has no place."""
    following = dict(after or {})
    out: list[int | None] = []
    for m, chunk_id in zip(memories, chunk_ids, strict=True):
        key = m.document_id or chunk_id
        if key is None:
            out.append(m.position)
            continue
        place = m.position if m.position is not None else following.get(key, 0)
        if (problem := int32_problem(place)) is not None:
            raise RetainError(None, "position", f"memory {m.id!r} would follow the last place of its document "
                                                f"at {place}, which {problem.split(' ', 1)[1]}; give it a position")
        following[key] = max(following.get(key, 0), place + 1)
        out.append(place)
    return out


async def _document_ends(
    conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory],
    chunk_ids: Sequence[str | None],
) -> dict[str, int]:
    """The next free place of each document this batch adds to, from the bank's other rows."""
    keys = sorted({k for m, c in zip(memories, chunk_ids, strict=True) if (k := m.document_id or c)})
    if not keys:
        return {}
    rows = await conn.execute(text(
        f"SELECT {DOCUMENT_KEY} AS doc, max(position)::bigint + 1 AS next FROM memory_units WHERE bank_id = :bank "
        f"AND {DOCUMENT_KEY} = ANY(:keys) AND position IS NOT NULL AND NOT (id = ANY(:ids)) GROUP BY 1"
    ), {"bank": bank_id, "keys": keys, "ids": ids})
    return {r.doc: int(r.next) for r in rows}


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
