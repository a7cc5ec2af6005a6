"""The bank's async operations: a page of them, one with its details, and its cancel and retry buttons.

Reads are the API's (``GET …/operations``); the buttons call the very change the API's cancel and
retry routes make (:func:`~hindsight_recall.service.operations.change_operation`).
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...engine import operations
from ..base import bank_of, choice_query, engine_of, int_query
from ..operations import CANCEL, RETRY, Change, change_operation
from .auth import PREFIX
from .render import Console, redirect, segment

PAGE_SIZE = 50
MAX_OFFSET = 10_000_000
#: what a button did, as the next page says it
DONE = {"cancel": "Cancelled.", "retry": "Queued again."}


def _shown(op: operations.Operation) -> dict[str, Any]:
    """An operation as the pages show it."""
    return {"id": str(op.operation_id), "kind": op.operation_type, "status": op.status, "stage": op.stage,
            "processed": op.processed, "total_items": op.items_count, "created_at": op.created_at.isoformat(),
            "updated_at": op.updated_at.isoformat(),
            "completed_at": op.completed_at.isoformat() if op.completed_at else None,
            "error": op.error_message, "document_id": op.document_id, "attempts": op.attempts,
            "retry_count": op.retry_count, "worker_id": op.worker_id, "result": op.result or {},
            "cancel": op.status in operations.CANCELLABLE, "retry": op.status in operations.RETRYABLE}


def _operation_id(request: Request) -> uuid.UUID | None:
    try:
        return uuid.UUID(request.path_params["operation_id"])
    except ValueError:
        return None


async def operation_list(request: Request, console: Console) -> Response:
    bank_id = bank_of(request)
    status = choice_query(request, "status", operations.STATUSES)
    offset = int_query(request, "offset", 0, MAX_OFFSET)
    found, total = await engine_of(request).operations.page(bank_id, status=status, operation_type=None,
                                                            limit=PAGE_SIZE, offset=offset)
    return console.render(request, "operations.html", bank_id=bank_id, rows=[_shown(op) for op in found],
                          total=total, offset=offset, size=PAGE_SIZE, wanted=status or "",
                          statuses=operations.STATUSES)


def _missing(request: Request, console: Console, bank_id: str) -> Response:
    raw = request.path_params["operation_id"]
    return console.render(request, "error.html", 404, title="Not found",
                          message=f"Bank {bank_id} has no operation {raw}.")


async def operation(request: Request, console: Console) -> Response:
    bank_id = bank_of(request)
    operation_id = _operation_id(request)
    found = await engine_of(request).operations.of_bank(bank_id, operation_id)
    if found is None:
        return _missing(request, console, bank_id)
    done = DONE.get(request.query_params.get("done", ""))
    return console.render(request, "operation.html", bank_id=bank_id, op=_shown(found), done=done)


async def _change(request: Request, console: Console, change: Change, name: str) -> Response:
    bank_id = bank_of(request)
    operation_id = _operation_id(request)
    if operation_id is None:
        await engine_of(request).operations.of_bank(bank_id, None)  # a bank that does not exist is a 404 first
        return _missing(request, console, bank_id)
    # a 404 (no such operation in this bank) or 409 (its status forbids it) is the API's, shown as a page
    await change_operation(request, bank_id, operation_id, change, bank_required=True)
    return redirect(f"{PREFIX}/banks/{segment(bank_id)}/operations/{operation_id}?done={name}")


async def cancel(request: Request, console: Console) -> Response:
    return await _change(request, console, CANCEL, "cancel")


async def retry(request: Request, console: Console) -> Response:
    return await _change(request, console, RETRY, "retry")
