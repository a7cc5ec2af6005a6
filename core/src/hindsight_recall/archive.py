"""Upstream Hindsight's bank transfer archive (schema version 1): write a bank into one, restore one.

The archive is a ZIP: ``manifest.json``, ``documents/NNNNNN.json`` (a document with its chunks and
facts), ``observations.json``, ``banks.json`` (the bank's settings) and, ours, ``hindsight-recall/
links.jsonl`` (every link with its weight, one JSON object a line). Upstream's importer reads the
entries it knows and passes over ours; every field we add to a fact sits under ``hindsight_recall``,
which upstream's models ignore. Memories without a document travel in one document named
:data:`NO_DOCUMENT`, which a restore here turns back into memories without one.

Embeddings never travel: a restore embeds again with the target's model.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from .errors import InvalidRequest, RetainError
from .retain.memories import parse_datetime
from .types import FACT_TYPES, Memory

SCHEMA_VERSION = 1
#: the document id that carries memories without a document
NO_DOCUMENT = "hindsight-recall:no-document"
LINKS_ENTRY = "hindsight-recall/links.jsonl"
#: the largest uncompressed entry a restore reads (a guard against ZIP bombs)
MAX_ENTRY_BYTES = 256 << 20
#: what a restore retains per transaction (whole documents; at least one)
BATCH_MEMORIES = 2000


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _fact(row: Any, chunk_index: int | None) -> dict[str, Any]:
    """One memory as upstream's TransferFact, with ours under ``hindsight_recall``."""
    return {
        "text": row.text, "source_id": row.external_id, "fact_type": row.fact_type, "context": row.context,
        "event_date": _iso(row.event_date), "occurred_start": _iso(row.occurred_start),
        "occurred_end": _iso(row.occurred_end), "mentioned_at": _iso(row.mentioned_at),
        "metadata": dict(row.metadata or {}), "tags": list(row.tags or []), "chunk_index": chunk_index,
        "entities": list(row.entities or []), "causal_relations": [], "created_at": _iso(row.created_at),
        "hindsight_recall": {"id": row.external_id, "proof_count": row.proof_count, "position": row.position,
                             "sources": list(row.sources or [])},
    }


@dataclass
class _Document:
    id: str
    chunks: dict[str, tuple[int, str]] = field(default_factory=dict)
    facts: list[dict[str, Any]] = field(default_factory=list)
    created_at: datetime | None = None

    def add(self, row: Any) -> None:
        index = None
        if row.chunk_id is not None and row.chunk_text is not None:
            index, _ = self.chunks.setdefault(row.chunk_id, (len(self.chunks), row.chunk_text))
        self.facts.append(_fact(row, index))
        if row.created_at is not None and (self.created_at is None or row.created_at < self.created_at):
            self.created_at = row.created_at

    def as_json(self) -> bytes:
        return json.dumps({
            "id": self.id, "original_text": None, "retain_params": None, "tags": [],
            "created_at": _iso(self.created_at),
            "chunks": [{"chunk_index": i, "chunk_text": t} for i, t in self.chunks.values()], "facts": self.facts,
        }, ensure_ascii=False).encode()


@dataclass
class ExportCounts:
    documents: int = 0
    facts: int = 0
    observations: int = 0
    links: int = 0


