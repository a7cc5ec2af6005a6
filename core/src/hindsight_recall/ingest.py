"""Retain: embed ready-made facts and bulk-load them with their entities, chunks and links (SPEC §0)."""

from __future__ import annotations

import hashlib
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import banks
from .db import Database
from .errors import RetainError
from .links import causal_links, semantic_links, temporal_links
from .protocols import EmbeddingProvider, TextSearchBackend
from .schema import vector_index_statements
from .settings import Settings
from .types import Memory

_NAMESPACE = uuid.UUID("6f1c7a52-3d55-4c1e-9a0f-2f6b7f1d9e11")

_STAGE_COLUMNS = (
    "id uuid, bank_id text, external_id text, fact_type text, text text, context text, embedding text, "
    "occurred_start timestamptz, occurred_end timestamptz, mentioned_at timestamptz, event_date timestamptz, "
    "tags varchar[], metadata jsonb, document_id text, chunk_id text, proof_count int, "
    "source_memory_ids uuid[], text_signals text, document text"
)
_UNIT_COLUMNS = (
    "id, bank_id, external_id, fact_type, text, context, embedding, occurred_start, occurred_end, "
    "mentioned_at, event_date, tags, metadata, document_id, chunk_id, proof_count, source_memory_ids, "
    "text_signals"
)
_UPDATE = ", ".join(f"{c} = excluded.{c}" for c in _UNIT_COLUMNS.split(", ")[1:]) + ", search_vector = excluded.search_vector, updated_at = now()"


def unit_id(bank_id: str, memory_id: str) -> uuid.UUID:
    """The stable row id of a caller's memory id within a bank."""
    return uuid.uuid5(_NAMESPACE, f"{bank_id}\x1f{memory_id}")


def entity_id(bank_id: str, name: str) -> uuid.UUID:
    """Entities are unique per bank, case-insensitively."""
    return uuid.uuid5(_NAMESPACE, f"{bank_id}\x1fentity\x1f{name.casefold()}")


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
    link_seconds: float = 0.0
    per_bank: dict[str, int] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.memories / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "memories": self.memories, "banks": self.banks, "links": self.links,
            "seconds": round(self.seconds, 3), "embedding_seconds": round(self.embedding_seconds, 3),
            "link_seconds": round(self.link_seconds, 3), "memories_per_second": round(self.per_second, 1),
        }


