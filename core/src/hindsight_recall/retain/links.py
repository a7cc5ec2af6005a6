"""Links recall follows: semantic kNN and caller-given causes.

Neighbours in time are not stored: the temporal arm reads them from the dates (an index range per
side), as the graph endpoint does for the memories it shows. Semantic links are computed over a
whole batch at once in numpy and written with one binary COPY; nothing runs once per memory. A new
bank needs no database reads at all. A batch into an existing bank reads the bank's vectors back,
except a small batch: into a big bank it asks the bank's HNSW indexes, many rows per statement; into
a smaller one the database compares its few rows with the bank's, exactly.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.ext.asyncio import AsyncConnection

from ..store import ann
from ..store._bincopy import bank_column, copy_columns
from ..store.driver import driver_connection
from ..store.vector_types import register_vector
from ._knn import neighbours

Link = tuple[uuid.UUID, uuid.UUID, str, float]

SEMANTIC_NEIGHBOURS = 50
#: a batch into a bank of more than INDEX_MIN_ROWS rows and INDEX_RATIO times the batch asks the index
INDEX_MIN_ROWS = 20_000
INDEX_RATIO = 500
#: new rows per HNSW statement
INDEX_BATCH = 200
#: a batch of at most this many rows into a smaller bank has its neighbours found by the database
SCAN_MAX_BATCH = 16


@dataclass(frozen=True)
class Links:
    """Links of one type as parallel arrays: 16-byte uuids of both ends and weights.

    :param link_type: ``semantic``, ``causes``, ...
    :param sources: ``from_unit_id`` of each link (numpy ``V16``).
    :param targets: ``to_unit_id`` of each link (numpy ``V16``).
    :param weights: weights in [0, 1].
    """

    link_type: str
    sources: np.ndarray
    targets: np.ndarray
    weights: np.ndarray

    def __len__(self) -> int:
        return len(self.weights)


def uuid_keys(ids: Sequence[uuid.UUID]) -> np.ndarray:
    """The 16 bytes of each uuid as one numpy ``V16`` array."""
    return np.frombuffer(b"".join(u.bytes for u in ids), dtype="V16").copy() if ids else np.empty(0, "V16")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    matrix = np.asarray(vectors, dtype=np.float32)
    scaled: np.ndarray = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    return scaled


def semantic_pairs(keys: np.ndarray, vectors: np.ndarray, queries: np.ndarray, floor: float) -> Links:
    """Each query row links to its 50 most similar rows above ``floor`` (weight = cosine similarity).

    :param keys: the uuid of every row.
    :param vectors: every row's vector.
    :param queries: indices of the rows that get links.
    :param floor: SEMANTIC_LINK_MIN_SIMILARITY.
    """
    rows, cols, sims = neighbours(unit_rows(vectors), queries, SEMANTIC_NEIGHBOURS, floor)
    return Links("semantic", keys[rows], keys[cols], np.minimum(sims.astype(np.float64), 1.0))


def count_bound(batch: int) -> int:
    """How far a bank's memories need counting to tell whether a batch of ``batch`` asks the index."""
    return max(INDEX_MIN_ROWS, INDEX_RATIO * batch) + 1


async def existing_bank_links(
    conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], floor: float,
    *, total: int, where: ann.Placement, search_set: bool = False,
) -> Links:
    """Semantic links of new rows already written to an existing bank.

    The bank's vectors come back in one statement (one command to the bank's worker on Citus); a
    small batch into a big bank asks the bank's HNSW indexes for neighbours instead of reading its
    vectors, every fact type's index in the same statement.

    :param conn: the retain transaction (the rows are written, the bank's indexes exist).
    :param bank_id: the bank.
    :param ids: the new rows' ids.
    :param floor: SEMANTIC_LINK_MIN_SIMILARITY.
    :param total: the bank's memories with the new rows (at least INDEX_MIN_ROWS, when there are more).
    :param where: the bank's placement in this transaction.
    :param search_set: :func:`set_index_search` ran in this transaction already.
    """
    # only a bank in HNSW indexes can be asked through them (VECTOR_INDEX_MIN_ROWS may be set above
    # INDEX_MIN_ROWS; a slot's indexes are missing while a bulk load rebuilds them)
    if total > INDEX_MIN_ROWS and total > INDEX_RATIO * len(ids) and await ann.searchable(conn, where):
        if not search_set:
            await set_index_search(conn)
        return await _by_index(conn, bank_id, ids, floor, where.predicate("m"))
    if len(ids) <= SCAN_MAX_BATCH:
        return await _by_scan(conn, bank_id, ids, floor)
    return await _by_reading(conn, bank_id, uuid_keys(ids), floor)


