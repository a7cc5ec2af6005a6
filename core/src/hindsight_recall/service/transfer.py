"""Export, import, transfer and clone of a bank in upstream Hindsight's formats (see :mod:`..archive`).

Upstream runs a transfer as a background operation and answers 202 with its id; here the work is
done before the answer, so the 202 carries an operation that is already ``completed``, recorded in
``bank_transfers``. An export's archive is kept in the database and served by ``GET
/v1/default/files/download/{key}``, the ``download_url`` of the operation's ``result_metadata``.
A request's body is bounded by SERVICE_MAX_BODY_BYTES; an archive is read entry by entry and
written to a spooled temporary file, never held whole.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from typing import IO, Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import archive as fmt
from ..engine import Engine
from ..errors import BankNotFound, InvalidRequest
from ..settings import BankSettings
from ..store import banks, listing
from ..store import transfer as store
from ..types import Memory
from .banks import TRAITS
from .base import bank_of, endpoint, engine_of
from .errors import ServiceError

#: an archive up to this size stays in memory while it is written; larger ones spill to disk
SPOOL_BYTES = 16 << 20
DOWNLOAD_PREFIX = "/v1/default/files/download/"
#: links restored per statement
LINK_BATCH = 10_000
TEMPLATE_VERSION = "1"


def _flag(request: Request, name: str, default: bool | None) -> bool | None:
    value = request.query_params.get(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ServiceError(422, "invalid_request", f"{name}: must be true or false, got {value!r}")


def _choice(request: Request, name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = request.query_params.get(name, default)
    if value not in allowed:
        raise ServiceError(400, "invalid_request", f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _submitted(operation_id: uuid.UUID) -> JSONResponse:
    return JSONResponse({"operation_id": str(operation_id), "status": "completed"}, status_code=202)


async def _bank_row(engine: Engine, bank_id: str) -> dict[str, Any]:
    async with engine.db.connect() as conn:
        profile = await banks.bank_profile(conn, bank_id)
        config = await banks.bank_config(conn, bank_id)
    if profile is None:
        raise BankNotFound(bank_id)
    return {"bank_id": bank_id, "name": profile["name"], "mission": profile["mission"],
            "disposition": profile["disposition"], "config": config or {}}


async def export_bank(engine: Engine, bank_id: str, *, wanted: set[str] | None = None,
                      bank_config: bool = True, kind: str = "bank_export") -> tuple[uuid.UUID, dict[str, Any]]:
    """Write the bank (or the ``wanted`` documents) into an archive kept under a new transfer id."""
    row = await _bank_row(engine, bank_id)
    transfer_id = uuid.uuid4()
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as out:
        async with engine.db.connect() as conn:
            counts = await fmt.write_archive(
                out, bank_id, store.memory_rows(conn, bank_id),
                store.link_rows(conn, bank_id) if wanted is None else None, row if bank_config else None,
                archive_type="bank" if wanted is None else "documents", wanted=wanted)
        out.seek(0)
        key = f"transfers/{bank_id}/{transfer_id}.zip"
        result = {"download_url": DOWNLOAD_PREFIX + key, "storage_key": key, "filename": f"{bank_id}.zip",
                  "document_count": counts.documents, "fact_count": counts.facts,
                  "observation_count": counts.observations, "link_count": counts.links}
        async with engine.db.connect() as conn:
            await store.record(conn, bank_id, kind, "completed", result, transfer_id=transfer_id)
            result["byte_size"] = await store.store_archive(conn, bank_id, transfer_id, out)
            await store.record_result(conn, bank_id, transfer_id, result)
    return transfer_id, result


def _retain_batches(items: list[Memory], size: int) -> list[list[Memory]]:
    return [items[i:i + size] for i in range(0, len(items), size)] if items else []


async def _restore_into(engine: Engine, archive: fmt.Archive, target: str, *, bank_config: bool) -> dict[str, Any]:
    """Write a whole archive into the new bank ``target``; on any failure the bank is removed again."""
    own_links = archive.has_links()
    counts = {"documents": 0, "facts": 0, "observations": 0, "links": 0}
    async with engine.db.connect() as conn:
        await banks.ensure_bank(conn, target)
        row = archive.bank_row() if bank_config else None
        if row is not None:
            await _restore_settings(conn, row, archive.source_bank_id, target)
    try:
        ids_by_doc: dict[str, list[str]] = {}
        pending: list[Memory] = []
        for number, doc in enumerate(archive.documents()):
            memories = fmt.document_memories(doc, f"document {doc['id']!r}", own_links=own_links)
            ids_by_doc[doc["id"]] = [m.id for m in memories]
            pending.extend(memories)
            counts["documents"] = number + 1
            counts["facts"] += len(memories)
            if len(pending) >= fmt.BATCH_MEMORIES:
                await engine.retain(target, pending, progress=False)
                pending = []
        if pending:
            await engine.retain(target, pending, progress=False)
        observations = [_with_sources(fmt.observation_memory(o, i), o, ids_by_doc)
                        for i, o in enumerate(archive.observations())]
        for batch in _retain_batches(observations, fmt.BATCH_MEMORIES):
            await engine.retain(target, batch, progress=False)
        counts["observations"] = len(observations)
        if own_links:
            async with engine.db.connect() as conn:
                await store.clear_links(conn, target)
                batch_links: list[tuple[str, str, str, float]] = []
                for link in archive.links():
                    if link[2] == "temporal":  # read from the dates at recall; never stored
                        continue
                    batch_links.append(link)
                    if len(batch_links) >= LINK_BATCH:
                        counts["links"] += await store.replace_links(conn, target, batch_links)
                        batch_links = []
                counts["links"] += await store.replace_links(conn, target, batch_links)
    except BaseException:
        await engine.delete_bank(target)
        raise
    return counts


def _with_sources(memory: Memory, obs: dict[str, Any], ids_by_doc: dict[str, list[str]]) -> Memory:
    """An upstream observation names its sources by document and ordinal: those become ids."""
    if memory.source_ids:
        return memory
    found: list[str] = []
    for source in obs.get("sources") or []:
        if isinstance(source, dict):
            ids = ids_by_doc.get(str(source.get("document_id")), [])
            index = source.get("fact_index")
            if isinstance(index, int) and 0 <= index < len(ids):
                found.append(ids[index])
    if not found:
        return memory
    fields = {k: getattr(memory, k) for k in Memory.__dataclass_fields__}
    return Memory(**{**fields, "source_ids": tuple(dict.fromkeys(found))})


async def _restore_settings(conn: Any, row: dict[str, Any], source: str, target: str) -> None:
    """The bank's name, mission, disposition and the overrides this server knows (others are upstream's
    LLM settings, which nothing here reads)."""
    disposition = row.get("disposition")
    if isinstance(disposition, str):
        try:
            disposition = json.loads(disposition)
        except ValueError:
            disposition = None
    name = row.get("name")
    changes: dict[str, Any] = {
        "name": target if name in (None, source) else name,
        "mission": row.get("mission") or row.get("background"),
    }
    if isinstance(disposition, dict):
        changes["disposition"] = {t: disposition[t] for t in TRAITS if t in disposition}
    await banks.set_bank_profile(conn, target, {k: v for k, v in changes.items() if v is not None})
    config = row.get("config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    if isinstance(config, dict):
        known = {k: v for k, v in config.items() if k in BankSettings.model_fields and v is not None}
        if known:
            await banks.set_bank_config(conn, target, known)


async def _merge_into(engine: Engine, archive: fmt.Archive, bank_id: str, on_conflict: str) -> dict[str, Any]:
    """Fold the archive's documents into ``bank_id``: a document id the bank already holds is skipped,
    replaced, or imported under a new id, as ``on_conflict`` says. Links are computed as a retain's."""
    imported, skipped, facts = [], [], 0
    for doc in archive.documents():
        doc_id = doc["id"]
        if doc_id != fmt.NO_DOCUMENT:
            async with engine.db.connect() as conn:
                exists = bool(await store.document_ids(conn, bank_id, [doc_id]))
            if exists and on_conflict == "skip":
                skipped.append(doc_id)
                continue
            if exists and on_conflict == "replace":
                async with engine.db.connect() as conn:
                    old = await listing.document_memory_ids(conn, bank_id, doc_id)
                await engine.forget(bank_id, old)
            if exists and on_conflict == "new-id":
                doc = _renamed(doc, f"{doc_id}-{uuid.uuid4().hex[:12]}")
        memories = fmt.document_memories(doc, f"document {doc_id!r}", own_links=False)
        memories = [m if not m.source_ids else _without_sources(m) for m in memories]
        for batch in _retain_batches(memories, fmt.BATCH_MEMORIES):
            await engine.retain(bank_id, batch, progress=False)
        imported.append(doc["id"])
        facts += len(memories)
    return {"imported_documents": len(imported), "skipped_documents": len(skipped), "facts": facts,
            "imported_document_ids": imported[:1000], "skipped_document_ids": skipped[:1000]}


