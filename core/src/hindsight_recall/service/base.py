"""What every route shares: JSON errors, body validation, query integers, the engine and the bank id."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..store import banks
from .errors import ServiceError, respond_to

Handler = Callable[[Request], Awaitable[Response]]


def endpoint(handler: Handler) -> Handler:
    """Answer any exception of ``handler`` as the JSON error for it (never Starlette's plain-text 500)."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            return respond_to(exc, request.url.path)

    return wrapped


async def body_of(request: Request, model: type[BaseModel]) -> Any:
    """The request body parsed and validated as ``model``: 400 for malformed JSON, 422 for bad fields."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise ServiceError(400, "malformed_json", "the request body is not valid JSON") from None
        raise


def int_query(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not value.isdigit():
        raise ServiceError(422, "invalid_request", f"{name}: must be a non-negative integer, got {value!r}")
    return int(value)


def engine_of(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


def bank_of(request: Request) -> str:
    return banks.validate_bank_id(request.path_params["bank_id"])
