"""Directive routes: a bank's named rules, stored and listed as upstream's; reflect gives the active ones to
the model. Storing one needs no model."""

from __future__ import annotations

import uuid

from pydantic import Field, field_validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine.directives import MATCHES
from ..limits import INT32_MAX, unicode_problem
from ._params import bounded_int, path_text
from .base import bank_of, body_of, choice_query, endpoint, engine_of, flag_query, texts_query
from .errors import ServiceError
from .schemas import _Body
from .wire import answer

#: the longest directive text, in characters (a directive is a rule, not a document)
MAX_CONTENT = 20_000


class _Fields(_Body):
    @field_validator("name", "content", "tags", check_fields=False)
    @classmethod
    def _storable(cls, value: str | list[str] | None) -> str | list[str] | None:
        for text in [value] if isinstance(value, str) else value or ():
            if problem := unicode_problem(text):
                raise ValueError(problem)
        return value


class CreateDirectiveBody(_Fields):
    """Upstream's ``CreateDirectiveRequest``."""

    name: str = Field(min_length=1, max_length=256)
    content: str = Field(min_length=1, max_length=MAX_CONTENT)
    priority: int = Field(0, ge=-INT32_MAX, le=INT32_MAX)
    is_active: bool = True
    tags: list[str] = Field(default_factory=list, max_length=100)


class UpdateDirectiveBody(_Fields):
    """Upstream's ``UpdateDirectiveRequest``: the fields given (and not null) change."""

    name: str | None = Field(None, min_length=1, max_length=256)
    content: str | None = Field(None, min_length=1, max_length=MAX_CONTENT)
    priority: int | None = Field(None, ge=-INT32_MAX, le=INT32_MAX)
    is_active: bool | None = None
    tags: list[str] | None = Field(None, max_length=100)


def _tags(tags: list[str]) -> list[str]:
    return list(dict.fromkeys(t.strip() for t in tags if t.strip()))


def _directive_id(request: Request) -> uuid.UUID:
    raw = path_text(request, "directive_id")
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise _not_found(raw) from None


def _not_found(directive_id: object) -> ServiceError:
    return ServiceError(404, "directive_not_found", f"Directive '{directive_id}' not found")


@endpoint
async def list_directives(request: Request) -> Response:
    """Highest priority first; ``tags`` selects a scope (untagged directives are in every scope)."""
    bank_id = bank_of(request)
    tags = texts_query(request, "tags")
    tags_match = choice_query(request, "tags_match", MATCHES, "any") or "any"
    active_only = flag_query(request, "active_only", default=True)
    limit = bounded_int(request, "limit", 100, minimum=1, maximum=1000)
    offset = bounded_int(request, "offset", 0)
    items, total = await engine_of(request).directives.page(bank_id, tags=tags, tags_match=tags_match,
                                                            active_only=active_only, limit=limit, offset=offset)
    return answer(request, "DirectiveListResponse", {"items": items, "total": total, "limit": limit,
                                                     "offset": offset})


@endpoint
async def create_directive(request: Request) -> Response:
    """Store a directive (the bank is created if needed, as a retain creates it)."""
    bank_id = bank_of(request)
    body: CreateDirectiveBody = await body_of(request, CreateDirectiveBody)
    fields = {**body.model_dump(), "tags": _tags(body.tags)}
    created = await engine_of(request).directives.create(bank_id, fields)
    return answer(request, "DirectiveResponse", created)


@endpoint
async def get_directive(request: Request) -> Response:
    bank_id, directive_id = bank_of(request), _directive_id(request)
    found = await engine_of(request).directives.get(bank_id, directive_id)
    if found is None:
        raise _not_found(directive_id)
    return answer(request, "DirectiveResponse", found)


@endpoint
async def update_directive(request: Request) -> Response:
    bank_id, directive_id = bank_of(request), _directive_id(request)
    body: UpdateDirectiveBody = await body_of(request, UpdateDirectiveBody)
    changes = body.model_dump(exclude_none=True)
    if "tags" in changes:
        changes["tags"] = _tags(changes["tags"])
    updated = await engine_of(request).directives.update(bank_id, directive_id, changes)
    if updated is None:
        raise _not_found(directive_id)
    return answer(request, "DirectiveResponse", updated)


@endpoint
async def delete_directive(request: Request) -> Response:
    bank_id, directive_id = bank_of(request), _directive_id(request)
    deleted = await engine_of(request).directives.delete(bank_id, directive_id)
    if not deleted:
        raise _not_found(directive_id)
    return answer(request, None, {"status": "deleted"})


def routes(banks_path: str) -> list[Route]:
    path = f"{banks_path}/directives"
    return [
        Route(path, list_directives, methods=["GET"]),
        Route(path, create_directive, methods=["POST"]),
        Route(f"{path}/{{directive_id}}", get_directive, methods=["GET"]),
        Route(f"{path}/{{directive_id}}", update_directive, methods=["PATCH"]),
        Route(f"{path}/{{directive_id}}", delete_directive, methods=["DELETE"]),
    ]