async def write_archive(
    out: IO[bytes], bank_id: str, rows: AsyncIterator[Any], links: AsyncIterator[Any] | None,
    bank_row: dict[str, Any] | None, *, archive_type: str = "bank", wanted: set[str] | None = None,
) -> ExportCounts:
    """Write the archive of ``rows`` (see :func:`~.store.transfer.memory_rows`) into ``out``.

    Only one document is held at a time; observations are held until the documents are written
    (upstream's layout puts them in one entry after the documents).

    :param wanted: only these documents (a document subset carries no observations, links or settings).
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
            if bank_row is not None:
                zf.writestr("banks.json", json.dumps([bank_row], ensure_ascii=False, default=str).encode())
        manifest = {
            "schema_version": SCHEMA_VERSION, "source_bank_id": bank_id, "exported_at": _iso(datetime.now(UTC)),
            "document_count": counts.documents, "fact_count": counts.facts,
            "observation_count": counts.observations, "mental_model_count": 0, "knowledge_page_count": 0,
            "archive_type": archive_type, "directive_count": 0, "webhook_count": 0, "includes_history": False,
            "scope": {"data": True, "bank_config": bank_row is not None, "history": False}
            if archive_type == "bank" else None,
            "attachment_count": 0, "operation_count": 0, "invalidated_memory_count": 0,
            "bank_rows_json_encoding": "decoded" if archive_type == "bank" else None,
        }
        zf.writestr("manifest.json", json.dumps(manifest, indent=2).encode())
    return counts


def _observation(row: Any) -> dict[str, Any]:
    """An observation as upstream's TransferObservation; its sources by id under ``hindsight_recall``
    (upstream's document/ordinal form is not written: our observations may cite memories anywhere)."""
    fact = _fact(row, None)
    return {
        "source_id": row.external_id, "text": row.text, "created_at": fact["created_at"], "tags": fact["tags"],
        "event_date": fact["event_date"], "occurred_start": fact["occurred_start"],
        "occurred_end": fact["occurred_end"], "mentioned_at": fact["mentioned_at"], "proof_count": row.proof_count,
        "sources": [], "hindsight_recall": {**fact["hindsight_recall"], "context": row.context,
                                            "entities": fact["entities"], "metadata": fact["metadata"],
                                            "chunk": row.chunk_text},
    }


# --- reading -----------------------------------------------------------------------------------


def bad(message: str) -> InvalidRequest:
    return InvalidRequest("file", f"invalid transfer archive: {message}", status=400)


class Archive:
    """An uploaded archive, checked up front: a readable ZIP with a version-1 manifest and no entry
    larger than :data:`MAX_ENTRY_BYTES` uncompressed."""

    def __init__(self, source: IO[bytes]) -> None:
        try:
            self.zf = zipfile.ZipFile(source)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise bad(f"not a readable .zip ({exc})") from None
        big = [i.filename for i in self.zf.infolist() if i.file_size > MAX_ENTRY_BYTES]
        if big:
            raise bad(f"entry {big[0]!r} is larger than {MAX_ENTRY_BYTES} bytes uncompressed")
        if "manifest.json" not in self.zf.NameToInfo:
            raise bad("manifest.json is missing; this route takes a .zip made by a transfer export")
        manifest = self._json("manifest.json")
        if not isinstance(manifest, dict):
            raise bad("manifest.json is not a JSON object")
        version = manifest.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise bad(f"unsupported schema version {version!r} (this server reads {SCHEMA_VERSION})")
        source_bank = manifest.get("source_bank_id")
        if not isinstance(source_bank, str) or not source_bank:
            raise bad("manifest.json: source_bank_id must be a non-empty string")
        self.manifest = manifest
        self.source_bank_id = source_bank
        self.archive_type = manifest.get("archive_type", "documents")

    def _json(self, name: str) -> Any:
        try:
            return json.loads(self.zf.read(name))
        except (ValueError, zipfile.BadZipFile, OSError) as exc:
            raise bad(f"{name} is not valid JSON ({exc})") from None

    def documents(self) -> Iterator[dict[str, Any]]:
        for name in sorted(n for n in self.zf.NameToInfo if n.startswith("documents/") and n.endswith(".json")):
            doc = self._json(name)
            if not isinstance(doc, dict) or not isinstance(doc.get("id"), str) or not doc["id"]:
                raise bad(f"{name}: a document needs a non-empty string id")
            if not isinstance(doc.get("facts", []), list) or not isinstance(doc.get("chunks", []), list):
                raise bad(f"{name}: facts and chunks must be lists")
            yield doc

    def observations(self) -> list[dict[str, Any]]:
        found = self._json("observations.json") if "observations.json" in self.zf.NameToInfo else []
        if not isinstance(found, list):
            raise bad("observations.json is not a JSON array")
        return found

    def bank_row(self) -> dict[str, Any] | None:
        rows = self._json("banks.json") if "banks.json" in self.zf.NameToInfo else []
        return rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], dict) else None

    def has_links(self) -> bool:
        return LINKS_ENTRY in self.zf.NameToInfo

    def links(self) -> Iterator[tuple[str, str, str, float]]:
        with self.zf.open(LINKS_ENTRY) as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    obj = json.loads(line)
                    link = (str(obj["from"]), str(obj["to"]), str(obj["type"]), float(obj["weight"]))
                except (ValueError, KeyError, TypeError):
                    raise bad(f"{LINKS_ENTRY} line {number} is not a link") from None
                if link[2] not in ("semantic", "temporal", "causes", "caused_by", "enables", "prevents") \
                        or not 0 <= link[3] <= 1:
                    raise bad(f"{LINKS_ENTRY} line {number}: unknown link type or a weight outside [0, 1]")
                yield link


def _date(fact: dict[str, Any], name: str, where: str) -> datetime | None:
    value = fact.get(name)
    if value is None:
        return None
    try:
        parsed = parse_datetime(value, name)
    except RetainError:
        raise bad(f"{where}: {name} is not an ISO-8601 date") from None
    # upstream writes an open bound as year 1 or 9999: read it as unknown, as upstream's importer does
    return None if parsed.year in (1, 9999) else parsed


