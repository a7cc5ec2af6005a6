"""Operation routes: list, get, cancel, retry and delete a bank's async operations (upstream's shapes).

Each route parses its request, then calls one of the functions below, which the MCP tools call too:
one engine call and the answer's body.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine import Engine, operations
from ..engine.operations import Operation
from .base import bank_of, endpoint, engine_of, flag_query, wake_worker
from .errors import ServiceError
from .wire import answer

#: upstream's bounds of the list's page size
MAX_LIMIT = 100
#: the largest offset accepted (beyond it no bank has operations)
MAX_OFFSET = 2**31 - 1


def _iso(value: Any) -> str | None:
    return None if value is None else str(value.isoformat())


def _progress(op: Operation) -> dict[str, Any] | None:
    """Upstream's progress snapshot: the stage last reached and the items done of the total."""
    if op.stage is None or op.progress_at is None:
        return None
    return {"stage": op.stage, "at": _iso(op.progress_at), "processed": op.processed, "total": op.items_count,
            "detail": None}


def _listed(op: Operation) -> dict[str, Any]:
    """An operation as upstream's list shows it; ``attempts`` (how many times a worker took it) is ours."""
    oid = str(op.operation_id)
    return {"id": oid, "task_type": op.operation_type, "operation_id": oid, "operation_type": op.operation_type,
            "items_count": op.items_count, "document_id": op.document_id, "filename": None, "mental_model_id": None,
            "details": None, "created_at": _iso(op.created_at), "updated_at": _iso(op.updated_at),
            "status": op.status, "error_message": op.error_message, "retry_count": op.retry_count,
            "next_retry_at": None, "progress": _progress(op), "attempts": op.attempts}


def _operation_id(request: Request) -> uuid.UUID:
    return operation_id_of(request.path_params["operation_id"])


def operation_id_of(raw: str) -> uuid.UUID:
    """An operation id given as text: 400 ``invalid_operation_id`` unless it is a UUID."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ServiceError(400, "invalid_operation_id", f"Invalid operation_id format: {raw}") from None


def bounded(name: str, raw: str | None, default: int, low: int, high: int) -> int:
    """A page bound given as text (``default`` when absent): 422 unless digits, 400 outside ``low``..``high``."""
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit():
        raise ServiceError(422, "invalid_request", f"{name}: must be an integer, got {raw[:40]!r}")
    value = int(raw) if len(raw) <= 20 else high + 1
    if not low <= value <= high:
        raise ServiceError(400, "bad_request", f"{name}: must be between {low} and {high}, got {raw[:40]}")
    return value


@endpoint
async def list_operations(request: Request) -> Response:
    """Newest first, filtered by status and type; 404 for a bank that does not exist (as upstream)."""
    bank_id = bank_of(request)
    status, kind = filters(request.query_params.get("status"), request.query_params.get("type"))
    limit = bounded("limit", request.query_params.get("limit"), 20, 1, MAX_LIMIT)
    offset = bounded("offset", request.query_params.get("offset"), 0, 0, MAX_OFFSET)
    flag_query(request, "exclude_parents")  # no operation here has children: nothing to exclude
    body = await operations_page(engine_of(request), bank_id, status=status, kind=kind, limit=limit, offset=offset)
    return answer(request, "OperationsListResponse", body)


def filters(status: str | None, kind: str | None) -> tuple[str | None, str | None]:
    """The list's status and type filters (empty ones: none): 422 for an unknown status, 400 for a type
    holding a NUL byte."""
    status, kind = status or None, kind or None
    if status is not None and status not in operations.STATUSES:
        raise ServiceError(422, "invalid_request", f"status: {status[:40]!r} is not one of "
                           f"{', '.join(operations.STATUSES)}")
    if kind is not None and "\x00" in kind:
        raise ServiceError(400, "bad_request", "type: must not contain NUL bytes")
    return status, kind


async def operations_page(engine: Engine, bank_id: str, *, status: str | None, kind: str | None, limit: int,
                          offset: int) -> dict[str, Any]:
    """The list's answer: the bank's operations, newest first; 404 for a bank that does not exist."""
    found, total = await engine.operations.page(bank_id, status=status, operation_type=kind, limit=limit,
                                                offset=offset)
    return {"bank_id": bank_id, "total": total, "limit": limit, "offset": offset,
            "operations": [_listed(op) for op in found]}


@endpoint
async def get_operation(request: Request) -> Response:
    """One operation; an unknown id answers 200 with status ``not_found`` (as upstream)."""
    bank_id = bank_of(request)
    operation_id = _operation_id(request)
    with_payload = flag_query(request, "include_payload")
    body = await operation_status(engine_of(request), bank_id, operation_id, with_payload=with_payload)
    return answer(request, "OperationStatusResponse", body)


async def operation_status(engine: Engine, bank_id: str, operation_id: uuid.UUID, *,
                           with_payload: bool = False) -> dict[str, Any]:
    """One operation's answer; an unknown id is status ``not_found`` (as upstream)."""
    op, payload = await engine.operations.get(bank_id, operation_id, with_payload=with_payload)
    oid = str(operation_id)
    if op is None:
        return {"operation_id": oid, "status": "not_found", "operation_type": None, "id": oid, "task_type": None,
                "created_at": None, "updated_at": None, "completed_at": None, "error_message": None}
    listed = _listed(op)
    metadata = {"items_count": op.items_count, "processed": op.processed, "attempts": op.attempts,
                "worker_id": op.worker_id, **(op.result or {})}
    return {
        "operation_id": oid, "status": op.status, "operation_type": op.operation_type, "id": oid,
        "task_type": op.operation_type, "mental_model_id": None, "created_at": listed["created_at"],
        "updated_at": listed["updated_at"], "completed_at": _iso(op.completed_at), "error_message": op.error_message,
        "retry_count": op.retry_count, "next_retry_at": None, "progress": listed["progress"], "details": None,
        "result_metadata": metadata, "child_operations": None,
        "task_payload": None if payload is None else json.loads(payload),
        "attempts": op.attempts,
    }


