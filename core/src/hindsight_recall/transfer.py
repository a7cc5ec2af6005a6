"""Bank transfers in upstream Hindsight's archive format (:mod:`.archive`): export, restore, merge and clone.

Each write is one transaction: an archive is read and checked whole first (:mod:`.archive_reader`, in a
process of its own), then everything it holds is written, with the record of the transfer, in one
retain transaction (:meth:`~.retain.ingest.Ingestor.transaction`). A refused or failed import leaves
no trace, not even the bank it would have created. An export reads one moment of the bank (one
repeatable-read transaction) and keeps its archive, with its record, in another.
"""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .archive import NO_DOCUMENT, invalid, write_archive
from .archive_reader import Contents, Limits, read_archive
from .errors import BankNotFound, InvalidRequest
from .retain._transaction import Transaction
from .retain.ingest import Ingestor
from .scratch import work_folder
from .settings import BankSettings, Settings
from .store import banks, invalidated
from .store import transfer as store
from .types import Memory

#: where the API serves an export's archive: its ``download_url`` is this and its storage key
DOWNLOAD_PATH = "/v1/default/files/download/"
#: memories written per step of a restore (whole documents; one bigger document alone)
BATCH_MEMORIES = 2000
#: an archive up to this size stays in memory while it is written; larger ones spill to disk
SPOOL_BYTES = 16 << 20
#: the traits of a bank's disposition an archive may carry
TRAITS = tuple(banks.DEFAULT_DISPOSITION)


class BankExists(InvalidRequest):
    """A restore or clone names a target bank that already exists."""

    code = "bank_exists"

    def __init__(self, bank_id: str, what: str) -> None:
        super().__init__("target_bank_id", f"Target bank '{bank_id}' already exists; {what}", status=400)


def limits(settings: Settings) -> Limits:
    return Limits(settings.archive_max_bytes, settings.archive_max_entries, settings.archive_max_depth)


async def export(
    ingestor: Ingestor, bank_id: str, *, wanted: set[str] | None = None, bank_config: bool = True,
    data: bool = True, kind: str = "bank_export",
) -> tuple[uuid.UUID, dict[str, Any]]:
    """Write the bank (or the ``wanted`` documents) into an archive kept under a new transfer id;
    returns the id and the transfer's result (counts, ``download_url``, ``byte_size``)."""
    db = ingestor.db
    transfer_id = uuid.uuid4()
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as out:
        counts = await write_bank(ingestor, bank_id, out, wanted=wanted, bank_config=bank_config, data=data)
        out.seek(0)
        key = f"transfers/{bank_id}/{transfer_id}.zip"
        result: dict[str, Any] = {
            "download_url": DOWNLOAD_PATH + key, "storage_key": key, "filename": f"{bank_id}.zip",
            "document_count": counts.documents, "fact_count": counts.facts, "observation_count": counts.observations,
            "link_count": counts.links, "invalidated_memory_count": counts.invalidated}
        async with db.connect() as conn:
            await store.record(conn, bank_id, kind, "completed", result, transfer_id=transfer_id)
            result["byte_size"] = await store.store_archive(conn, bank_id, transfer_id, out)
            await store.record_result(conn, bank_id, transfer_id, result)
    return transfer_id, result


async def write_bank(ingestor: Ingestor, bank_id: str, out: IO[bytes], *, wanted: set[str] | None = None,
                     bank_config: bool = True, data: bool = True) -> Any:
    """The bank's archive into ``out``, read from one moment of the bank; :class:`BankNotFound` if absent."""
    async with ingestor.db.connect() as conn:
        await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        row = await store.bank_row(conn, bank_id)
        if row is None:
            raise BankNotFound(bank_id)
        whole = wanted is None
        return await write_archive(
            out, bank_id, store.memory_rows(conn, bank_id) if data else _nothing(),
            store.link_rows(conn, bank_id) if whole and data else None, row if bank_config else None,
            archive_type="bank" if whole else "documents", wanted=wanted,
            invalidated=store.invalidated_rows(conn, bank_id) if whole and data else None)


async def _nothing() -> AsyncIterator[Any]:
    return
    yield  # pragma: no cover - makes this an async generator


