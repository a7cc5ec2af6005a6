"""Export, import, transfer and clone of a bank in upstream Hindsight's formats: the routes over the
engine's transfers (:mod:`..transfer`).

Upstream runs a transfer as a background operation and answers 202 with its id; here the work is
done before the answer, so the 202 carries an operation that is already ``completed``. An export's
archive is kept in the database and served by ``GET /v1/default/files/download/{key}``, the
``download_url`` of the operation's ``result_metadata``. A request's body is bounded by
SERVICE_MAX_BODY_BYTES; an upload is saved to a file and checked whole, off the event loop, before
anything is written (ARCHIVE_MAX_BYTES, ARCHIVE_MAX_ENTRIES, ARCHIVE_MAX_DEPTH).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..engine.banks import validate_bank_id
from ..errors import InvalidRequest
from ..scratch import work_folder
from ..settings import BankSettings
from ..transfer import DOWNLOAD_PATH
from .banks import TRAITS
from .base import bank_of, endpoint, engine_of
from .directives import CreateDirectiveBody
from .errors import ServiceError, validation_message
from .wire import answer

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


@contextlib.asynccontextmanager
async def _upload(request: Request) -> AsyncIterator[Path]:
    """The multipart ``file`` field saved to a file of its own (the archive reader reads it from there)."""
    try:
        form = await request.form(max_files=1, max_fields=20)
    except ServiceError:
        raise
    except Exception as exc:
        raise ServiceError(400, "invalid_request", f"file: the body is not a multipart upload ({exc})") from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ServiceError(422, "invalid_request", "file: a transfer ZIP archive is required (multipart field "
                                                       "'file')")
        with work_folder("upload") as work:
            path = work / "archive.zip"
            await asyncio.to_thread(_save, upload.file, path)
            await form.close()
            yield path
    finally:
        await form.close()


def _save(source: IO[bytes], path: Path) -> None:
    source.seek(0)
    with path.open("wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)


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
    transfer_id, _ = await engine_of(request).transfers.export(bank_id, documents=documents or None,
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
    transfer_id, _ = await engine_of(request).transfers.export(bank_id, documents=documents or None, bank_config=False,
                                                          kind="document_export")
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
    """A restore (a new bank, from a whole-bank archive) or a merge (documents into ``{bank_id}``): the
    archive is checked whole first and written in one transaction, so a refused import changes nothing."""
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
    if target is not None:
        validate_bank_id(target)
    async with _upload(request) as path:
        operation, _ = await engine_of(request).transfers.restore(
            path, record_on=bank_id, target=target, data=flags["include_data"] is not False,
            config=flags["include_bank_config"] is not False)
    return _submitted(operation)


async def _merge_request(request: Request, bank_id: str, conflict: str) -> Response:
    async with _upload(request) as path:
        operation, _ = await engine_of(request).transfers.merge(bank_id, path, conflict)
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
    target = validate_bank_id(target)
    data = _flag(request, "include_data", True)
    config = _flag(request, "include_bank_config", True)
    history = _flag(request, "include_history", False)
    if not (data or config or history):
        raise ServiceError(400, "invalid_request",
                           "Nothing to clone: set at least one of include_data, include_bank_config, include_history")
    if history:
        raise ServiceError(400, "unsupported_field", "include_history: this server keeps no audit log or LLM "
                                                     "requests to copy")
    operation, _ = await engine_of(request).transfers.clone(bank_id, target, data=bool(data), config=bool(config))
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
    found = await engine_of(request).transfers.archive(bank_id, transfer_id)
    if found is None:
        raise ServiceError(404, "file_not_found", f"no file {key!r}")
    metadata, parts = found
    return StreamingResponse(parts, media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{metadata["filename"]}"',
        "Content-Length": str(metadata["byte_size"])})


# --- bank templates ------------------------------------------------------------------------------


@endpoint
async def template_export(request: Request) -> Response:
    """The bank's settings as upstream's template manifest: its mission, disposition and overrides."""
    bank_id = bank_of(request)
    row, rules = await engine_of(request).templates.read(bank_id)
    bank: dict[str, Any] = dict(row["config"])
    if row["mission"]:
        bank["reflect_mission"] = row["mission"]
    bank.update({f"disposition_{t}": v for t, v in (row["disposition"] or {}).items()})
    kept = [{k: rule[k] for k in ("name", "content", "priority", "is_active", "tags")} for rule in rules]
    return answer(request, "BankTemplateManifest", {"version": TEMPLATE_VERSION, "bank": bank or None,
                                                    "mental_models": None, "directives": kept or None})


@endpoint
async def template_import(request: Request) -> Response:
    """Apply a template's bank settings and directives (one with a directive's name replaces it); mental
    models are written by a model and are refused (501)."""
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
    if manifest.get("mental_models"):
        raise ServiceError(501, "not_implemented", "POST /v1/default/banks/{bank_id}/import: mental_models are "
                           "written by a model, which this server does not do, and it keeps none")
    rules = manifest.get("directives") or []
    if not isinstance(rules, list):
        raise ServiceError(400, "invalid_template", "Template schema validation failed: directives: must be a list")
    try:
        wanted = [CreateDirectiveBody.model_validate(rule) for rule in rules]
    except ValidationError as exc:
        raise ServiceError(400, "invalid_template", f"Template schema validation failed: directives: "
                                                    f"{validation_message(exc)}") from None
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
    try:
        await engine_of(request).facts.options(bank_id, config)  # custom mode needs instructions from some layer
        changed = await engine_of(request).templates.apply(bank_id, profile=profile, config=config,
                                                           rules=[rule.model_dump() for rule in wanted],
                                                           dry_run=dry_run)
    except InvalidRequest as exc:
        raise ServiceError(400, "invalid_template", f"Template validation failed: {exc}") from None
    headers = {"X-Hindsight-Ignored-Fields": ",".join(ignored)} if ignored else None
    return answer(request, "BankTemplateImportResponse", {
        "bank_id": bank_id, "config_applied": bool(bank), "mental_models_created": [], "mental_models_updated": [],
        "directives_created": changed["created"], "directives_updated": changed["updated"], "operation_ids": [],
        "dry_run": dry_run}, headers=headers)


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
        Route(DOWNLOAD_PATH + "{key:path}", download, methods=["GET"]),
    ]
