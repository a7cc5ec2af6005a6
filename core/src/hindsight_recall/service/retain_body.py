"""A retain's request body, read and checked in a worker thread, so that a large one leaves the event loop free.

Validating 400,000 items takes seconds of CPU, and pydantic holds the interpreter while it validates: a
body is read here, off the event loop, its items :data:`PART_ITEMS` at a time. A queued (``async``) body
is checked whole, a part at a time, and only what queuing it needs is kept (:class:`Queued`): its items
are read again by the worker that runs it. Each item's JSON is kept as text until its part is validated,
so a large body never becomes hundreds of thousands of objects for the garbage collector to walk.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.requests import Request

from ..errors import RetainError
from ..jsonl import parse_datetime
from ..settings import Settings
from .base import parse_body
from .errors import ServiceError, invalid_fields
from .items import check_supported, item_text
from .schemas import MemoryItem, RetainBody

#: the items validated at a time (no call holds the interpreter for long)
PART_ITEMS = 2000
_ITEMS: TypeAdapter[list[MemoryItem]] = TypeAdapter(list[MemoryItem])
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True)
class Queued:
    """A queued retain's body, checked whole, as queuing it needs it."""

    #: how many items it has
    items: int
    #: the document every item names, when they all name the same one
    document_id: str | None
    #: the operation id the client chose
    operation_id: uuid.UUID | None


class _Size(BaseModel):
    """Just enough of a retain body to know whether it is queued (its items are counted apart)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    async_: bool = Field(default=False, alias="async")


async def retain_body(request: Request, settings: Settings) -> RetainBody | Queued:
    """The retain's body (see :func:`read`)."""
    return await read(await request.body(), settings)


async def read(raw: bytes | str, settings: Settings) -> RetainBody | Queued:
    """A retain's body checked as the route answers it, in a worker thread: a synchronous one validated
    (:class:`RetainBody`), and refused (413) from its item count alone when it has more items than a
    synchronous retain takes; a queued one checked whole (:class:`Queued`): its fields, each item's
    support, its operation id, then each item's content and dates (:func:`precheck`), in that order."""
    return await asyncio.to_thread(_read, raw.encode() if isinstance(raw, str) else raw, settings)


def _read(raw: bytes, settings: Settings) -> RetainBody | Queued:
    split = _split(raw)
    if split is not None:
        head, items = split
        try:
            queued = _Size.model_validate(head).async_
        except ValidationError:
            queued = None  # the full validation names what is wrong
        if queued is False:
            _refuse_sync(len(items), settings)
        elif queued:
            return _queued(head, items)
    body: RetainBody = parse_body(raw, RetainBody)
    if body.async_:
        return _summary(body, _parts_of(body.items))
    check_supported(body.items)
    return body


def _split(raw: bytes) -> tuple[dict[str, Any], list[str]] | None:
    """The body's fields but its items, and each item's JSON text; ``None`` unless it is a JSON object
    with an ``items`` array (the full validation then says what is wrong)."""
    try:
        text = raw.decode("utf-8")
        found = _fields(text)
    except (ValueError, IndexError, RecursionError):
        return None
    return found


def _fields(text: str) -> tuple[dict[str, Any], list[str]] | None:
    decode = _DECODER.raw_decode
    at = _skip(text, 0)
    if text[at] != "{":
        return None
    head: dict[str, Any] = {}
    items: list[str] | None = None
    at = _skip(text, at + 1)
    while text[at] != "}":
        key, at = decode(text, at)
        at = _skip(text, at)
        if not isinstance(key, str) or text[at] != ":":
            return None
        at = _skip(text, at + 1)
        if key == "items" and text[at] == "[":
            items, at = _elements(text, at)
        else:
            head[key], at = decode(text, at)
            items = None if key == "items" else items
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
        elif text[at] != "}":
            return None
    if items is None or _skip(text, at + 1) != len(text):
        return None
    return head, items


def _skip(text: str, at: int) -> int:
    """Where the JSON whitespace at ``at`` ends."""
    found = _SPACE.match(text, at)
    return found.end() if found else at


