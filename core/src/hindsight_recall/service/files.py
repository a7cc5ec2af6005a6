"""``POST /v1/default/banks/{bank_id}/files/retain``: uploaded files retained as documents, one queued retain each.

Upstream's multipart form: the ``files`` parts and a ``request`` part holding upstream's FileRetainRequest
as JSON (a ``files_metadata`` entry per file: document_id, context, metadata, tags, timestamp). Every file
is converted to text (:mod:`.file_text`) and every option checked before anything is queued, so a request
with one bad file queues nothing; then each file is queued, all in one transaction, as a retain operation
of its own (what an ``async: true`` retain queues), run by the queue worker: its facts extracted with a
retain model, its text stored verbatim without one. No model is needed to serve the route, as retain
needs none. A file's text is cut (as extraction cuts its chunks) into passages of at most RETAIN_CHUNK_SIZE
characters, each an item of the file's document, so that a long file stored verbatim is many memories a
recall can return one at a time, not one memory of the whole file.

Unlike upstream, the conversion happens before the answer, not in the operation: an unreadable file is
refused at once (400, or 415 for a kind this server does not convert) instead of failing later.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import RetainError
from ..retain.chunking import chunk_text
from . import async_retain
from .base import bank_of, endpoint, engine_of, wake_worker
from .errors import ServiceError, validation_message
from .file_text import Upload, to_text
from .retain_body import precheck
from .schemas import UNSUPPORTED, MemoryItem, RetainBody
from .wire import answer

#: the converters a request's ``parser`` may name (upstream's are markitdown, iris, llama_parse)
PARSERS = ("builtin",)
#: the form fields besides the files and the request
MAX_FIELDS = 10


class FileRetainMetadata(BaseModel):
    """Upstream's FileRetainMetadata: one file's options."""

    model_config = ConfigDict(extra="forbid")

    document_id: str | None = None
    context: str | None = None
    metadata: dict[str, str] | None = None
    tags: list[str] | None = None
    timestamp: str | None = None
    parser: str | list[str] | None = None
    strategy: str | None = None


#: per-file fields a request may not hold at its top level (upstream refuses them there too)
PER_FILE = ("document_id", "context", "metadata", "tags", "timestamp", "strategy")


class FileRetainRequest(BaseModel):
    """Upstream's FileRetainRequest, with ``async`` (always true here) and ``document_tags`` (every file's
    memories get them, as retain's) accepted too, since upstream's own examples send them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    parser: str | list[str] | None = None
    files_metadata: list[FileRetainMetadata] | None = None
    async_: bool | None = Field(default=None, alias="async")
    document_tags: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _per_file_fields_in_place(cls, data: Any) -> Any:
        if isinstance(data, dict):
            misplaced = sorted(name for name in PER_FILE if data.get(name) is not None)
            if misplaced:
                raise ValueError(f"Per-file fields ({', '.join(misplaced)}) must be placed in the corresponding "
                                 "'files_metadata' entry")
            if data.get("update_mode") is not None:
                raise ValueError("'update_mode' is not supported by /files/retain, which always processes "
                                 "asynchronously")
        return data


def _missing(field: str) -> ServiceError:
    return ServiceError(422, "invalid_request", f"{field}: Field required",
                        problems=[{"loc": ["body", field], "msg": "Field required", "type": "missing"}])


def _options(raw: str) -> FileRetainRequest:
    try:
        return FileRetainRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise ServiceError(400, "invalid_request", f"Invalid request JSON: {validation_message(exc)}") from None


def _check_parsers(value: str | list[str] | None, where: str) -> None:
    names = [] if value is None else [value] if isinstance(value, str) else value
    unknown = [name for name in names if name not in PARSERS]
    if unknown or (value is not None and not names):
        raise ServiceError(400, "unknown_parser", f"Parser(s) not available ({where}): {unknown}. Available: "
                                                  f"{list(PARSERS)}")


def passages(text: str, size: int) -> list[str]:
    """``text`` in passages of at most ``size`` characters, cut where retain's extraction cuts its chunks
    (between paragraphs first, then lines, sentences and words)."""
    return [chunk.strip() for chunk in chunk_text(text, size)]


