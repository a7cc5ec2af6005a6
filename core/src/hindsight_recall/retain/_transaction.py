"""One retain transaction, open: each :meth:`Transaction.write` puts a bank's memories into it with their
entities, chunks, documents and links, and whatever else the caller does on :attr:`Transaction.conn`
commits or rolls back with them (see :meth:`~.ingest.Ingestor.transaction`).

Rows go in with one binary COPY into a staging table and one INSERT ... ON CONFLICT (on Citus, up to
ARRAY_MAX_ROWS of them as inserts of bound arrays). On a new bank the links are computed in a worker
thread while the database loads the rows.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import DocumentChanged, RetainError
from ..limits import int32_problem
from ..store import ann, banks, length_stats, term_stats
from ..store.driver import driver_connection
from ..store.schema import DOCUMENT_KEY, of_document
from ..store.vector_types import register_vector
from ..types import Memory
from ._array_inserts import ARRAY_MAX_ROWS, insert_links, insert_units
from ._embed import embed_passages
from ._open_bank import OpenBank, open_bank
from ._rows import (
    check_references,
    clear_rewritten,
    unit_id,
    write_chunks,
    write_documents,
    write_entities,
    write_sources,
)
from ._stats import RetainStats
from .links import Links, causal_links, copy_links, count_bound, existing_bank_links, semantic_pairs, uuid_keys

if TYPE_CHECKING:
    from ..protocols import EmbeddingProvider, TextSearchBackend
    from ..settings import Settings
    from ..store.db import Database
    from ..tokens import TokenCounter


class Writer(Protocol):
    """What a transaction writes with: the :class:`~.ingest.Ingestor` that opened it."""

    db: Database
    embedder: EmbeddingProvider
    backend: TextSearchBackend
    settings: Settings
    #: the backend's own bound parameters, bound in every write
    backend_params: dict[str, Any]

    @property
    def tokens(self) -> TokenCounter:
        """The recall packer's tokenizer."""
        ...

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