def _without_sources(memory: Memory) -> Memory:
    """A merged document's memory cites no memories outside the archive's document."""
    fields = {k: getattr(memory, k) for k in Memory.__dataclass_fields__}
    return Memory(**{**fields, "source_ids": ()})


def _renamed(doc: dict[str, Any], new_id: str) -> dict[str, Any]:
    """The document under a new id, its facts' ids made new with it (so the original stays as it is)."""
    facts = []
    for index, fact in enumerate(doc.get("facts") or []):
        if isinstance(fact, dict):
            fact = {**fact, "source_id": None, "hindsight_recall": {**(fact.get("hindsight_recall") or {}),
                                                                    "id": f"{new_id}:{index}"}}
        facts.append(fact)
    return {**doc, "id": new_id, "facts": facts}


async def _upload(request: Request) -> tuple[Any, IO[bytes]]:
    """The multipart ``file`` field (the form, to close, and its spooled file)."""
    try:
        form = await request.form(max_files=1, max_fields=20)
    except ServiceError:
        raise
    except Exception as exc:
        raise ServiceError(400, "invalid_request", f"file: the body is not a multipart upload ({exc})") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        await form.close()
        raise ServiceError(422, "invalid_request", "file: a transfer ZIP archive is required (multipart field 'file')")
    return form, upload.file


