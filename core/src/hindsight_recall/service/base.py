"""What every route shares: JSON errors, body validation, query integers, the engine and the bank id."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..engine.banks import validate_bank_id
from ..errors import BankNotFound
from ..limits import unicode_problem
from .errors import ServiceError, as_text, respond_to

Handler = Callable[[Request], Awaitable[Response]]


def endpoint(handler: Handler) -> Handler:
    """Answer any exception of ``handler`` as the JSON error for it (never Starlette's plain-text 500)."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            return respond_to(exc, request.scope)

    return wrapped


async def body_of(request: Request, model: type[BaseModel]) -> Any:
    """The request body parsed and validated as ``model``: 400 for malformed JSON, 422 for bad fields."""
    return parse_body(await request.body(), model)


def parse_body(raw: bytes | str, model: type[BaseModel]) -> Any:
    """A JSON body parsed and validated as ``model`` (see :func:`body_of`)."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise ServiceError(400, "malformed_json", "the request body is not valid JSON") from None
        raise


#: the largest integer a query parameter takes unless a route allows more (PostgreSQL's ``int``)
MAX_QUERY_INT = 2**31 - 1
#: the longest text query parameter, in characters
MAX_QUERY_TEXT = 4096


def int_query(request: Request, name: str, default: int, maximum: int = MAX_QUERY_INT) -> int:
    """A non-negative integer query parameter (ASCII digits only, at most ``maximum``): 400 naming it otherwise,
    so no value reaches the database as an out-of-range bigint."""
    value = request.query_params.get(name)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()):
        raise ServiceError(400, "invalid_request", f"{name}: must be a non-negative integer, got {as_text(value)}")
    if len(value) > len(str(maximum)) or int(value) > maximum:
        raise ServiceError(400, "invalid_request", f"{name}: must be at most {maximum}, got {as_text(value)}")
    return int(value)


def text_query(request: Request, name: str, max_chars: int = MAX_QUERY_TEXT) -> str | None:
    """A text query parameter, ``None`` when absent or empty: 400 naming it for a NUL byte, a lone
    surrogate or more than ``max_chars`` characters (PostgreSQL text cannot hold the first two)."""
    value = request.query_params.get(name)
    if not value:
        return None
    problem = unicode_problem(value)
    if problem is None and len(value) > max_chars:
        problem = f"is {len(value)} characters long; the limit is {max_chars}"
    if problem:
        raise ServiceError(400, "invalid_request", f"{name}: {problem}")
    return value


def texts_query(request: Request, name: str, max_chars: int = MAX_QUERY_TEXT) -> list[str]:
    """Every value of a repeated text query parameter (``?tags=a&tags=b``), each checked as :func:`text_query`."""
    values = [v for v in request.query_params.getlist(name) if v]
    for value in values:
        problem = unicode_problem(value) or (
            f"is {len(value)} characters long; the limit is {max_chars}" if len(value) > max_chars else None)
        if problem:
            raise ServiceError(400, "invalid_request", f"{name}: {problem}")
    return values


def choice_query(request: Request, name: str, choices: tuple[str, ...], default: str | None = None) -> str | None:
    """A query parameter that must be one of ``choices``: 400 naming it and the choices otherwise."""
    return checked_choice(name, text_query(request, name), choices, default)


def checked_choice(name: str, value: str | None, choices: tuple[str, ...], default: str | None = None) -> str | None:
    """``value`` when it is one of ``choices`` (``default`` for none): 400 naming ``name`` and the choices
    otherwise."""
    if value is None:
        return default
    if value not in choices:
        raise ServiceError(400, "invalid_request", f"{name}: {as_text(value)} is not one of {', '.join(choices)}")
    return value


def flag_query(request: Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter (``true``/``false``/``1``/``0``): 422 naming it otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false", "1", "0"):
        raise ServiceError(422, "invalid_request", f"{name}: must be true or false, got {raw[:40]!r}")
    return raw.lower() in ("true", "1")


def engine_of(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


def wake_worker(request: Request) -> None:
    """Have this process's queue worker look at the queue now (an operation was just queued)."""
    worker = getattr(request.app.state, "worker", None)
    if worker is not None:
        worker.wake()


def bank_of(request: Request) -> str:
    return validate_bank_id(request.path_params["bank_id"])


async def existing_bank(request: Request) -> str:
    """The request's bank id; 404 ``bank_not_found`` unless the bank exists."""
    bank_id = bank_of(request)
    if not await engine_of(request).banks.exists(bank_id):
        raise BankNotFound(bank_id)
    return bank_id