def _strs(value: Any, name: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad(f"{where}: {name} must be a list of strings")
    return tuple(dict.fromkeys(v for v in value if v.strip()))


def document_memories(doc: dict[str, Any], where: str, *, own_links: bool) -> list[Memory]:
    """A document's facts as memories: their ids (ours, else upstream's source id, else the document
    id and ordinal), chunks, entities, tags and dates; causes from upstream's causal relations unless
    the archive carries our links (``own_links``), which are restored exactly afterwards."""
    chunks: dict[int, str] = {}
    for chunk in doc.get("chunks") or []:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("chunk_index"), int) \
                or not isinstance(chunk.get("chunk_text"), str):
            raise bad(f"{where}: a chunk needs an integer chunk_index and a string chunk_text")
        chunks[chunk["chunk_index"]] = chunk["chunk_text"]
    document_id = None if doc["id"] == NO_DOCUMENT else doc["id"]
    fields: list[dict[str, Any]] = []
    for index, fact in enumerate(doc.get("facts") or []):
        at = f"{where} fact {index}"
        if not isinstance(fact, dict) or not isinstance(fact.get("text"), str):
            raise bad(f"{at}: a fact needs a string text")
        ours: dict[str, Any] = fact["hindsight_recall"] if isinstance(fact.get("hindsight_recall"), dict) else {}
        fact_type = fact.get("fact_type", "world")
        if fact_type not in FACT_TYPES:
            raise bad(f"{at}: fact_type {fact_type!r} is not one of {', '.join(FACT_TYPES)}")
        memory_id = ours.get("id") or fact.get("source_id") or f"{doc['id']}:{index}"
        metadata = fact.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise bad(f"{at}: metadata must be an object")
        start, end = _date(fact, "occurred_start", at), _date(fact, "occurred_end", at)
        fields.append(dict(
            id=str(memory_id), text=fact["text"], type=fact_type, occurred_start=start, occurred_end=end,
            mentioned_at=_date(fact, "mentioned_at", at) or (None if start or end else _date(fact, "event_date", at)),
            context=fact.get("context"), entities=_strs(fact.get("entities"), "entities", at),
            tags=_strs(fact.get("tags"), "tags", at),
            chunk=chunks.get(fact["chunk_index"]) if isinstance(fact.get("chunk_index"), int) else None,
            document_id=document_id, proof_count=ours.get("proof_count") or 1,
            metadata={str(k): str(v) for k, v in metadata.items()}, causes=[],
            source_ids=_strs(ours.get("sources"), "sources", at), position=ours.get("position"),
        ))
    if not own_links:
        for index, fact in enumerate(doc.get("facts") or []):
            for rel in fact.get("causal_relations") or []:
                target = rel.get("target_fact_index") if isinstance(rel, dict) else None
                if not isinstance(target, int) or not 0 <= target < len(fields) or target == index:
                    continue
                kind = rel.get("relation_type")
                if kind == "causes":
                    fields[index]["causes"].append(fields[target]["id"])
                elif kind == "caused_by":
                    fields[target]["causes"].append(fields[index]["id"])
    return [_memory(f, f"{where} fact {i}") for i, f in enumerate(fields)]


def observation_memory(obs: Any, index: int) -> Memory:
    at = f"observations.json item {index}"
    if not isinstance(obs, dict) or not isinstance(obs.get("text"), str):
        raise bad(f"{at}: an observation needs a string text")
    ours: dict[str, Any] = obs["hindsight_recall"] if isinstance(obs.get("hindsight_recall"), dict) else {}
    start, end = _date(obs, "occurred_start", at), _date(obs, "occurred_end", at)
    return _memory(dict(
        id=str(ours.get("id") or obs.get("source_id") or f"observation:{index}"), text=obs["text"],
        type="observation", occurred_start=start, occurred_end=end,
        mentioned_at=_date(obs, "mentioned_at", at) or (None if start or end else _date(obs, "event_date", at)),
        context=ours.get("context"), entities=_strs(ours.get("entities"), "entities", at),
        tags=_strs(obs.get("tags"), "tags", at), chunk=ours.get("chunk"),
        proof_count=obs.get("proof_count") or 1, metadata=ours.get("metadata") or {},
        source_ids=_strs(ours.get("sources"), "sources", at), position=ours.get("position"),
    ), at)


def _memory(fields: dict[str, Any], where: str) -> Memory:
    fields["causes"] = tuple(dict.fromkeys(fields.get("causes") or ()))
    try:
        return Memory(**fields)
    except RetainError as exc:
        raise bad(f"{where}: {exc.field}: {exc.why}") from None
    except (TypeError, ValueError) as exc:
        raise bad(f"{where}: {exc}") from None