async def _record(engine: Engine, bank_id: str, kind: str, result: dict[str, Any]) -> uuid.UUID:
    async with engine.db.connect() as conn:
        return await store.record(conn, bank_id, kind, "completed", result)


async def _exists(engine: Engine, bank_id: str) -> bool:
    return await engine.bank_stats(bank_id) is not None


# --- routes --------------------------------------------------------------------------------------


@endpoint
async def transfer_export(request: Request) -> Response:
    bank_id = bank_of(request)
    data = _flag(request, "include_data", True)
    config = _flag(request, "include_bank_config", True)
    history = _flag(request, "include_history", False)
    if not (data or config or history):
        raise ServiceError(400, "invalid_request",
                           "Nothing to export: set at least one of include_data, include_bank_config, include_history")
    if history:
        raise ServiceError(400, "unsupported_field", "include_history: this server keeps no audit log or LLM "
                                                     "requests to carry")
    documents = request.query_params.getlist("document_id")
    if documents and config:
        raise ServiceError(400, "invalid_request", "include_bank_config and include_history are only supported for a "
                                                   "whole-bank export (omit document_id)")
    transfer_id, _ = await export_bank(engine_of(request), bank_id, wanted=set(documents) or None,
                                       bank_config=bool(config))
    return _submitted(transfer_id)


@endpoint
async def documents_export(request: Request) -> Response:
    bank_id = bank_of(request)
    documents = request.query_params.getlist("document_id")
    if documents and (_flag(request, "include_observations", False) or _flag(request, "include_knowledge_base", False)):
        raise ServiceError(400, "invalid_request", "include_observations and include_knowledge_base are only "
                                                   "supported when exporting the whole bank (omit document_id)")
    if _flag(request, "include_knowledge_base", False):
        raise ServiceError(400, "unsupported_field", "include_knowledge_base: this server keeps no mental models "
                                                     "or knowledge pages (they need an LLM)")
    transfer_id, _ = await export_bank(engine_of(request), bank_id, wanted=set(documents) or None,
                                       bank_config=False, kind="document_export")
    return _submitted(transfer_id)


@endpoint
async def documents_export_removed(request: Request) -> Response:
    bank_id = bank_of(request)
    raise ServiceError(410, "gone", "Synchronous document export has been removed because it could take down the "
                       f"shared API on large banks. Submit an export via POST /v1/default/banks/{bank_id}/"
                       "document-transfer/export and download the archive from the download_url in the "
                       "operation's result_metadata.")