async def restore(
    ingestor: Ingestor, source: Path, *, record_on: str, target: str | None = None, data: bool = True,
    config: bool = True, kind: str = "bank_import",
) -> tuple[uuid.UUID, dict[str, Any]]:
    """Restore a whole-bank archive into the new bank ``target`` (default: the archive's source bank).

    :param record_on: a bank the transfer is recorded against besides the target (the bank the request
        named), when it exists: its operation reads the same under both.
    :param data: write the memories, links and invalidated memories; :param config: the profile and settings.
    :raises BankExists: the target exists (a restore writes a fresh bank; it is not a merge).
    """
    async with read_archive(source, limits(ingestor.settings), merge=False) as contents:
        if contents.archive_type != "bank":
            raise invalid(f"not a whole-bank archive (archive_type={contents.archive_type!r}); "
                          "use mode=merge or POST .../document-transfer instead")
        target = banks.validate_bank_id(target or contents.source_bank_id)
        size = contents.counts["facts"] + contents.counts["observations"] if data else 0
        async with ingestor.transaction({target: size}) as tx:
            if await banks.bank_config(tx.conn, target) is not None:
                raise BankExists(target, "a restore writes a fresh bank (it is not a merge). Delete it first or "
                                         "pass another target_bank_id.")
            await banks.ensure_bank(tx.conn, target)
            if config and contents.bank_row is not None:
                await restore_settings(tx.conn, contents.bank_row, contents.source_bank_id, target)
            counts = {"documents": 0, "facts": 0, "observations": 0, "links": 0, "invalidated": 0}
            if data:
                counts = await _write_contents(tx, contents, target)
            result = {"target_bank_id": target, **counts}
            operation = await store.record(tx.conn, target, kind, "completed", result)
            if record_on != target and await banks.bank_config(tx.conn, record_on) is not None:
                await store.record(tx.conn, record_on, kind, "completed", result, transfer_id=operation)
    return operation, result


async def _write_contents(tx: Transaction, contents: Contents, target: str) -> dict[str, int]:
    """Every memory, link and invalidated memory of the archive into ``target``, with the creation
    times and chunk indexes it carries."""
    writer = _Writer(tx, target)
    links_cleared = False
    counts = {"documents": 0, "facts": 0, "observations": 0, "links": 0, "invalidated": 0}
    async for record in contents.records():
        if record.kind in ("document", "observations"):
            writer.add(record.items)
            if record.kind == "document" and record.last:
                counts["documents"] += 1
                writer.document_done(record.document_id, record.extra)
            counts["facts" if record.kind == "document" else "observations"] += len(record.items)
            if record.last and len(writer.pending) >= BATCH_MEMORIES:
                await writer.flush()
            continue
        await writer.flush()
        if contents.own_links and not links_cleared:  # the archive's links, exactly: not the retain's
            await store.clear_links(tx.conn, target)
            links_cleared = True
        if record.kind == "links":
            counts["links"] += await store.replace_links(
                tx.conn, target, [link for link in record.items if link[2] != "temporal"])
        elif record.kind == "invalidated":
            for memory, reason, at in record.items:
                await invalidated.keep(tx.conn, target, memory, reason, at)
            counts["invalidated"] += len(record.items)
    await writer.flush()
    if contents.own_links and not links_cleared:
        await store.clear_links(tx.conn, target)
    await writer.finish()
    return counts


class _Writer:
    """Memories of an archive into one bank, whole documents per write, their times put back after."""

    def __init__(self, tx: Transaction, bank_id: str, replace: bool = False) -> None:
        self.tx, self.bank_id, self.replace = tx, bank_id, replace
        self.pending: list[Memory] = []
        self.documents: set[str] = set()
        self.created: list[tuple[str, Any]] = []
        self.dates: list[tuple[str, Any, Any]] = []
        self.indexes: dict[str, dict[str, int]] = {}
        #: document id -> memories written (a merge's count)
        self.written: dict[str, int] = {}

    def add(self, items: list[tuple[Memory, Any]]) -> None:
        for memory, created in items:
            self.pending.append(memory)
            if created is not None:
                self.created.append((memory.id, created))

    def document_done(self, document_id: str | None, extra: Any) -> None:
        if document_id is None or document_id == NO_DOCUMENT or extra is None:
            return
        (created, updated), indexes = extra
        self.documents.add(document_id)
        self.indexes[document_id] = indexes
        if created is not None or updated is not None:
            self.dates.append((document_id, created, updated))

    async def flush(self) -> None:
        if not self.pending:
            return
        replaced = sorted({m.document_id for m in self.pending if m.document_id} & self.documents) \
            if self.replace else []
        await self.tx.write(self.bank_id, self.pending, replace_documents=replaced, chunk_indexes=self.indexes)
        self.pending, self.indexes = [], {}

    async def finish(self) -> None:
        await store.set_created(self.tx.conn, self.bank_id, self.created)
        await store.set_document_dates(self.tx.conn, self.bank_id, self.dates)