async def set_index_search(conn: AsyncConnection) -> None:
    """The HNSW settings of the neighbour search, for the rest of the transaction.

    On Citus a ``SET LOCAL`` made before the transaction's first command travels to the worker with
    its ``BEGIN``; made later, each costs a command of its own.
    """
    await conn.exec_driver_sql(ann.set_local({"hnsw.ef_search": str(SEMANTIC_NEIGHBOURS * 2),
                                          "hnsw.iterative_scan": "strict_order"}))


async def _by_reading(conn: AsyncConnection, bank_id: str, wanted: np.ndarray, floor: float) -> Links:
    """Semantic links from every vector of the bank."""
    raw = await driver_connection(conn)
    await register_vector(raw)  # vectors arrive as numpy arrays in binary, not text to parse
    cursor = raw.cursor(binary=True)
    await cursor.execute("SELECT id, embedding FROM memory_units WHERE bank_id = %s AND embedding IS NOT NULL",
                         [bank_id])
    vectors = await cursor.fetchall()
    if len(vectors) < 2:
        return Links("semantic", np.empty(0, "V16"), np.empty(0, "V16"), np.empty(0))
    keys = uuid_keys([r[0] for r in vectors])
    matrix = np.stack([np.asarray(r[1].to_numpy() if hasattr(r[1], "to_numpy") else r[1], dtype=np.float32)
                       for r in vectors])
    return await asyncio.to_thread(semantic_pairs, keys, matrix, _positions(keys, wanted), floor)


async def _by_index(conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], floor: float, indexed: str) -> Links:
    """Ask the bank's HNSW indexes (``indexed``: their row predicate) for new rows' neighbours,
    INDEX_BATCH rows a statement, every fact type's index in it.

    A bank this large is in those indexes when VECTOR_INDEX_MIN_ROWS is below INDEX_MIN_ROWS (the default);
    shared ones hold other banks' rows too, so the scan goes on past them (iterative scan) until k are found.
    """
    from ..types import FACT_TYPES

    # the fact type and the index predicate are plain predicates so each lateral matches its partial index
    branches = [
        "SELECT q.id AS source, n.id AS target, 1 - n.distance AS value FROM memory_units q "
        "CROSS JOIN LATERAL (SELECT m.id, m.embedding <=> q.embedding AS distance FROM memory_units m "
        f"WHERE m.bank_id = %(bank)s AND m.fact_type = %(type_{i})s AND {indexed} AND m.embedding IS NOT NULL "
        "ORDER BY m.embedding <=> q.embedding LIMIT %(k)s) n "
        "WHERE q.bank_id = %(bank)s AND q.id = ANY(%(ids)s) AND q.embedding IS NOT NULL AND n.id <> q.id "
        "AND 1 - n.distance >= %(floor)s"
        for i in range(len(FACT_TYPES))
    ]
    raw = await driver_connection(conn)
    cursor = raw.cursor()
    found: list[tuple[uuid.UUID, uuid.UUID, float]] = []
    for start in range(0, len(ids), INDEX_BATCH):
        params: dict[str, Any] = {"bank": bank_id, "ids": ids[start : start + INDEX_BATCH],
                                  "k": SEMANTIC_NEIGHBOURS + 1, "floor": floor,
                                  **{f"type_{i}": t for i, t in enumerate(FACT_TYPES)}}
        await cursor.execute(" UNION ALL ".join(branches), params)
        found.extend(await cursor.fetchall())
    return _nearest(found)