async def _uploads(request: Request, limit: int) -> tuple[list[Upload], str]:
    """The form's files (their bytes read) and its ``request`` field; the form is closed before returning."""
    try:
        form = await request.form(max_files=limit, max_fields=MAX_FIELDS)
    except ServiceError:
        raise
    except Exception as exc:
        if "too many files" in str(exc).lower():
            raise ServiceError(400, "too_many_files", f"Too many files. Maximum {limit} files per request "
                                                      "(HINDSIGHT_API_FILE_CONVERSION_MAX_BATCH_SIZE).") from None
        raise ServiceError(400, "invalid_request", f"the body is not a multipart upload ({exc})") from None
    try:
        parts = form.getlist("files")
        files = [part for part in parts if isinstance(part, UploadFile)]
        if not files or len(files) != len(parts):  # a ``files`` field that is not a file is not one
            raise _missing("files")
        options = form.get("request")
        if not isinstance(options, str):
            raise _missing("request")
        return [Upload(f.filename or "", f.content_type or "", await f.read()) for f in files], options
    finally:
        await form.close()


def _items(text: str, meta: FileRetainMetadata, size: int) -> list[MemoryItem]:
    document_id = meta.document_id or f"file_{uuid.uuid4()}"
    return [MemoryItem(content=passage, document_id=document_id, context=meta.context, metadata=meta.metadata,
                       tags=meta.tags, timestamp=meta.timestamp) for passage in passages(text, size)]


@endpoint
async def file_retain(request: Request) -> Response:
    """Convert the uploaded files to text and queue one retain per file; answer their operation ids."""
    bank_id = bank_of(request)
    engine = engine_of(request)
    settings = engine.settings
    if not settings.enable_file_upload_api:
        raise ServiceError(404, "not_found", "File upload API is disabled. Set "
                                             "HINDSIGHT_API_ENABLE_FILE_UPLOAD_API=true to enable.")
    uploads, raw = await _uploads(request, settings.file_conversion_max_batch_size)
    options = _options(raw)
    metas = options.files_metadata or [FileRetainMetadata() for _ in uploads]
    if len(metas) != len(uploads):
        raise ServiceError(400, "invalid_request", f"files_metadata count ({len(metas)}) must match files count "
                                                   f"({len(uploads)})")
    _check_parsers(options.parser, "request-level parser")
    for index, (upload, meta) in enumerate(zip(uploads, metas, strict=True)):
        _check_parsers(meta.parser, f"file '{upload.filename}'")
        if meta.strategy is not None:
            raise ServiceError(400, "unsupported_field", f"files_metadata.{index}.strategy: {UNSUPPORTED['strategy']}")
    total, allowed = sum(len(u.data) for u in uploads), settings.file_conversion_max_batch_size_mb
    if total > allowed * 1024 * 1024:
        raise ServiceError(413, "files_too_large", f"Total batch size ({total / 1024 / 1024:.1f}MB) exceeds maximum "
                                                   f"of {allowed}MB (HINDSIGHT_API_FILE_CONVERSION_MAX_BATCH_SIZE_MB)")
    texts = await asyncio.to_thread(lambda: [to_text(upload) for upload in uploads])
    queued = []
    for index, (text, meta) in enumerate(zip(texts, metas, strict=True)):
        items = _items(text, meta, settings.retain_chunk_size)
        try:
            precheck(items)
        except RetainError as exc:
            raise ServiceError(400, "invalid_request", f"files_metadata.{index}.{exc.field.rsplit('.', 1)[-1]}: "
                                                       f"{exc.why}") from None
        body = RetainBody(items=items, async_=True, document_tags=options.document_tags)
        queued.append((uuid.uuid4(), body.model_dump_json(by_alias=True, exclude_none=True), len(items),
                       items[0].document_id))
    await engine.operations.submit_all(bank_id, async_retain.RETAIN, queued)
    wake_worker(request)
    return answer(request, "FileRetainResponse", {"operation_ids": [str(op) for op, *_ in queued]})


def routes(banks_path: str) -> list[Route]:
    return [Route(f"{banks_path}/files/retain", file_retain, methods=["POST"])]