async def merge(ingestor: Ingestor, source: Path, bank_id: str, on_conflict: str) -> tuple[uuid.UUID, dict[str, Any]]:
    """Fold an archive's documents into ``bank_id`` (created if missing): a document the bank already
    holds is skipped, replaced whole, or imported under a new id, as ``on_conflict`` says; links are
    computed as a retain's. All in one transaction."""
    if on_conflict not in ("skip", "replace", "new-id"):
        raise InvalidRequest("on_conflict", f"{on_conflict!r} is not one of skip, replace, new-id", status=400)
    async with read_archive(source, limits(ingestor.settings), merge=True) as contents, \
            ingestor.transaction({bank_id: contents.counts["facts"]}) as tx:
        await banks.ensure_bank(tx.conn, bank_id)
        present = await store.document_ids(tx.conn, bank_id, [d for d in contents.documents if d != NO_DOCUMENT])
        writer = _Writer(tx, bank_id, replace=True)
        imported: list[str] = []
        skipped: list[str] = []
        parts: list[Memory] = []
        async for record in contents.records():  # a document's parts together, then the document
            parts.extend(m for m, _ in record.items)
            if not record.last:
                continue
            document, memories, parts = record.document_id or NO_DOCUMENT, parts, []
            if document in present and on_conflict == "skip":
                skipped.append(document)
                continue
            if document in present and on_conflict == "new-id":
                document = f"{document}-{uuid.uuid4().hex[:12]}"
                memories = _renamed(memories, document)
            writer.add([(m, None) for m in memories])
            writer.written[document] = len(memories)
            # written whole, replacing any earlier version of it (dated now, its chunks in their order)
            writer.document_done(document, ((None, None), record.extra[1]))
            imported.append(document)
            if len(writer.pending) >= BATCH_MEMORIES:
                await writer.flush()
        await writer.flush()
        result = {"imported_documents": len(imported), "skipped_documents": len(skipped),
                  "facts": sum(writer.written.values()),
                  "imported_document_ids": imported[:1000], "skipped_document_ids": skipped[:1000]}
        operation = await store.record(tx.conn, bank_id, "document_import", "completed", result)
    return operation, result


def _renamed(memories: list[Memory], new: str) -> list[Memory]:
    """A document's memories under a new document id, their ids made new with it (``{new}:{ordinal}``)
    and causes among them following, so the original stays as it is."""
    ids = {m.id: f"{new}:{i}" for i, m in enumerate(memories)}
    return [dataclasses.replace(m, id=ids[m.id], document_id=new, causes=tuple(ids.get(c, c) for c in m.causes))
            for m in memories]


async def clone(ingestor: Ingestor, bank_id: str, target: str, *, data: bool = True,
                config: bool = True) -> tuple[uuid.UUID, dict[str, Any]]:
    """An export and a restore back to back, the archive never leaving the server."""
    target = banks.validate_bank_id(target)
    if target == bank_id:
        raise BankExists(target, "a clone creates a new bank")
    with work_folder("clone") as work:
        path = work / "clone.zip"
        with path.open("wb") as out:
            await write_bank(ingestor, bank_id, out, bank_config=True, data=data)
        try:
            return await restore(ingestor, path, record_on=bank_id, target=target, data=data, config=config,
                                 kind="bank_clone")
        except BankExists:
            raise BankExists(target, "a clone creates a new bank") from None


async def restore_settings(conn: AsyncConnection, row: dict[str, Any], source: str, target: str) -> None:
    """The bank's profile and the settings this server knows (others are upstream's LLM settings, which
    nothing here reads): exactly as stored when the archive is ours, else from upstream's fields."""
    ours = row.get("hindsight_recall")
    if isinstance(ours, dict):
        profile = {k: v for k, v in (ours.get("profile") or {}).items() if k in banks.PROFILE_FIELDS}
        config = ours.get("config") or {}
    else:
        disposition = row.get("disposition")
        name = row.get("name")
        profile = {"name": target if name in (None, source) else name,
                   "mission": row.get("mission") or row.get("background")}
        if isinstance(disposition, dict):
            profile["disposition"] = {t: disposition[t] for t in TRAITS if t in disposition}
        config = row.get("config") or {}
    await banks.set_bank_profile(conn, target, {k: v for k, v in profile.items() if v is not None})
    known = {k: v for k, v in config.items() if k in BankSettings.model_fields and v is not None}
    if known:
        await banks.set_bank_config(conn, target, known)
