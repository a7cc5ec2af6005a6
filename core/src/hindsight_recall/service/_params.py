"""Query-string and path values checked before they reach the database: a bad one is a 400 (or a 422
for a value outside a fixed set) naming the field, never a database error."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from starlette.requests import Request

from ..limits import INT32_MAX, unicode_problem
from ..types import TagsMatch
from .errors import ServiceError
from .schemas import UNSUPPORTED

#: the longest search text or tag accepted in a query string, in characters
MAX_QUERY_TEXT = 1000
_INTEGER = re.compile(r"-?[0-9]{1,12}")


def bounded_int(request: Request, name: str, default: int, *, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """The query integer ``name`` (``default`` when absent), between ``minimum`` and ``maximum``."""
    value = request.query_params.get(name)
    if value is None:
        return default
    if not _INTEGER.fullmatch(value.strip()) or not minimum <= int(value) <= maximum:
        raise ServiceError(400, "invalid_request",
                           f"{name}: must be an integer from {minimum} to {maximum}, got {value[:40]!r}")
    return int(value)


def checked_text(name: str, value: str, limit: int = MAX_QUERY_TEXT) -> str:
    """``value`` when PostgreSQL can store it and it is at most ``limit`` characters, else a 400."""
    problem = unicode_problem(value)
    if problem is None and len(value) > limit:
        problem = f"is {len(value)} characters long; the limit is {limit}"
    if problem:
        raise ServiceError(400, "invalid_request", f"{name}: {problem}")
    return value


def text_query(request: Request, name: str) -> str | None:
    """The query text ``name``, or ``None`` when absent or empty."""
    value = request.query_params.get(name)
    return checked_text(name, value) if value else None


def path_text(request: Request, name: str) -> str:
    """The path parameter ``name`` (an id), checked like any text."""
    return checked_text(name, request.path_params[name], 4 * MAX_QUERY_TEXT)


def tags_query(request: Request) -> list[str] | None:
    """The repeated ``tags`` query values, or ``None`` when there are none."""
    values = request.query_params.getlist("tags")
    return [checked_text("tags", v) for v in values] or None


def tags_match_query(request: Request, default: str) -> str:
    """The ``tags_match`` mode; ``tag_groups`` (compound filters) is refused as recall refuses it."""
    if request.query_params.get("tag_groups"):
        raise ServiceError(400, "unsupported_field", f"tag_groups: {UNSUPPORTED['tag_groups']}")
    return choice_query(request, "tags_match", [m.value for m in TagsMatch], default) or default


def choice_query(request: Request, name: str, choices: Sequence[str], default: str | None) -> str | None:
    """The query value ``name``, one of ``choices`` (422 otherwise), or ``default`` when absent or empty."""
    value = request.query_params.get(name) or None
    if value is None:
        return default
    if value not in choices:
        raise ServiceError(422, "invalid_request", f"{name}: {value[:40]!r} is not one of {', '.join(choices)}")
    return value


def date_query(request: Request, name: str) -> datetime | None:
    """The ISO-8601 query datetime ``name`` (naive means UTC), or ``None`` when absent or empty."""
    value = request.query_params.get(name)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ServiceError(400, "invalid_request", f"{name}: {value[:40]!r} is not an ISO-8601 datetime") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
