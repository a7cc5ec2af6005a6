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

import asyncio
import json
import zipfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, cast

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
    #: each fact's JSON, encoded as it is read (strings keep the garbage collector's work small)
    facts: list[str] = field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def add(self, row: Any) -> None:
        if row.chunk_index is not None and row.chunk_text is not None:
            self.chunks.setdefault(row.chunk_index, row.chunk_text)
        self.facts.append(json.dumps(_fact(row), ensure_ascii=False))
        stamps = (row.document_created_at, row.document_updated_at) if row.document_id is not None else (None, None)
        self.created_at = stamps[0] or _earliest(self.created_at, row.created_at)
        self.updated_at = stamps[1]

    def as_json(self) -> bytes:
        """The document's entry: the same bytes as encoding it whole, its facts encoded one at a time (no
        single call holds the interpreter for long)."""
        head = json.dumps({
            "id": self.id, "original_text": None, "retain_params": None, "tags": [],
            "created_at": _iso(self.created_at),
            "chunks": [{"chunk_index": i, "chunk_text": t} for i, t in sorted(self.chunks.items())],
        }, ensure_ascii=False)
        tail = json.dumps({OURS: {"updated_at": _iso(self.updated_at)}}, ensure_ascii=False)
        return f'{head[:-1]}, "facts": {_list(self.facts)}, {tail[1:]}'.encode()


def _list(encoded: list[str]) -> str:
    """A JSON array of items already encoded (as ``json.dumps`` writes it whole)."""
    return "[" + ", ".join(encoded) + "]"


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

    The rows are read here and written in a worker thread, :data:`BATCH_ROWS` at a time, so that
    encoding and compressing a large bank leaves the event loop free. Only one document is held at a
    time; observations are held until the documents are written (upstream's layout puts them in one
    entry after the documents).

    :param wanted: only these documents (a document subset carries no observations, links or settings).
    :param invalidated: the bank's invalidated memories (see :func:`~.store.transfer.invalidated_rows`).
    """
    writer = _Writer(out, wanted)
    async for batch in _batches(rows):
        await asyncio.to_thread(writer.rows, batch)
    await asyncio.to_thread(writer.documents_done)
    if wanted is None:
        for entry, lines, line in ((LINKS_ENTRY, links, _link), (INVALIDATED_ENTRY, invalidated, _invalidated)):
            if lines is None:
                continue
            await asyncio.to_thread(writer.open_lines, entry)
            async for batch in _batches(lines):
                await asyncio.to_thread(writer.lines, batch, line)
            await asyncio.to_thread(writer.close_lines)
    await asyncio.to_thread(writer.finish, bank_id, bank_row, archive_type)
    return writer.counts


#: rows handed to the writing thread at a time
BATCH_ROWS = 1000


async def _batches(rows: AsyncIterator[Any]) -> AsyncIterator[list[Any]]:
    batch: list[Any] = []
    async for row in rows:
        batch.append(row)
        if len(batch) >= BATCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


class _Writer:
    """The archive's entries, written from batches of rows; used by one thread at a time, in order."""

    def __init__(self, out: IO[bytes], wanted: set[str] | None) -> None:
        self.zf = zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED)
        self.wanted = wanted
        self.counts = ExportCounts()
        self.observations: list[str] = []
        self.current: _Document | None = None
        #: the entry of JSON lines open for writing
        self.entry, self.handle = "", cast(IO[bytes] | None, None)

    def rows(self, batch: list[Any]) -> None:
        for row in batch:
            if row.fact_type == "observation" and row.document_id is None:
                if self.wanted is None:
                    self.observations.append(json.dumps(_observation(row), ensure_ascii=False))
                continue
            doc_id = row.document_id if row.document_id is not None else NO_DOCUMENT
            if self.wanted is not None and doc_id not in self.wanted:
                continue
            if self.current is None or self.current.id != doc_id:
                self._flush()
                self.current = _Document(doc_id)
            self.current.add(row)

    def _flush(self) -> None:
        current, self.current = self.current, None
        if current is not None and current.facts:
            self.zf.writestr(f"documents/{self.counts.documents:06d}.json", current.as_json())
            self.counts.documents += 1
            self.counts.facts += len(current.facts)

    def documents_done(self) -> None:
        """The last document, then (for a whole bank) the observations."""
        self._flush()
        self.counts.observations = len(self.observations)
        if self.wanted is None:
            self.zf.writestr("observations.json", _list(self.observations).encode())

    def open_lines(self, entry: str) -> None:
        self.entry, self.handle = entry, self.zf.open(entry, "w")

    def lines(self, batch: list[Any], line: Callable[[Any], dict[str, Any]]) -> None:
        """Rows written into the open entry, a JSON line each (``line`` makes a row's object)."""
        assert self.handle is not None
        for row in batch:
            self.handle.write(json.dumps(line(row), ensure_ascii=False).encode() + b"\n")
        if self.entry == LINKS_ENTRY:
            self.counts.links += len(batch)
        else:
            self.counts.invalidated += len(batch)

    def close_lines(self) -> None:
        assert self.handle is not None
        self.handle.close()
        self.handle = None

    def finish(self, bank_id: str, bank_row: dict[str, Any] | None, archive_type: str) -> None:
        """The bank's settings and the manifest; the archive is complete."""
        counts = self.counts
        if self.wanted is None and bank_row is not None:
            self.zf.writestr("banks.json", json.dumps([bank_row], ensure_ascii=False, default=str).encode())
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
        self.zf.writestr("manifest.json", json.dumps(manifest, indent=2).encode())
        self.zf.close()


def _link(row: Any) -> dict[str, Any]:
    return {"from": row.source, "to": row.target, "type": row.link_type, "weight": row.weight}


def _invalidated(row: Any) -> dict[str, Any]:
    return {"memory": row.memory, "reason": row.reason, "invalidated_at": _iso(row.invalidated_at)}


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