@endpoint
async def transfer_import(request: Request) -> Response:
    bank_id = bank_of(request)
    mode = _choice(request, "mode", "restore", ("restore", "merge"))
    conflict = _choice(request, "document_conflict", "skip", ("skip", "replace", "new-id"))
    target = request.query_params.get("target_bank_id") or None
    flags = {n: _flag(request, n, None) for n in ("include_data", "include_bank_config", "include_history")}
    if mode == "merge":
        if target:
            raise ServiceError(400, "invalid_request",
                               "target_bank_id is only valid in restore mode; merge imports into {bank_id}")
        if any(v is not None for v in flags.values()):
            raise ServiceError(400, "invalid_request", "include_data / include_bank_config / include_history apply "
                                                       "to mode=restore; a merge imports the archive's documents only")
        return await _merge_request(request, bank_id, conflict)
    if flags["include_history"]:
        raise ServiceError(400, "unsupported_field", "include_history: this server keeps no audit log or LLM "
                                                     "requests to restore")
    engine = engine_of(request)
    form, upload = await _upload(request)
    try:
        archive = fmt.Archive(upload)
        if archive.archive_type != "bank":
            raise fmt.bad(f"not a whole-bank archive (archive_type={archive.archive_type!r}); "
                          "use mode=merge or POST .../document-transfer instead")
        target = banks.validate_bank_id(target or archive.source_bank_id)
        if await _exists(engine, target):
            raise ServiceError(400, "bank_exists", f"Target bank '{target}' already exists; a restore writes a "
                               "fresh bank (it is not a merge). Delete it first or pass another target_bank_id.")
        counts = {"documents": 0, "facts": 0, "observations": 0, "links": 0}
        if flags["include_data"] is not False:
            counts = await _restore_into(engine, archive, target,
                                         bank_config=flags["include_bank_config"] is not False)
        else:
            async with engine.db.connect() as conn:
                await banks.ensure_bank(conn, target)
                row = archive.bank_row() if flags["include_bank_config"] is not False else None
                if row is not None:
                    await _restore_settings(conn, row, archive.source_bank_id, target)
    finally:
        await form.close()
    on = bank_id if await _exists(engine, bank_id) else target
    operation = await _record(engine, on, "bank_import", {"target_bank_id": target, **counts})
    return _submitted(operation)


async def _merge_request(request: Request, bank_id: str, conflict: str) -> Response:
    engine = engine_of(request)
    form, upload = await _upload(request)
    try:
        result = await _merge_into(engine, fmt.Archive(upload), bank_id, conflict)
    finally:
        await form.close()
    operation = await _record(engine, bank_id, "document_import", result)
    return _submitted(operation)


@endpoint
async def documents_import(request: Request) -> Response:
    bank_id = bank_of(request)
    conflict = _choice(request, "on_conflict", "skip", ("skip", "replace", "new-id"))
    return await _merge_request(request, bank_id, conflict)


@endpoint
async def clone(request: Request) -> Response:
    """An export and a restore back to back, the archive never leaving the server."""
    bank_id = bank_of(request)
    target = request.query_params.get("target_bank_id")
    if not target:
        raise ServiceError(422, "invalid_request", "target_bank_id: Field required")
    target = banks.validate_bank_id(target)
    data = _flag(request, "include_data", True)
    config = _flag(request, "include_bank_config", True)
    history = _flag(request, "include_history", False)
    if not (data or config or history):
        raise ServiceError(400, "invalid_request",
                           "Nothing to clone: set at least one of include_data, include_bank_config, include_history")
    if history:
        raise ServiceError(400, "unsupported_field", "include_history: this server keeps no audit log or LLM "
                                                     "requests to copy")
    engine = engine_of(request)
    if not await _exists(engine, bank_id):
        raise BankNotFound(bank_id)
    if target == bank_id or await _exists(engine, target):
        raise ServiceError(400, "bank_exists", f"Target bank '{target}' already exists; a clone creates a new bank")
    row = await _bank_row(engine, bank_id)
    counts = {"documents": 0, "facts": 0, "observations": 0, "links": 0}
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as out:
        if data:
            async with engine.db.connect() as conn:
                await fmt.write_archive(out, bank_id, store.memory_rows(conn, bank_id), store.link_rows(conn, bank_id),
                                        row if config else None)
            out.seek(0)
            counts = await _restore_into(engine, fmt.Archive(out), target, bank_config=bool(config))
        else:
            async with engine.db.connect() as conn:
                await banks.ensure_bank(conn, target)
                await _restore_settings(conn, row, bank_id, target)
    operation = await _record(engine, bank_id, "bank_clone", {"target_bank_id": target, **counts})
    return _submitted(operation)


@endpoint
async def download(request: Request) -> Response:
    """An export's archive, streamed from the database a part at a time."""
    key = request.path_params["key"]
    bank_id, _, name = key.removeprefix("transfers/").rpartition("/")
    try:
        transfer_id = uuid.UUID(name.removesuffix(".zip"))
    except ValueError:
        transfer_id = None
    if not key.startswith("transfers/") or not bank_id or transfer_id is None:
        raise ServiceError(404, "file_not_found", f"no file {key!r}")
    engine = engine_of(request)
    async with engine.db.connect() as conn:
        found = await store.transfer(conn, bank_id, transfer_id)
    if found is None or "storage_key" not in found["result_metadata"]:
        raise ServiceError(404, "file_not_found", f"no file {key!r}")

    async def parts() -> Any:
        async with engine.db.connect() as conn:
            async for part in store.archive_parts(conn, bank_id, transfer_id):
                yield part

    return StreamingResponse(parts(), media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{found["result_metadata"]["filename"]}"',
        "Content-Length": str(found["result_metadata"]["byte_size"])})