async def _by_scan(conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], floor: float) -> Links:
    """Exact neighbours of a few new rows, found by the database: each new row is compared with every
    vector of the bank where they lie, so the bank's vectors never come to this process (whose memory
    would otherwise grow with its largest bank).

    Ordered by similarity rather than by distance, so no vector index can answer it approximately.
    """
    raw = await driver_connection(conn)
    cursor = raw.cursor()
    await cursor.execute(
        "SELECT q.id, n.id, n.similarity FROM memory_units q "
        "CROSS JOIN LATERAL (SELECT m.id, 1 - (m.embedding <=> q.embedding) AS similarity FROM memory_units m "
        "WHERE m.bank_id = %(bank)s AND m.embedding IS NOT NULL AND m.id <> q.id "
        "ORDER BY similarity DESC LIMIT %(k)s) n "
        "WHERE q.bank_id = %(bank)s AND q.id = ANY(%(ids)s) AND q.embedding IS NOT NULL "
        "AND n.similarity >= %(floor)s",
        {"bank": bank_id, "ids": ids, "k": SEMANTIC_NEIGHBOURS, "floor": floor})
    return _nearest(await cursor.fetchall())


def _nearest(found: Sequence[tuple[uuid.UUID, uuid.UUID, float]]) -> Links:
    """Semantic links from ``(source, target, similarity)`` rows: each source's 50 most similar targets."""
    best: dict[uuid.UUID, list[tuple[float, uuid.UUID]]] = {}
    for source, target, value in found:
        best.setdefault(source, []).append((float(value), target))
    sources: list[uuid.UUID] = []
    targets: list[uuid.UUID] = []
    weights: list[float] = []
    for source, pairs in best.items():
        for sim, target in sorted(pairs, key=lambda x: -x[0])[:SEMANTIC_NEIGHBOURS]:
            sources.append(source)
            targets.append(target)
            weights.append(min(1.0, sim))
    return Links("semantic", uuid_keys(sources), uuid_keys(targets), np.array(weights, dtype=np.float64))


def _positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Indices in ``keys`` of the ``wanted`` keys that are present."""
    index = {k.tobytes(): i for i, k in enumerate(keys)}
    return np.array([index[w] for w in (k.tobytes() for k in wanted) if w in index], dtype=np.int64)


def causal_links(ids: list[uuid.UUID], causes: Sequence[Sequence[uuid.UUID]]) -> list[Link]:
    """``A causes B`` is stored both ways (causes / caused_by) so either end can reach the other."""
    links: list[Link] = []
    for uid, targets in zip(ids, causes, strict=True):
        for target in targets:
            links.append((uid, target, "causes", 1.0))
            links.append((target, uid, "caused_by", 1.0))
    return links


async def copy_links(conn: AsyncConnection, bank_id: str, batches: Sequence[Links]) -> int:
    """Write links with one binary COPY into ``memory_links``; the caller ensures none exists yet.

    Rows go in source order: the two indexes that lead with ``from_unit_id`` then fill page by page.

    :param conn: the retain transaction.
    :param bank_id: the bank of both ends of every link.
    :param batches: the links, one :class:`Links` per type.
    """
    batches = [b for b in batches if len(b)]
    if not batches:
        return 0
    width = {len(b.link_type.encode()) for b in batches}
    if len(width) > 1:  # a text column of the binary records has one byte length: one COPY per length
        return sum([await copy_links(conn, bank_id, [b]) for b in batches])
    sources = np.concatenate([b.sources for b in batches])
    order = np.argsort(sources.view("S16"), kind="stable")
    kind = f"S{width.pop()}"
    types = np.concatenate([np.full(len(b), b.link_type.encode(), dtype=kind) for b in batches])
    columns = [sources[order], np.concatenate([b.targets for b in batches])[order], types[order],
               np.concatenate([b.weights for b in batches]).astype(">f8")[order], bank_column(bank_id, len(order))]
    raw = await driver_connection(conn)
    return await copy_columns(
        raw, "COPY memory_links (from_unit_id, to_unit_id, link_type, weight, bank_id) FROM STDIN (FORMAT BINARY)",
        columns,
    )