class Transaction:
    """The retain transaction an :class:`~.ingest.Ingestor` opened, with the bank locks it holds.

    :param ingestor: whose database, embedder, backend and settings it writes with.
    :param conn: the connection, in the transaction.
    :param stats: what the writes did, summed.
    :param banks: the banks whose locks the transaction holds: the only ones it may write into.
    """

    def __init__(self, ingestor: Writer, conn: AsyncConnection, stats: RetainStats, banks: Collection[str]) -> None:
        self.ingestor, self.conn, self.stats = ingestor, conn, stats
        self.banks = frozenset(banks)
        #: the slots the writes placed banks in (their indexes are built after the commit)
        self.placed: set[int] = set()

    async def write(
        self, bank_id: str, memories: Sequence[Memory], vectors: np.ndarray | None = None, *,
        lines: Sequence[int] | None = None, replace_documents: Collection[str] = (),
        chunk_indexes: Mapping[str, Mapping[str, int]] | None = None,
        document_sizes: Mapping[str, int] | None = None,
    ) -> None:
        """Write a bank's memories (embedded here unless ``vectors`` are given).

        :param replace_documents: documents the memories replace whole: each one's memories that are not
            among ``memories`` are forgotten, so a reader sees the old document or the new, never a mix.
        :param chunk_indexes: document id -> chunk text -> index, for new chunks (see :func:`._rows.write_chunks`).
        :param document_sizes: document id -> how many memories it must hold now (what an append was
            numbered after); :class:`DocumentChanged` when another write changed it since.
        """
        if bank_id not in self.banks:
            raise RetainError(None, "bank_id", f"bank {bank_id!r} was not named when the transaction began")
        if not memories:
            return
        if document_sizes:
            await self._check_sizes(bank_id, document_sizes)
        if vectors is None:
            started = time.perf_counter()
            vectors = await embed_passages(self.ingestor.embedder, [m.text for m in memories], False)
            self.stats.embedding_seconds += time.perf_counter() - started
        where = await self._retain_bank(bank_id, memories, vectors, lines, set(replace_documents), chunk_indexes)
        if where.slot is not None:
            self.placed.add(where.slot)
        if replace_documents:
            self.stats.removed += await self._drop_replaced(bank_id, memories, replace_documents)

    async def _check_sizes(self, bank_id: str, sizes: Mapping[str, int]) -> None:
        found: dict[str, int] = dict((await self.conn.execute(text(
            "SELECT document_id, count(*) FROM memory_units WHERE bank_id = :bank AND document_id = ANY(:docs) "
            "GROUP BY 1"), {"bank": bank_id, "docs": sorted(sizes)})).all())
        for document_id, expected in sizes.items():
            if found.get(document_id, 0) != expected:
                raise DocumentChanged(document_id, expected, found.get(document_id, 0))

    async def _drop_replaced(self, bank_id: str, memories: Sequence[Memory], documents: Collection[str]) -> int:
        """Forget the memories of ``documents`` that the write did not hold (after it: the documents keep
        their rows, and with them when they were first written)."""
        stale = list((await self.conn.execute(text(
            f"SELECT u.external_id FROM memory_units u WHERE u.bank_id = :bank AND {of_document('u', 'ANY(:docs)')} "
            "AND NOT (u.external_id = ANY(:ids))"
        ), {"bank": bank_id, "docs": sorted(documents), "ids": [m.id for m in memories]})).scalars())
        return await banks.forget(self.conn, bank_id, stale, self.ingestor.backend) if stale else 0

    async def _retain_bank(
        self, bank_id: str, memories: Sequence[Memory], vectors: np.ndarray, lines: Sequence[int] | None,
        replaced: set[str], chunk_indexes: Mapping[str, Mapping[str, int]] | None = None,
    ) -> ann.Placement:
        conn, stats, settings = self.conn, self.stats, self.ingestor.settings
        t0 = time.perf_counter()
        ids = [unit_id(bank_id, m.id) for m in memories]
        # the bank's memories are counted as far as placement and link finding need to know
        upto = max(settings.vector_index_min_rows - len(memories), count_bound(len(memories)))
        bank = await open_bank(conn, bank_id, ids, upto)
        created = bank.created
        # before the load, so its rows are written flagged, not updated after
        t_index = time.perf_counter()
        where = await self._place(bank_id, len(memories), bank)
        stats.index_seconds += time.perf_counter() - t_index
        await check_references(conn, bank_id, memories, lines)
        pending: asyncio.Future[tuple[Links, float]] | None = None
        if created:
            # A new bank holds only this batch: its links need no database reads, so compute them in a
            # thread while the database loads the rows.
            work = asyncio.to_thread(self._fresh_links, uuid_keys(ids), vectors)
            pending = asyncio.ensure_future(work)
        try:
            chunk_ids = await write_chunks(conn, bank_id, memories, renumber=replaced, indexes=chunk_indexes)
            after = {} if created else await _document_ends(conn, bank_id, ids, memories, chunk_ids, replaced)
            places = positions(memories, chunk_ids, after)
            if bank.present:  # rewritten memories: what they had goes first
                await clear_rewritten(conn, bank_id, ids)
            await self._write_units(bank_id, ids, memories, vectors, chunk_ids, places, bank=bank, where=where)
            await write_entities(conn, bank_id, ids, memories, arrays=self._arrays(memories))
            await write_documents(conn, bank_id, memories, fresh=created)
            t2 = time.perf_counter()
            stats.load_seconds += t2 - t0
            if pending is not None:
                computed, seconds = await pending
                stats.link_compute_seconds += seconds
            else:
                computed = await existing_bank_links(
                    conn, bank_id, ids, settings.semantic_link_min_similarity,
                    total=bank.total_after(len(ids)), where=where, search_set=self.ingestor.db.citus)
                stats.link_compute_seconds += time.perf_counter() - t2
            stats.links += await self._write_links(bank_id, ids, memories, computed)
            stats.link_seconds += time.perf_counter() - t2
        finally:
            if pending is not None and not pending.done():
                # the thread finishes on its own; retrieve its outcome so none is reported as lost
                pending.add_done_callback(lambda f: f.cancelled() or f.exception())
        stats.memories += len(memories)
        stats.banks += bank_id not in stats.per_bank
        stats.per_bank[bank_id] = stats.per_bank.get(bank_id, 0) + len(memories)
        return where

    def _fresh_links(self, keys: np.ndarray, vectors: np.ndarray) -> tuple[Links, float]:
        """Semantic links among the rows of a new bank (runs in a worker thread)."""
        started = time.perf_counter()
        links = semantic_pairs(keys, vectors, np.arange(len(keys)), self.ingestor.settings.semantic_link_min_similarity)
        return links, time.perf_counter() - started

    def _arrays(self, memories: Sequence[Memory]) -> bool:
        """Whether a bank's rows go as inserts of bound arrays (see :mod:`._array_inserts`): on Citus, up to
        ARRAY_MAX_ROWS memories; a larger batch goes by COPY, which moves its rows faster than the
        arrays once the command and the two-phase commit it costs more are small beside the load."""
        return self.ingestor.db.citus and len(memories) <= ARRAY_MAX_ROWS

    async def _place(self, bank_id: str, adding: int, bank: OpenBank) -> ann.Placement:
        """The bank's placement for this load: as read, unless the load makes it reach
        ``VECTOR_INDEX_MIN_ROWS`` (then :func:`~hindsight_recall.store.ann.place` flags it into an index)."""
        settings = self.ingestor.settings
        where = bank.placement
        if where.slot is not None or where.shared or bank.rows + adding < settings.vector_index_min_rows:
            return where
        return await ann.place(self.conn, bank_id, adding, settings, citus=self.ingestor.db.citus)

    async def _write_units(
        self, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory], vectors: np.ndarray,
        chunk_ids: list[str | None], places: list[int | None], *, bank: OpenBank, where: ann.Placement,
    ) -> None:
        """The memories' rows with their term statistics and observation sources.

        Rows are written in id order: the primary key then fills page by page, and the entity pairs'
        foreign-key checks (also sent in id order) read the table in order.
        """
        conn, backend = self.conn, self.ingestor.backend
        order = sorted(range(len(ids)), key=lambda i: ids[i].bytes)
        rows = [self._stage_row(bank_id, ids[i], memories[i], vectors[i], chunk_ids[i], where, places[i])
                for i in order]
        # a new bank has none of these ids yet (they are derived from the bank id): no conflict check
        upsert = "" if bank.created else f" ON CONFLICT ON CONSTRAINT memory_units_pkey DO UPDATE SET {_UPDATE}"
        if bank.present:  # only rows the bank holds have counts to take out
            await length_stats.count_out(conn, backend, bank_id, ids)
            await term_stats.count_out(conn, backend, bank_id, ids)
        if self._arrays(memories):
            await insert_units(conn, bank_id, rows, backend.write_expression("u.document"),
                               self.ingestor.backend_params, upsert=upsert, now=datetime.now(UTC))
        else:
            await self._copy_units(rows, upsert)
        await length_stats.count_in(conn, backend, bank_id, None if bank.created else ids)
        await term_stats.count_in(conn, backend, bank_id, None if bank.created else ids)
        await write_sources(conn, bank_id, ids, memories)

    async def _copy_units(self, rows: list[tuple[Any, ...]], upsert: str) -> None:
        """Binary COPY into a staging table (vectors go as raw floats, not text), then one insert."""
        conn = self.conn
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
            f"{self.ingestor.backend.write_expression('document')}, now() "
            f"FROM retain_stage{upsert}"
        ), self.ingestor.backend_params)
        await conn.execute(text("TRUNCATE retain_stage"))

    def _stage_row(
        self, bank_id: str, uid: uuid.UUID, m: Memory, vector: np.ndarray, chunk_id: str | None,
        where: ann.Placement, position: int | None = None,
    ) -> tuple[Any, ...]:
        from psycopg.types.json import Jsonb  # late: only retain writes rows

        signals = text_signals(m)
        document = self.ingestor.backend.prepare_document(" ".join([m.text, m.context or "", signals]))
        return (
            uid, bank_id, m.id, m.type, m.text, m.context, vector,
            m.occurred_start, m.occurred_end, m.mentioned_at,
            m.occurred_start or m.mentioned_at or m.occurred_end,
            list(m.tags), Jsonb(dict(m.metadata)) if m.metadata else None,
            m.document_id, chunk_id, m.proof_count,
            [unit_id(bank_id, s) for s in m.source_ids] or None,
            signals, self.ingestor.tokens.count_returned(m.text, m.context, m.metadata), where.shared, where.slot,
            position, document,
        )

    async def _write_links(
        self, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory], computed: Links,
    ) -> int:
        """Semantic links by binary COPY (none exist from these rows now); causal by upsert.
        On Citus all of them in one insert of bound arrays (see :mod:`._array_inserts`)."""
        conn = self.conn
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
    chunk_ids: Sequence[str | None], replaced: Collection[str] = (),
) -> dict[str, int]:
    """The next free place of each document this batch adds to, from the bank's other rows (a replaced
    document's other rows are on their way out: its places start again)."""
    keys = sorted({k for m, c in zip(memories, chunk_ids, strict=True) if (k := m.document_id or c)} - set(replaced))
    if not keys:
        return {}
    rows = await conn.execute(text(
        f"SELECT {DOCUMENT_KEY} AS doc, max(position)::bigint + 1 AS next FROM memory_units WHERE bank_id = :bank "
        f"AND {DOCUMENT_KEY} = ANY(:keys) AND position IS NOT NULL AND NOT (id = ANY(:ids)) GROUP BY 1"
    ), {"bank": bank_id, "keys": keys, "ids": ids})
    return {r.doc: int(r.next) for r in rows}
