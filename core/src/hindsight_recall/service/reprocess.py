"""Reprocess a document: retain its stored items again, with the configuration the server has now.

As upstream's, a reprocess is a queued retain of the document (``update_mode: replace``) and answers
its operation at once; the worker runs it as any queued retain (:mod:`.async_retain`): through the retain
model when one is configured (its facts asked for before the document's one transaction, so a model that
fails leaves the old memories and fails the operation), else verbatim, as a retain would. The items are
read back from the store (:meth:`~hindsight_recall.engine.documents.Documents.items`) when the request comes and kept
in the operation, so a resumed run writes the same memories.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..engine.documents import StoredItem
from . import async_retain, retain_body
from ._params import path_text
from .base import bank_of, endpoint, engine_of, wake_worker
from .errors import ServiceError
from .wire import answer


def retain_request(document_id: str, items: list[StoredItem]) -> str:
    """The queued retain that writes the document anew from ``items``: each with its content, date
    (``unset`` when it had none), context, metadata, tags and entities."""
    return json.dumps({"async": True, "items": [{
        "content": item.content, "document_id": document_id, "update_mode": "replace",
        "timestamp": item.timestamp.isoformat() if item.timestamp else "unset", "context": item.context,
        "metadata": {key: _text(value) for key, value in item.metadata.items()}, "tags": list(item.tags),
        "entities": [{"text": name} for name in item.entities],
    } for item in items]})


def _text(value: Any) -> str:
    """A metadata value as retain takes it (a string; a value stored otherwise as its JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


@endpoint
async def reprocess_document(request: Request) -> Response:
    """Queue the document's retain again (404 for a document the bank does not have, or one with no items)."""
    bank_id, document_id = bank_of(request), path_text(request, "document_id")
    engine = engine_of(request)
    items = await engine.documents.items(bank_id, document_id)
    if not items:
        why = "not found" if items is None else "has no memories to reprocess"
        raise ServiceError(404, "document_not_found", f"Document {document_id!r} {why}")
    payload = retain_request(document_id, items)
    body = await retain_body.read(payload, engine.settings)  # checked as any queued retain is
    if not isinstance(body, retain_body.Queued):
        raise AssertionError("an async retain body is always queued")
    queued = await async_retain.queue(engine, bank_id, body, payload)
    wake_worker(request)
    return answer(request, "ReprocessDocumentResponse", {
        "success": True, "operation_id": queued["operation_id"], "items_count": queued["items_count"]})
