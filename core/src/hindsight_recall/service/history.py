"""A document's history, rebuilt from the bank's async operations, as upstream rebuilds it.

Each completed async retain keeps, in its plan, how many memories each of its documents had before it
ran; with its stored request that says what it did to a document: ``retain`` (the document written
whole: its earlier memories removed, the new ones added) or ``append`` (memories added after the ones
it had). As upstream's, the history reaches back only as far as operations are kept, and a change made
without an operation (a synchronous retain, an edit) is not in it; ``total``, ``limit`` and ``offset``
count operations, newest first.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ._params import bounded_int, path_text
from .async_retain import name_documents
from .base import bank_of, engine_of
from .errors import ServiceError
from .items import documents as by_document
from .schemas import RetainBody
from .wire import answer


def event(document_id: str, operation_id: uuid.UUID, payload: str, plan: dict[str, Any], at: Any) -> dict[str, Any]:
    """What one completed retain operation did to ``document_id`` (upstream's ``DocumentEvent``)."""
    body = RetainBody.model_validate_json(payload)
    name_documents(body, operation_id)
    indexes = by_document(body)[document_id]
    appended = any(body.items[i].update_mode == "append" for i in indexes)
    before = int((plan.get("before") or {}).get(document_id, 0))
    return {"document_id": document_id, "kind": "append" if appended else "retain",
            "operation_id": str(operation_id), "created_at": at.isoformat(), "facts_added": len(indexes),
            "facts_removed": 0 if appended else before}


async def document_history(request: Request) -> Response:
    """``GET .../documents/{document_id}/history``: 404 for a document the bank does not have."""
    bank_id, document_id = bank_of(request), path_text(request, "document_id")
    limit = bounded_int(request, "limit", 100, minimum=1, maximum=1000)
    offset = bounded_int(request, "offset", 0)
    found = await engine_of(request).documents.retains(bank_id, document_id, limit=limit, offset=offset)
    if found is None:
        raise ServiceError(404, "document_not_found", "Document not found")
    rows, total = found
    items = [event(document_id, op_id, payload, plan, at) for op_id, payload, plan, at in rows]
    return answer(request, "DocumentHistoryResponse", {"document_id": document_id, "total": total, "limit": limit,
                                                       "offset": offset, "items": items})
