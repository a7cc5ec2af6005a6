"""Every error the service answers is JSON, never a traceback, in upstream Hindsight's (FastAPI's) shape.

By default the body is upstream's: ``{"detail": "<message>"}``, and for a 422 its validation error list,
``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``. A caller that asks for this project's extras
(:data:`~.wire.EXTRAS_HEADER`) gets ``{"code": ..., "message": ..., "detail": ...}``: a stable ``code``
to branch on, and the message under both keys.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import (
    BankNotFound,
    DatabaseError,
    InvalidRequest,
    MemoryNotFound,
    QueryTooLong,
    RecallError,
    RecallTimeout,
    RetainError,
    lost_worker,
    redact,
)
from ..llm.errors import LLMError
from .wire import wants_extras

log = logging.getLogger("hindsight_recall.service")

#: SQLSTATEs that mean "another request got there first": a unique key, a serialization failure, a deadlock.
CONFLICT_SQLSTATES = frozenset({"23505", "40001", "40P01"})


class ServiceError(Exception):
    """An error the service answers as it is: an HTTP status, a stable code and a message.

    :param problems: a 422's invalid fields in upstream's form (``loc``, ``msg``, ``type``), when known.
    """

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 problems: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}
        self.problems = problems


def error_response(error: ServiceError, scope: Mapping[str, Any]) -> JSONResponse:
    """The JSON body ``error`` gets, in the shape the request asked for (see the module docstring)."""
    message = redact(error.message)
    if wants_extras(scope):
        body: dict[str, Any] = {"code": error.code, "message": message, "detail": message}
    elif error.status == 422:
        body = {"detail": [{**p, "msg": redact(p["msg"])} for p in error.problems or ()]
                or [{"loc": ["body"], "msg": message, "type": error.code}]}
    else:
        body = {"detail": message}
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def validation_message(exc: ValidationError) -> str:
    """One line per invalid field of a request body: ``items.0.content: Field required``."""
    return _fields_message(exc.errors(include_url=False))


def _fields_message(errors: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in errors)


def invalid_fields(errors: Sequence[Mapping[str, Any]]) -> ServiceError:
    """The 422 of a request body whose fields are invalid, from pydantic's errors (``loc``, ``msg``, ``type``)."""
    problems = [{"loc": ["body", *err["loc"]], "msg": err["msg"], "type": err["type"]} for err in errors]
    return ServiceError(422, "invalid_request", _fields_message(errors), problems=problems)


def classify(exc: BaseException) -> ServiceError:
    """Map an exception raised while serving to its status, code and message."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, ValidationError):
        return invalid_fields(exc.errors(include_url=False, include_input=False, include_context=False))
    if isinstance(exc, BankNotFound):
        return ServiceError(404, "bank_not_found", str(exc))
    if isinstance(exc, MemoryNotFound):
        return ServiceError(404, "memory_not_found", str(exc))
    if isinstance(exc, QueryTooLong):
        return ServiceError(400, "query_too_long", str(exc))
    if isinstance(exc, InvalidRequest):
        code = getattr(exc, "code", None) or ("invalid_request" if exc.status == 422 else "bad_request")
        return ServiceError(exc.status, code, str(exc))
    if isinstance(exc, RetainError):
        return ServiceError(422, "invalid_memory", str(exc))
    if isinstance(exc, RecallTimeout | TimeoutError):
        return ServiceError(504, "timeout", str(exc) or "the request timed out")
    if isinstance(exc, DatabaseError):
        return ServiceError(503, "database_unavailable", str(exc), {"Retry-After": "5"})
    if isinstance(exc, LLMError):  # the chat model's status and code (502, 504, 501), its problem as the message
        return ServiceError(exc.status, exc.code, str(exc))
    if isinstance(exc, RecallError):
        return ServiceError(500, "internal_error", str(exc))
    state = getattr(getattr(exc, "orig", exc), "sqlstate", None)
    if state in CONFLICT_SQLSTATES:
        return ServiceError(409, "conflict", "a concurrent request changed the same rows; retry the request")
    if _unreachable(exc, state):
        return ServiceError(503, "database_unavailable", "the database could not be reached or was restarting; "
                            "retry the request", {"Retry-After": "5"})
    return ServiceError(500, "internal_error", "internal error; the server log has the details")


def _unreachable(exc: BaseException, state: str | None) -> bool:
    """A lost or refused connection (the driver gives no SQL state), the server shutting down or starting
    up (57P01-57P05), or a Citus worker the statement needed gone (08xxx, or Citus's own words for it):
    the database, not the request, is at fault, and a retry soon may succeed."""
    import psycopg
    from sqlalchemy.exc import DBAPIError

    if state is not None:
        return state.startswith(("08", "57P")) or lost_worker(exc)
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or isinstance(exc.orig, psycopg.OperationalError | psycopg.InterfaceError)
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


def respond_to(exc: BaseException, scope: Mapping[str, Any]) -> JSONResponse:
    """The response for ``exc``; unexpected errors are logged with their traceback (server side only)."""
    error = classify(exc)
    if error.status >= 500 and error.code == "internal_error":
        log.error("request %s failed: %s", scope.get("path", ""), redact(f"{type(exc).__name__}: {exc}"),
                  exc_info=(type(exc), exc, exc.__traceback__))
    return error_response(error, scope)


def as_text(value: Any) -> str:
    """A short printable form of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404, 405 and other HTTP errors as the JSON every error gets."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    message = f"no route {request.method} {request.url.path}" if status in (404, 405) else str(detail)
    return error_response(ServiceError(status, code, message), request.scope)
