"""Upstream Hindsight's bank transfer archive (schema version 1): writing a bank into one
(:mod:`.archive_reader` reads one back).

The archive is a ZIP: ``manifest.json``, ``documents/NNNNNN.json`` (a document with its chunks and
facts), ``observations.json``, ``banks.json`` (the bank's settings) and, ours, ``hindsight-recall/
links.jsonl`` (every link with its weight, one JSON object a line) and ``hindsight-recall/
invalidated.jsonl`` (every invalidated memory with its reason and time). Upstream's importer reads the
entries it knows and passes over ours; every field we add sits under ``hindsight_recall``, which
upstream's models ignore. Memories without a document travel in one document named
:data:`NO_DOCUMENT`, which a restore here turns back into memories without one.

What a restore here needs to give back the same bank travels too: each memory's id, place, proof
count, sources and creation time, each chunk's index, each document's dates, the stored profile and
settings. Embeddings never travel: a restore embeds again with the target's model.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from .errors import InvalidRequest

SCHEMA_VERSION = 1
#: the document id that carries memories without a document
NO_DOCUMENT = "hindsight-recall:no-document"
LINKS_ENTRY = "hindsight-recall/links.jsonl"
INVALIDATED_ENTRY = "hindsight-recall/invalidated.jsonl"
#: where our fields sit in upstream's objects
OURS = "hindsight_recall"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _fact(row: Any) -> dict[str, Any]:
    """One memory as upstream's TransferFact, with ours under ``hindsight_recall``."""
    return {
        "text": row.text, "source_id": row.external_id, "fact_type": row.fact_type, "context": row.context,
        "event_date": _iso(row.event_date), "occurred_start": _iso(row.occurred_start),
        "occurred_end": _iso(row.occurred_end), "mentioned_at": _iso(row.mentioned_at),
        "metadata": dict(row.metadata or {}), "tags": list(row.tags or []), "chunk_index": row.chunk_index,
        "entities": list(row.entities or []), "causal_relations": [], "created_at": _iso(row.created_at),
        OURS: {"id": row.external_id, "proof_count": row.proof_count, "position": row.position,
               "sources": list(row.sources or [])},
    }


@dataclass
class _Document:
    id: str
    #: chunk index -> text, as stored (a document's text is its chunks in this order)
    chunks: dict[int, str] = field(default_factory=dict)
    facts: list[dict[str, Any]] = field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def add(self, row: Any) -> None:
        if row.chunk_index is not None and row.chunk_text is not None:
            self.chunks.setdefault(row.chunk_index, row.chunk_text)
        self.facts.append(_fact(row))
        stamps = (row.document_created_at, row.document_updated_at) if row.document_id is not None else (None, None)
        self.created_at = stamps[0] or _earliest(self.created_at, row.created_at)
        self.updated_at = stamps[1]

    def as_json(self) -> bytes:
        return json.dumps({
            "id": self.id, "original_text": None, "retain_params": None, "tags": [],
            "created_at": _iso(self.created_at),
            "chunks": [{"chunk_index": i, "chunk_text": t} for i, t in sorted(self.chunks.items())],
            "facts": self.facts, OURS: {"updated_at": _iso(self.updated_at)},
        }, ensure_ascii=False).encode()


def _earliest(current: datetime | None, other: datetime | None) -> datetime | None:
    return other if current is None or (other is not None and other < current) else current


@dataclass
class ExportCounts:
    documents: int = 0
    facts: int = 0
    observations: int = 0
    links: int = 0
    invalidated: int = 0


