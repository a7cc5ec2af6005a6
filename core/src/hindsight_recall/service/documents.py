"""Document and chunk routes: list, get, retag, reprocess and delete a bank's documents; read their chunks."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine.documents import TIME_FIELDS
from . import history, reprocess
from ._params import bounded_int, checked_text, date_query, path_text, tags_match_query, tags_query
from .base import bank_of, body_of, choice_query, endpoint, engine_of, text_query
from .errors import ServiceError
from .schemas import UNSUPPORTED, _Body
from .wire import answer

#: the most documents or chunks one page holds
MAX_PAGE = 10_000


class UpdateDocumentBody(_Body):
    """Upstream's ``UpdateDocumentRequest``: the document's complete new tag set."""

    tags: list[str] | None = None
    observation_scopes: Any = None


def _not_found(document_id: str) -> ServiceError:
    return ServiceError(404, "document_not_found", f"Document {document_id!r} not found")


@endpoint
async def list_documents(request: Request) -> Response:
    bank_id = bank_of(request)
    options: dict[str, Any] = dict(
        search=text_query(request, "q"), tags=tags_query(request),
        tags_match=tags_match_query(request, "any_strict"),
        time_field=choice_query(request, "time_field", TIME_FIELDS, None),
        start=date_query(request, "start_date"), end=date_query(request, "end_date"),
        limit=bounded_int(request, "limit", 100, maximum=MAX_PAGE), offset=bounded_int(request, "offset", 0),
    )
    if options["start"] and options["end"] and options["end"] <= options["start"]:
        raise ServiceError(400, "invalid_request", "end_date: must be after start_date")
    page = await engine_of(request).documents.page(bank_id, **options)
    return answer(request, "ListDocumentsResponse", page)


@endpoint
async def get_document(request: Request) -> Response:
    bank_id, document_id = bank_of(request), path_text(request, "document_id")
    found = await engine_of(request).documents.get(bank_id, document_id)
    if found is None:
        raise _not_found(document_id)
    return answer(request, "DocumentResponse", found)


@endpoint
async def update_document(request: Request) -> Response:
    """Replace the tags of the document's memories (upstream propagates a document's tags to them)."""
    bank_id, document_id = bank_of(request), path_text(request, "document_id")
    body: UpdateDocumentBody = await body_of(request, UpdateDocumentBody)
    if body.observation_scopes is not None:
        raise ServiceError(400, "unsupported_field", f"observation_scopes: {UNSUPPORTED['observation_scopes']}")
    if body.tags is None:
        raise ServiceError(422, "invalid_request", "At least one field (tags, observation_scopes) must be provided")
    tags = list(dict.fromkeys(t.strip() for t in (checked_text("tags", t) for t in body.tags) if t.strip()))
    if not await engine_of(request).documents.set_tags(bank_id, document_id, tags):
        raise _not_found(document_id)
    return answer(request, "UpdateDocumentResponse", {"success": True})


@endpoint
async def delete_document(request: Request) -> Response:
    bank_id, document_id = bank_of(request), path_text(request, "document_id")
    removed = await engine_of(request).delete_document(bank_id, document_id)
    if removed is None:
        raise _not_found(document_id)
    return answer(request, "DeleteDocumentResponse", {
        "success": True, "document_id": document_id, "memory_units_deleted": removed,
        "message": f"Document '{document_id}' and {removed} associated memory units deleted successfully",
    })


@endpoint
async def list_chunks(request: Request) -> Response:
    bank_id, document_id = bank_of(request), path_text(request, "document_id")
    limit = bounded_int(request, "limit", 100, minimum=1, maximum=1000)
    offset = bounded_int(request, "offset", 0)
    page = await engine_of(request).documents.chunks(bank_id, document_id, limit=limit, offset=offset)
    if page is None:
        raise _not_found(document_id)
    return answer(request, "ListChunksResponse", page)


@endpoint
async def document_history(request: Request) -> Response:
    """The document's history, rebuilt from the bank's async operations (:mod:`.history`)."""
    return await history.document_history(request)


@endpoint
async def get_chunk(request: Request) -> Response:
    """A chunk by its id alone: the id names its bank."""
    chunk_id = path_text(request, "chunk_id")
    found = await engine_of(request).documents.chunk(chunk_id)
    if found is None:
        raise ServiceError(404, "chunk_not_found", f"Chunk {chunk_id!r} not found")
    return answer(request, "ChunkResponse", found)


def routes(banks_path: str) -> list[Route]:
    """Upstream's document paths (document ids may hold ``/``): ``chunks``, ``history`` and ``reprocess``
    before the document itself."""
    doc = f"{banks_path}/documents/{{document_id:path}}"
    return [
        Route(f"{banks_path}/documents", list_documents, methods=["GET"]),
        Route(f"{doc}/chunks", list_chunks, methods=["GET"]),
        Route(f"{doc}/history", document_history, methods=["GET"]),
        Route(f"{doc}/reprocess", reprocess.reprocess_document, methods=["POST"]),
        Route(doc, get_document, methods=["GET"]),
        Route(doc, update_document, methods=["PATCH"]),
        Route(doc, delete_document, methods=["DELETE"]),
        Route("/v1/default/chunks/{chunk_id:path}", get_chunk, methods=["GET"]),
    ]
