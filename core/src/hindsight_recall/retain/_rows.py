"""Rows that go with retained memories: stable ids, reference checks, entities, chunks and documents."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import RetainError
from ..store._bincopy import bank_column, copy_columns
from ..store.chunks import escape_part
from ..store.driver import driver_connection
from ..store.ids import entity_id as entity_id  # re-exported: the ids are part of the retain API
from ..store.ids import id_name as id_name
from ..store.ids import unit_id as unit_id
from ..store.schema import of_document
from ..types import Memory
from ._array_inserts import insert_pairs

#: Rows inserted from bound arrays are joined to their bank's row: on Citus the insert is then planned on
#: the bank's shard as one command (from the arrays alone, the coordinator would first ship the rows
#: into an intermediate result, and commit in two phases).
_BANK_AND = "banks b CROSS JOIN"


async def check_references(
    conn: AsyncConnection, bank_id: str, memories: Sequence[Memory], lines: Sequence[int] | None
) -> None:
    """Every ``causes`` and ``sources`` id must be in the batch or already in the bank."""
    batch = {m.id for m in memories}
    wanted = {r for m in memories for r in (*m.causes, *m.source_ids)} - batch
    found: set[str] = set()
    if wanted:
        result = await conn.execute(
            text("SELECT external_id FROM memory_units WHERE bank_id = :bank AND external_id = ANY(:ids)"),
            {"bank": bank_id, "ids": sorted(wanted)},
        )
        found = set(result.scalars())
    for i, m in enumerate(memories):
        for field_name, refs in (("causes", m.causes), ("sources", m.source_ids)):
            for ref in refs:
                if ref not in batch and ref not in found:
                    line = lines[i] if lines else None
                    raise RetainError(line, field_name, f"{ref!r} is not a memory id in bank {bank_id!r}")


async def clear_rewritten(conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID]) -> None:
    """What rewritten memories had, gone before they are written again: their entity pairs, their
    observation sources and the links they made (one statement: one command on Citus)."""
    await conn.execute(text(
        "WITH pairs AS (DELETE FROM unit_entities WHERE bank_id = :bank AND unit_id = ANY(:ids)), "
        "sources AS (DELETE FROM observation_sources WHERE bank_id = :bank AND observation_id = ANY(:ids)) "
        "DELETE FROM memory_links WHERE bank_id = :bank AND ((from_unit_id = ANY(:ids) AND link_type IN "
        "('semantic', 'causes')) OR (to_unit_id = ANY(:ids) AND link_type = 'caused_by'))"
    ), {"bank": bank_id, "ids": ids})


async def write_sources(conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory]) -> None:
    """Observation sources: one row per (source, observation) pair; none when no memory names sources."""
    pairs = sorted({(unit_id(bank_id, s), uid) for uid, m in zip(ids, memories, strict=True) for s in m.source_ids})
    if not pairs:
        return
    await conn.execute(text(
        "INSERT INTO observation_sources (source_id, observation_id, bank_id) "
        "SELECT u.s, u.o, b.bank_id FROM banks b CROSS JOIN unnest(CAST(:sources AS uuid[]), "
        "CAST(:observations AS uuid[])) AS u(s, o) WHERE b.bank_id = :bank"
    ), {"bank": bank_id, "sources": [p[0] for p in pairs], "observations": [p[1] for p in pairs]})


async def write_entities(
    conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory], *, arrays: bool = False
) -> None:
    """Entity rows (once per bank and case-folded name) and unit-entity pairs, by binary COPY in id order
    (with ``arrays``, by an insert of bound arrays: on Citus a COPY commits the transaction in two phases)."""
    names: dict[uuid.UUID, str] = {}
    # names differing only in case share an entity: dedupe; the pair keeps its memory's fact type
    pairs: dict[tuple[bytes, bytes], str] = {}
    for uid, m in zip(ids, memories, strict=True):
        for name in m.entities:
            eid = entity_id(bank_id, name)
            names.setdefault(eid, name)
            pairs[(uid.bytes, eid.bytes)] = m.type
    if not names:
        return
    await conn.execute(
        text(
            f"INSERT INTO entities (id, bank_id, canonical_name) SELECT u.id, b.bank_id, u.name FROM {_BANK_AND} "
            "unnest(CAST(:ids AS uuid[]), CAST(:names AS text[])) AS u(id, name) WHERE b.bank_id = :bank "
            "ON CONFLICT ON CONSTRAINT entities_pkey DO NOTHING"
        ),
        {"bank": bank_id, "ids": list(names), "names": list(names.values())},
    )
    if arrays:
        await insert_pairs(conn, bank_id, pairs)
        return
    raw = await driver_connection(conn)
    bank = bank_column(bank_id, len(pairs))
    for fact_type in sorted(set(pairs.values())):  # binary COPY text is fixed-width: one COPY per type
        ordered = sorted(pair for pair, ft in pairs.items() if ft == fact_type)
        encoded = fact_type.encode()
        await copy_columns(
            raw, "COPY unit_entities (unit_id, entity_id, fact_type, bank_id) FROM STDIN (FORMAT BINARY)",
            [*(np.frombuffer(b"".join(p[i] for p in ordered), dtype="V16") for i in (0, 1)),
             np.full(len(ordered), encoded, dtype=f"S{len(encoded)}"), bank[: len(ordered)]],
        )


#: Chunk ids are index keys beside the bank id (chunks' key, memories' document index), and both may
#: be 1,024 bytes: a longer id than this is replaced by its digest, so every key fits a btree entry.
MAX_CHUNK_ID_BYTES = 512


def short_key(chunk_id: str, bank_id: str | None = None) -> str:
    """``chunk_id`` itself, or its digest when it is over :data:`MAX_CHUNK_ID_BYTES`: ``{bank}_sha256:<hex>``
    (the escaped bank first, so the id still names its bank) or, for a bank id too long for that,
    ``sha256:<hex>``. A built id ends in ``_`` and digits, a digest id in hex after ``sha256:``: they cannot meet."""
    if len(chunk_id.encode("utf-8")) <= MAX_CHUNK_ID_BYTES:
        return chunk_id
    digest = "sha256:" + hashlib.sha256(chunk_id.encode("utf-8")).hexdigest()
    named = f"{escape_part(bank_id)}_{digest}" if bank_id is not None else digest
    return named if len(named.encode("utf-8")) <= MAX_CHUNK_ID_BYTES else digest


async def write_chunks(
    conn: AsyncConnection, bank_id: str, memories: Sequence[Memory], *, renumber: Collection[str] = (),
    indexes: Mapping[str, Mapping[str, int]] | None = None,
) -> list[str | None]:
    """Store each distinct source chunk once; return every memory's chunk id.

    Ids are ``{bank}_{doc}_{index}`` as upstream Hindsight forms them, with ``_`` and ``~`` escaped in
    the bank and document ids (:func:`escape_part`), so one id names one (bank, document, index) and a
    chunk id read without its bank (``GET /v1/default/chunks/{id}``) finds one bank's chunk; a chunk
    without a document is ``{bank}__{digest}``, which no document id can produce; a longer id than
    :data:`MAX_CHUNK_ID_BYTES` becomes its digest (:func:`short_key`). The table's key is (bank, id),
    so no bank can replace another's chunk. Ids stored before escaping keep theirs.

    :param renumber: documents written anew (replaced whole): their chunks are numbered from 0 in the
        memories' order, over the ids they had, so the document reads in its new order.
    :param indexes: document id -> chunk text -> the index its new chunk gets (a restore gives back the
        indexes an archive carries); other new chunks are numbered on from the document's last.
    """
    docs = sorted({m.document_id for m in memories if m.chunk and m.document_id} - set(renumber))
    known: dict[tuple[str, str], str] = {}
    next_index: dict[str, int] = {}
    if docs:
        rows = await conn.execute(
            text("SELECT chunk_id, document_id, chunk_index, md5(chunk_text) AS digest FROM chunks "
                 "WHERE bank_id = :bank AND document_id = ANY(:docs)"),
            {"bank": bank_id, "docs": docs},
        )
        for row in rows:
            known[(row.document_id, row.digest)] = row.chunk_id
            next_index[row.document_id] = max(next_index.get(row.document_id, 0), row.chunk_index + 1)
    out: list[str | None] = []
    new: dict[str, tuple[str | None, int, str]] = {}
    for m in memories:
        if not m.chunk:
            out.append(None)
            continue
        digest = hashlib.md5(m.chunk.encode()).hexdigest()
        doc_key = m.document_id or f"\x00{digest}"  # documents cannot hold NUL: no clash
        chunk_id = known.get((doc_key, digest))
        if chunk_id is None:
            given = (indexes or {}).get(m.document_id or "", {}).get(m.chunk)
            index = given if given is not None else next_index.get(doc_key, 0) if m.document_id else 0
            next_index[doc_key] = max(next_index.get(doc_key, 0), index + 1)
            bank = escape_part(bank_id)
            chunk_id = short_key(f"{bank}_{escape_part(doc_key)}_{index}" if m.document_id else f"{bank}__{digest}",
                                 bank_id)
            known[(doc_key, digest)] = chunk_id
            new[chunk_id] = (m.document_id, index, m.chunk)
        out.append(chunk_id)
    if new:
        await conn.execute(
            text(
                "INSERT INTO chunks (chunk_id, document_id, bank_id, chunk_index, chunk_text) "
                f"SELECT u.c, u.d, b.bank_id, u.i, u.t FROM {_BANK_AND} unnest(CAST(:ids AS text[]), "
                "CAST(:docs AS text[]), CAST(:idx AS int[]), CAST(:texts AS text[])) AS u(c, d, i, t) "
                "WHERE b.bank_id = :bank ON CONFLICT (bank_id, chunk_id) DO UPDATE SET chunk_text = excluded.chunk_text"
            ),
            {"bank": bank_id, "ids": list(new), "docs": [v[0] for v in new.values()],
             "idx": [v[1] for v in new.values()], "texts": [v[2] for v in new.values()]},
        )
    return out


async def write_documents(conn: AsyncConnection, bank_id: str, memories: Sequence[Memory], *, fresh: bool) -> None:
    """Date the documents the memories belong to (created once, updated at every write), and drop the
    chunks of those documents that no memory uses any more (the old texts of a re-sent document).

    Runs after the memories are written; a memory a caller removes next keeps its chunk until then.
    """
    docs = sorted({m.document_id for m in memories if m.document_id})
    if not docs:
        return
    # the time goes in with the row: Citus runs no function in an upsert's SET on the workers
    await conn.execute(text(
        "INSERT INTO documents (bank_id, document_id, created_at, updated_at) "
        f"SELECT b.bank_id, d, :now, :now FROM {_BANK_AND} unnest(CAST(:docs AS text[])) AS d "
        "WHERE b.bank_id = :bank ON CONFLICT (bank_id, document_id) DO UPDATE SET updated_at = excluded.updated_at"
    ), {"bank": bank_id, "docs": docs, "now": datetime.now(UTC)})
    if fresh:
        return
    # the documents' memories are read once, into a hashed subplan: NOT EXISTS let the planner, which
    # expects few rows from the document filter, choose a nested loop that read them once per chunk
    # (seconds for a document of some thousand memories, retained in parts)
    await conn.execute(text(
        "DELETE FROM chunks c WHERE c.bank_id = :bank AND c.document_id = ANY(:docs) AND c.chunk_id NOT IN "
        f"(SELECT u.chunk_id FROM memory_units u WHERE u.bank_id = :bank AND {of_document('u', 'ANY(:docs)')} "
        "AND u.chunk_id IS NOT NULL)"
    ), {"bank": bank_id, "docs": docs})