async def write_archive(
    out: IO[bytes], bank_id: str, rows: AsyncIterator[Any], links: AsyncIterator[Any] | None,
    bank_row: dict[str, Any] | None, *, archive_type: str = "bank", wanted: set[str] | None = None,
    invalidated: AsyncIterator[Any] | None = None,
) -> ExportCounts:
    """Write the archive of ``rows`` (see :func:`~.store.transfer.memory_rows`) into ``out``.

    Only one document is held at a time; observations are held until the documents are written
    (upstream's layout puts them in one entry after the documents).

    :param wanted: only these documents (a document subset carries no observations, links or settings).
    :param invalidated: the bank's invalidated memories (see :func:`~.store.transfer.invalidated_rows`).
    """
    counts = ExportCounts()
    observations: list[dict[str, Any]] = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        current: _Document | None = None

        def flush() -> None:
            nonlocal current
            if current is not None and current.facts:
                zf.writestr(f"documents/{counts.documents:06d}.json", current.as_json())
                counts.documents += 1
                counts.facts += len(current.facts)
            current = None

        async for row in rows:
            if row.fact_type == "observation" and row.document_id is None:
                if wanted is None:
                    observations.append(_observation(row))
                continue
            doc_id = row.document_id if row.document_id is not None else NO_DOCUMENT
            if wanted is not None and doc_id not in wanted:
                continue
            if current is None or current.id != doc_id:
                flush()
                current = _Document(doc_id)
            current.add(row)
        flush()
        counts.observations = len(observations)
        if wanted is None:
            zf.writestr("observations.json", json.dumps(observations, ensure_ascii=False).encode())
            if links is not None:
                with zf.open(LINKS_ENTRY, "w") as handle:
                    async for link in links:
                        handle.write(json.dumps({"from": link.source, "to": link.target, "type": link.link_type,
                                                 "weight": link.weight}, ensure_ascii=False).encode() + b"\n")
                        counts.links += 1
            if invalidated is not None:
                with zf.open(INVALIDATED_ENTRY, "w") as handle:
                    async for record in invalidated:
                        handle.write(json.dumps({"memory": record.memory, "reason": record.reason,
                                                 "invalidated_at": _iso(record.invalidated_at)},
                                                ensure_ascii=False).encode() + b"\n")
                        counts.invalidated += 1
            if bank_row is not None:
                zf.writestr("banks.json", json.dumps([bank_row], ensure_ascii=False, default=str).encode())
        manifest = {
            "schema_version": SCHEMA_VERSION, "source_bank_id": bank_id, "exported_at": _iso(datetime.now(UTC)),
            "document_count": counts.documents, "fact_count": counts.facts,
            "observation_count": counts.observations, "mental_model_count": 0, "knowledge_page_count": 0,
            "archive_type": archive_type, "directive_count": 0, "webhook_count": 0, "includes_history": False,
            "scope": {"data": True, "bank_config": bank_row is not None, "history": False}
            if archive_type == "bank" else None,
            "attachment_count": 0, "operation_count": 0, "invalidated_memory_count": counts.invalidated,
            "bank_rows_json_encoding": "decoded" if archive_type == "bank" else None,
        }
        zf.writestr("manifest.json", json.dumps(manifest, indent=2).encode())
    return counts


def _observation(row: Any) -> dict[str, Any]:
    """An observation as upstream's TransferObservation; its sources by id under ``hindsight_recall``
    (upstream's document/ordinal form is not written: our observations may cite memories anywhere)."""
    fact = _fact(row)
    return {
        "source_id": row.external_id, "text": row.text, "created_at": fact["created_at"], "tags": fact["tags"],
        "event_date": fact["event_date"], "occurred_start": fact["occurred_start"],
        "occurred_end": fact["occurred_end"], "mentioned_at": fact["mentioned_at"], "proof_count": row.proof_count,
        "sources": [], OURS: {**fact[OURS], "context": row.context, "entities": fact["entities"],
                              "metadata": fact["metadata"], "chunk": row.chunk_text},
    }


def invalid(message: str) -> InvalidRequest:
    """The refusal of an archive (400), saying what is wrong with it."""
    return InvalidRequest("file", message if message.startswith("invalid transfer archive") else
                          f"invalid transfer archive: {message}", status=400)