def _elements(text: str, at: int) -> tuple[list[str], int]:
    """The JSON text of each element of the array at ``at``, and where the array ends."""
    decode = _DECODER.raw_decode
    found: list[str] = []
    at = _skip(text, at + 1)
    while text[at] != "]":
        _, end = decode(text, at)  # the element's value is dropped at once: only its text is kept
        found.append(text[at:end])
        at = _skip(text, end)
        if text[at] == ",":
            at = _skip(text, at + 1)
        elif text[at] != "]":
            raise ValueError("not an array")
    return found, at + 1


def _queued(head: dict[str, Any], items: list[str]) -> Queued:
    """A queued body checked whole; when a part's items are invalid, their errors (and those of the other
    fields) answer, as validating the body whole would name them."""
    try:
        body = RetainBody.model_validate_json(json.dumps({**head, "items": []}))
    except ValidationError as exc:
        fields = [dict(e) for e in exc.errors(include_url=False)]
        for _ in _validated(items, fields):
            pass
        raise invalid_fields(fields) from None
    return _summary(body, _validated(items, []))


def _validated(items: list[str], fields: list[dict[str, Any]]) -> Iterator[tuple[int, list[MemoryItem]]]:
    """Each part of ``items`` validated, with the index of its first item; a part that fails raises the
    422 of its errors followed by ``fields``."""
    for start in range(0, len(items), PART_ITEMS):
        try:
            part = _ITEMS.validate_json("[" + ",".join(items[start:start + PART_ITEMS]) + "]")
        except ValidationError as exc:
            moved = [{**e, "loc": ("items", start + int(e["loc"][0]), *e["loc"][1:])}
                     for e in exc.errors(include_url=False)]
            raise invalid_fields(moved + fields) from None
        yield start, part


def _parts_of(items: list[MemoryItem]) -> Iterator[tuple[int, list[MemoryItem]]]:
    for start in range(0, len(items), PART_ITEMS):
        yield start, items[start:start + PART_ITEMS]


def _summary(body: RetainBody, parts: Iterator[tuple[int, list[MemoryItem]]]) -> Queued:
    """Check each part's items as the route does, keeping only what queuing needs; the first unsupported
    field answers before the operation id, which answers before the first empty content or bad date."""
    count, every = 0, True
    named: set[str] = set()
    unsupported: Exception | None = None
    invalid: Exception | None = None
    for start, part in parts:
        count += len(part)
        for item in part:
            every = every and bool(item.document_id)
            if item.document_id and len(named) < 2:
                named.add(item.document_id)
        try:
            check_supported(part, start)
        except ServiceError as exc:
            unsupported = unsupported or exc
        try:
            precheck(part, start)
        except (ServiceError, RetainError) as exc:
            invalid = invalid or exc
    if unsupported is not None:
        raise unsupported
    chosen = operation_uuid(body.operation_id) if body.operation_id is not None else None
    if invalid is not None:
        raise invalid
    return Queued(count, next(iter(named)) if len(named) == 1 and every else None, chosen)


def precheck(items: Sequence[MemoryItem], start: int = 0) -> None:
    """The checks of a synchronous retain that are cheap enough to answer at once (content, dates), with
    its messages; whatever else is wrong with an item fails the operation, naming the item.

    :param start: the index of the first of ``items`` in the body.
    """
    for index, item in enumerate(items, start):
        if not item_text(item, index).strip():
            raise RetainError(None, f"items.{index}.content", "must not be empty")
        stamp = item.timestamp
        if isinstance(stamp, str) and stamp.strip().lower() != "unset":
            parse_datetime(stamp, f"items.{index}.timestamp")


def operation_uuid(value: str, field: str = "operation_id") -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise ServiceError(422, "invalid_request", f"{field}: must be a valid UUID, got {value!r}") from None


def _refuse_sync(items: int, settings: Settings) -> None:
    limit = settings.service_max_sync_retain_items
    if items > limit:
        raise ServiceError(413, "too_many_items", f"a synchronous retain takes at most {limit} items "
                           f"(HINDSIGHT_API_SERVICE_MAX_SYNC_RETAIN_ITEMS); this one has {items}: send "
                           "it with \"async\": true to queue it as an operation")


def check_sync_size(body: RetainBody, settings: Settings) -> None:
    """Refuse (413) a synchronous retain too large to answer promptly, pointing to ``async: true``."""
    _refuse_sync(len(body.items), settings)