class Ingestor:
    """Validates, embeds and writes batches of memories, one transaction per call."""

    def __init__(self, db: Database, embedder: EmbeddingProvider, backend: TextSearchBackend, settings: Settings) -> None:
        self.db, self.embedder, self.backend, self.settings = db, embedder, backend, settings

    async def retain(
        self,
        batches: Mapping[str, Sequence[Memory]],
        *,
        lines: Mapping[str, Sequence[int]] | None = None,
        progress: bool | None = None,
    ) -> RetainStats:
        """Write every bank's memories; all or nothing.

        :param batches: bank id -> memories.
        :param lines: bank id -> source line numbers, for error messages.
        :param progress: show a progress bar (default: when stderr is a terminal).
        """
        started = time.perf_counter()
        stats = RetainStats()
        for bank_id, memories in batches.items():
            banks.validate_bank_id(bank_id)
            _check_unique(memories, (lines or {}).get(bank_id))
        ordered = [(b, m) for b, ms in batches.items() for m in ms]
        t0 = time.perf_counter()
        vectors = await self._embed([m.text for _, m in ordered], progress)
        stats.embedding_seconds = time.perf_counter() - t0
        async with self.db.connect() as conn:
            offset = 0
            for bank_id, memories in batches.items():
                if not memories:
                    continue
                await self._retain_bank(conn, bank_id, memories, vectors[offset : offset + len(memories)],
                                        (lines or {}).get(bank_id), stats)
                offset += len(memories)
        stats.seconds = time.perf_counter() - started
        return stats

    async def _embed(self, texts: list[str], progress: bool | None) -> list[list[float]]:
        size = max(self.settings.embeddings_batch_size * 4, 64)
        show = sys.stderr.isatty() if progress is None else progress
        from tqdm import tqdm  # late: only retain needs it

        out: list[list[float]] = []
        with tqdm(total=len(texts), desc="embedding", unit="memory", disable=not show, file=sys.stderr) as bar:
            for i in range(0, len(texts), size):
                out.extend(await self.embedder.embed(texts[i : i + size], mode="passage"))
                bar.update(min(size, len(texts) - i))
        return out

    async def _retain_bank(
        self,
        conn: AsyncConnection,
        bank_id: str,
        memories: Sequence[Memory],
        vectors: Sequence[Sequence[float]],
        lines: Sequence[int] | None,
        stats: RetainStats,
    ) -> None:
        internal_id, created = await banks.ensure_bank(conn, bank_id)
        ids = [unit_id(bank_id, m.id) for m in memories]
        await _check_references(conn, bank_id, memories, lines)
        chunk_ids = await _write_chunks(conn, bank_id, memories)
        raw = await _raw(conn)
        await conn.execute(text(f"CREATE TEMP TABLE IF NOT EXISTS stage_units ({_STAGE_COLUMNS}) ON COMMIT DELETE ROWS"))
        async with raw.cursor().copy(f"COPY stage_units ({_UNIT_COLUMNS}, document) FROM STDIN") as copy:
            for uid, memory, vector, chunk_id in zip(ids, memories, vectors, chunk_ids, strict=True):
                await copy.write_row(self._stage_row(bank_id, uid, memory, vector, chunk_id))
        await conn.execute(text(
            f"INSERT INTO memory_units ({_UNIT_COLUMNS}, search_vector) "
            f"SELECT id, bank_id, external_id, fact_type, text, context, CAST(embedding AS vector), "
            f"occurred_start, occurred_end, mentioned_at, event_date, tags, metadata, document_id, chunk_id, "
            f"proof_count, source_memory_ids, text_signals, {self.backend.write_expression('document')} "
            f"FROM stage_units ON CONFLICT (id) DO UPDATE SET {_UPDATE}"
        ))
        await conn.execute(text("TRUNCATE stage_units"))
        await _write_entities(conn, bank_id, ids, memories)
        t0 = time.perf_counter()
        stats.links += await self._write_links(conn, bank_id, ids, memories, vectors)
        stats.link_seconds += time.perf_counter() - t0
        if created:
            # Built once after the bulk load: inserting into a live HNSW index is ~10x slower.
            await conn.execute(text("SET LOCAL maintenance_work_mem = '512MB'"))
            for statement in vector_index_statements(bank_id, str(internal_id)):
                await conn.execute(text(statement))
        stats.memories += len(memories)
        stats.banks += 1
        stats.per_bank[bank_id] = len(memories)

    def _stage_row(self, bank_id: str, uid: uuid.UUID, m: Memory, vector: Sequence[float], chunk_id: str | None) -> tuple[Any, ...]:
        import json

        signals = text_signals(m)
        document = self.backend.prepare_document(" ".join([m.text, m.context or "", signals]))
        return (
            uid, bank_id, m.id, m.type, m.text, m.context,
            "[" + ",".join(f"{v:.7g}" for v in vector) + "]",
            m.occurred_start, m.occurred_end, m.mentioned_at,
            m.occurred_start or m.mentioned_at or m.occurred_end,
            list(m.tags), json.dumps(dict(m.metadata)) if m.metadata else None,
            m.document_id, chunk_id, m.proof_count,
            [unit_id(bank_id, s) for s in m.source_ids] or None,
            signals, document,
        )

    async def _write_links(
        self, conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory],
        vectors: Sequence[Sequence[float]],
    ) -> int:
        await conn.execute(
            text(
                "DELETE FROM memory_links WHERE (from_unit_id = ANY(:ids) AND link_type IN "
                "('semantic', 'temporal', 'causes')) OR (to_unit_id = ANY(:ids) AND link_type = 'caused_by')"
            ),
            {"ids": ids},
        )
        dates = [m.occurred_start or m.mentioned_at or m.occurred_end for m in memories]
        links = [
            *await semantic_links(conn, bank_id, ids, vectors, self.settings.semantic_link_min_similarity),
            *await temporal_links(conn, bank_id, ids, dates),
            *causal_links(ids, [[unit_id(bank_id, c) for c in m.causes] for m in memories]),
        ]
        if not links:
            return 0
        raw = await _raw(conn)
        await conn.execute(text(
            "CREATE TEMP TABLE IF NOT EXISTS stage_links (from_unit_id uuid, to_unit_id uuid, link_type text, "
            "weight double precision) ON COMMIT DELETE ROWS"
        ))
        async with raw.cursor().copy("COPY stage_links FROM STDIN") as copy:
            for link in links:
                await copy.write_row(link)
        await conn.execute(text(
            "INSERT INTO memory_links SELECT DISTINCT ON (from_unit_id, to_unit_id, link_type) * FROM stage_links "
            "ORDER BY from_unit_id, to_unit_id, link_type, weight DESC "
            "ON CONFLICT (from_unit_id, to_unit_id, link_type) DO UPDATE SET weight = excluded.weight"
        ))
        await conn.execute(text("TRUNCATE stage_links"))
        return len(links)