# --- bank templates ------------------------------------------------------------------------------


@endpoint
async def template_export(request: Request) -> Response:
    """The bank's settings as upstream's template manifest: its mission, disposition and overrides."""
    row = await _bank_row(engine_of(request), bank_of(request))
    bank: dict[str, Any] = dict(row["config"])
    if row["mission"]:
        bank["reflect_mission"] = row["mission"]
    bank.update({f"disposition_{t}": v for t, v in (row["disposition"] or {}).items()})
    return JSONResponse({"version": TEMPLATE_VERSION, "bank": bank or None, "mental_models": None,
                         "directives": None})


@endpoint
async def template_import(request: Request) -> Response:
    """Apply a template's bank settings; mental models and directives need an LLM and are refused (501)."""
    bank_id = bank_of(request)
    dry_run = bool(_flag(request, "dry_run", False))
    try:
        manifest = json.loads(await request.body() or b"null")
    except ValueError:
        raise ServiceError(400, "malformed_json", "the request body is not valid JSON") from None
    if not isinstance(manifest, dict):
        raise ServiceError(400, "invalid_template", "Template schema validation failed: the manifest must be an object")
    version = manifest.get("version")
    if not isinstance(version, str) or not version.isdigit() or not 1 <= int(version) <= int(TEMPLATE_VERSION):
        raise ServiceError(400, "invalid_template", f"Template schema validation failed: version: {version!r} is not "
                           f"supported by this server (max supported: {TEMPLATE_VERSION})")
    unknown = sorted(set(manifest) - {"version", "bank", "mental_models", "directives"})
    if unknown:
        raise ServiceError(400, "invalid_template", f"Template schema validation failed: {unknown[0]}: "
                                                    "Extra inputs are not permitted")
    if manifest.get("mental_models") or manifest.get("directives"):
        what = "mental_models" if manifest.get("mental_models") else "directives"
        raise ServiceError(501, "not_implemented", f"POST /v1/default/banks/{{bank_id}}/import: {what} shape what "
                           "an LLM writes (reflect, mental models); this server runs no LLM and keeps none")
    bank = manifest.get("bank") or {}
    if not isinstance(bank, dict):
        raise ServiceError(400, "invalid_template", "Template schema validation failed: bank: must be an object")
    profile: dict[str, Any] = {}
    if bank.get("reflect_mission") is not None:
        profile["mission"] = bank["reflect_mission"]
    traits = {t: bank[f"disposition_{t}"] for t in TRAITS if bank.get(f"disposition_{t}") is not None}
    if traits:
        profile["disposition"] = traits
    config = {k: v for k, v in bank.items() if k in BankSettings.model_fields and v is not None}
    used = {*config, *(f"disposition_{t}" for t in traits), *(("reflect_mission",) if "mission" in profile else ())}
    ignored = sorted(k for k, v in bank.items() if v is not None and k not in used)
    if not dry_run:
        try:
            async with engine_of(request).db.connect() as conn:
                await banks.set_bank_profile(conn, bank_id, profile)
                if config:
                    await banks.set_bank_config(conn, bank_id, config)
        except InvalidRequest as exc:
            raise ServiceError(400, "invalid_template", f"Template validation failed: {exc}") from None
    headers = {"X-Hindsight-Ignored-Fields": ",".join(ignored)} if ignored else None
    return JSONResponse({"bank_id": bank_id, "config_applied": bool(bank), "mental_models_created": [],
                         "mental_models_updated": [], "directives_created": [], "directives_updated": [],
                         "operation_ids": [], "dry_run": dry_run}, headers=headers)


def routes(banks_path: str) -> list[Route]:
    return [
        Route(f"{banks_path}/export", template_export, methods=["GET"]),
        Route(f"{banks_path}/import", template_import, methods=["POST"]),
        Route(f"{banks_path}/transfer/export", transfer_export, methods=["POST"]),
        Route(f"{banks_path}/transfer/import", transfer_import, methods=["POST"]),
        Route(f"{banks_path}/document-transfer/export", documents_export, methods=["POST"]),
        Route(f"{banks_path}/document-transfer", documents_import, methods=["POST"]),
        Route(f"{banks_path}/document-transfer", documents_export_removed, methods=["GET"]),
        Route(f"{banks_path}/clone", clone, methods=["POST"]),
        Route(DOWNLOAD_PREFIX + "{key:path}", download, methods=["GET"]),
    ]