@dataclass(frozen=True)
class Change:
    """A change of an operation's status: the engine's name of it, and the words of its answers."""

    apply: operations.Change
    what: str
    allowed: str
    done: str
    #: upstream's response schema
    schema: str


CANCEL = Change("cancel", "cancelled", "only 'pending' and 'processing' operations can be cancelled",
                "cancelled", "CancelOperationResponse")
RETRY = Change("retry", "retried", "expected 'failed' or 'cancelled'", "queued for retry",
               "RetryOperationResponse")
DELETE = Change("delete", "deleted", "expected 'failed', 'cancelled' or 'completed'", "deleted",
                "DeleteOperationResponse")


async def change_operation(request: Request, bank_id: str, operation_id: uuid.UUID, change: Change, *,
                           bank_required: bool = False) -> dict[str, Any]:
    """Apply ``change`` to the bank's operation (:func:`changed`) and wake the worker; the answer's body.
    The console's buttons call this too."""
    body = await changed(engine_of(request), bank_id, operation_id, change, bank_required=bank_required)
    wake_worker(request)
    return body


async def changed(engine: Engine, bank_id: str, operation_id: uuid.UUID, change: Change, *,
                  bank_required: bool = False) -> dict[str, Any]:
    """Apply ``change`` to the bank's operation; the answer's body, its message saying it was done.

    Raises 404 when the bank has no such operation, 409 when its status does not allow it (upstream's
    answers); with ``bank_required``, 404 ``bank_not_found`` first for a bank that does not exist.
    """
    done, current = await engine.operations.change(bank_id, operation_id, change.apply, bank_required=bank_required)
    if not done:
        if current is None:
            raise ServiceError(404, "operation_not_found", f"Operation {operation_id} not found for bank {bank_id}")
        raise ServiceError(409, "conflict", f"Operation {operation_id} cannot be {change.what}: status is "
                           f"'{current.status}', {change.allowed}")
    return {"success": True, "message": f"Operation {operation_id} {change.done}", "operation_id": str(operation_id)}


async def _change(request: Request, change: Change) -> Response:
    body = await change_operation(request, bank_of(request), _operation_id(request), change)
    return answer(request, change.schema, body)


@endpoint
async def cancel_operation(request: Request) -> Response:
    """A pending operation never starts; a processing one stops at its next checkpoint (or sooner)."""
    return await _change(request, CANCEL)


@endpoint
async def retry_operation(request: Request) -> Response:
    """A failed or cancelled operation is queued again and resumes after the work it had committed."""
    return await _change(request, RETRY)


@endpoint
async def delete_operation(request: Request) -> Response:
    """Remove the record of an operation that has ended."""
    return await _change(request, DELETE)


def routes(banks_path: str) -> list[Route]:
    """Upstream's operation paths; ``/delete`` and ``/retry`` before the bare ``{operation_id}``."""
    path = f"{banks_path}/operations"
    return [
        Route(path, list_operations, methods=["GET"]),
        Route(f"{path}/{{operation_id}}/retry", retry_operation, methods=["POST"]),
        Route(f"{path}/{{operation_id}}/delete", delete_operation, methods=["DELETE"]),
        Route(f"{path}/{{operation_id}}", get_operation, methods=["GET"]),
        Route(f"{path}/{{operation_id}}", cancel_operation, methods=["DELETE"]),
    ]