async def _raw(conn: AsyncConnection) -> Any:
    """The psycopg connection under SQLAlchemy, for COPY."""
    raw = await conn.get_raw_connection()
    return raw.driver_connection


def _check_unique(memories: Sequence[Memory], lines: Sequence[int] | None) -> None:
    seen: dict[str, int] = {}
    for i, m in enumerate(memories):
        line = lines[i] if lines else None
        if m.id in seen:
            first = lines[seen[m.id]] if lines else seen[m.id]
            raise RetainError(line, "id", f"{m.id!r} appears twice in this batch (first at {first})")
        seen[m.id] = i


async def _check_references(conn: AsyncConnection, bank_id: str, memories: Sequence[Memory], lines: Sequence[int] | None) -> None:
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


async def _write_entities(conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], memories: Sequence[Memory]) -> None:
    await conn.execute(text("DELETE FROM unit_entities WHERE unit_id = ANY(:ids)"), {"ids": ids})
    names: dict[uuid.UUID, str] = {}
    pairs: list[dict[str, Any]] = []
    for uid, m in zip(ids, memories, strict=True):
        for name in dict.fromkeys(m.entities):
            eid = entity_id(bank_id, name)
            names.setdefault(eid, name)
            pairs.append({"unit": uid, "entity": eid})
    if not names:
        return
    await conn.execute(
        text(
            "INSERT INTO entities (id, bank_id, canonical_name) "
            "SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:banks AS text[]), CAST(:names AS text[])) "
            "ON CONFLICT (id) DO NOTHING"
        ),
        {"ids": list(names), "banks": [bank_id] * len(names), "names": list(names.values())},
    )
    await conn.execute(
        text(
            "INSERT INTO unit_entities (unit_id, entity_id) "
            "SELECT DISTINCT * FROM unnest(CAST(:units AS uuid[]), CAST(:entities AS uuid[])) ON CONFLICT DO NOTHING"
        ),
        {"units": [p["unit"] for p in pairs], "entities": [p["entity"] for p in pairs]},
    )


async def _write_chunks(conn: AsyncConnection, bank_id: str, memories: Sequence[Memory]) -> list[str | None]:
    """Store each distinct source chunk once; return every memory's chunk id (``{bank}_{doc}_{index}``)."""
    docs = sorted({m.document_id for m in memories if m.chunk and m.document_id})
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
        doc_key = m.document_id or f"chunk-{digest[:16]}"
        chunk_id = known.get((doc_key, digest))
        if chunk_id is None:
            index = next_index.get(doc_key, 0) if m.document_id else 0
            next_index[doc_key] = index + 1
            chunk_id = known[(doc_key, digest)] = f"{bank_id}_{doc_key}_{index}"
            new[chunk_id] = (m.document_id, index, m.chunk)
        out.append(chunk_id)
    if new:
        await conn.execute(
            text(
                "INSERT INTO chunks (chunk_id, document_id, bank_id, chunk_index, chunk_text) "
                "SELECT c, d, :bank, i, t FROM unnest(CAST(:ids AS text[]), CAST(:docs AS text[]), "
                "CAST(:idx AS int[]), CAST(:texts AS text[])) AS u(c, d, i, t) "
                "ON CONFLICT (chunk_id) DO UPDATE SET chunk_text = excluded.chunk_text"
            ),
            {"bank": bank_id, "ids": list(new), "docs": [v[0] for v in new.values()],
             "idx": [v[1] for v in new.values()], "texts": [v[2] for v in new.values()]},
        )
    return out
