"""Query and path values the document, entity and graph routes add to :mod:`.base`'s: each checked
before it reaches the database, a bad one a 400 naming it."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from starlette.requests import Request

from ..limits import INT32_MAX, unicode_problem
from ..types import TagsMatch
from .base import MAX_QUERY_TEXT, choice_query, int_query, texts_query
from .errors import ServiceError, as_text
from .schemas import UNSUPPORTED

_SIGNED = re.compile(r"-?[0-9]{1,10}")


def bounded_int(request: Request, name: str, default: int, *, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """The query integer ``name`` (``default`` when absent), from ``minimum`` to ``maximum``."""
    if minimum >= 0:
        value = int_query(request, name, default, maximum)
        if value < minimum:
            raise ServiceError(400, "invalid_request", f"{name}: must be at least {minimum}, got {value}")
        return value
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _SIGNED.fullmatch(raw) or not minimum <= int(raw) <= maximum:
        raise ServiceError(400, "invalid_request",
                           f"{name}: must be an integer from {minimum} to {maximum}, got {as_text(raw)}")
    return int(raw)


def checked_text(name: str, value: str, limit: int = MAX_QUERY_TEXT) -> str:
    """``value`` when PostgreSQL can store it and it is at most ``limit`` characters, else a 400."""
    problem = unicode_problem(value)
    if problem is None and len(value) > limit:
        problem = f"is {len(value)} characters long; the limit is {limit}"
    if problem:
        raise ServiceError(400, "invalid_request", f"{name}: {problem}")
    return value


def path_text(request: Request, name: str) -> str:
    """The path parameter ``name`` (an id), checked like any text."""
    return checked_text(name, request.path_params[name])


def tags_query(request: Request) -> list[str] | None:
    """The repeated ``tags`` query values, or ``None`` when there are none."""
    return texts_query(request, "tags") or None


def tags_match_query(request: Request, default: str) -> str:
    """The ``tags_match`` mode; ``tag_groups`` (compound filters) is refused as recall refuses it."""
    if request.query_params.get("tag_groups"):
        raise ServiceError(400, "unsupported_field", f"tag_groups: {UNSUPPORTED['tag_groups']}")
    return choice_query(request, "tags_match", tuple(m.value for m in TagsMatch), default) or default


def date_query(request: Request, name: str) -> datetime | None:
    """The ISO-8601 query datetime ``name`` (naive means UTC), or ``None`` when absent or empty."""
    value = request.query_params.get(name)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ServiceError(400, "invalid_request", f"{name}: {as_text(value)} is not an ISO-8601 datetime") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
