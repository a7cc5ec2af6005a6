"""Upstream retain items as memories, stored verbatim: one item is one memory (without a retain model;
with one, an item's facts are its memories: :mod:`.facts`).

Ids are derived, not random: a document's ``i``-th item is always the same memory id, so retaining
a document again updates its memories in place and forgets those it no longer has, in the same
transaction (upstream's ``update_mode: replace``), and an ``append`` continues the numbering after the
memories the document already has.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import RetainError
from ..jsonl import parse_datetime
from ..types import Memory
from .errors import ServiceError
from .schemas import UNSUPPORTED, MemoryItem, RetainBody

#: namespace of the memory ids derived from (bank, document, place)
ID_NAMESPACE = uuid.UUID("8f1c2a4e-6b1d-4c8e-9a57-2f0d3e6b9c10")


def memory_id(bank_id: str, document_id: str, place: int) -> str:
    """The id of a document's ``place``-th memory (a UUID string, as upstream's ids are)."""
    return str(uuid.uuid5(ID_NAMESPACE, f"{bank_id}\x00{document_id}\x00{place}"))


def item_text(item: MemoryItem, index: int) -> str:
    """The item's content as text; only text blocks can be stored without a vision model."""
    if isinstance(item.content, str):
        return item.content
    parts = []
    for number, block in enumerate(item.content):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise ServiceError(400, "unsupported_content", f"items.{index}.content.{number}: only text blocks can be "
                               f"retained (got type {block.get('type')!r}); hindsight-recall runs no vision model")
        parts.append(block["text"])
    return "\n".join(parts)


def item_date(item: MemoryItem, index: int, now: datetime) -> datetime | None:
    """When the content occurred: the item's timestamp, now when omitted, none for ``"unset"``."""
    value = item.timestamp
    if value is None:
        return now
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if value.strip().lower() == "unset":
        return None
    return parse_datetime(value, f"items.{index}.timestamp")


def item_entities(item: MemoryItem) -> tuple[str, ...]:
    """The entities the item names, trimmed, each once."""
    return tuple(dict.fromkeys(e.text.strip() for e in item.entities or () if e.text.strip()))


def check_supported(items: Sequence[MemoryItem], start: int = 0) -> None:
    """Refuse (400) the item fields that would need an LLM step this project does not run.

    :param start: the index of the first of ``items`` in the body.
    """
    for index, item in enumerate(items, start):
        for name in ("observation_scopes", "strategy"):
            if getattr(item, name) is not None:
                raise ServiceError(400, "unsupported_field", f"items.{index}.{name}: {UNSUPPORTED[name]}")


def documents(body: RetainBody) -> dict[str, list[int]]:
    """Item indexes by document id; as upstream, items without one share a generated document when no
    item names one, and each get their own otherwise."""
    named = any(item.document_id for item in body.items)
    shared = str(uuid.uuid4())
    out: dict[str, list[int]] = {}
    for index, item in enumerate(body.items):
        key = item.document_id or (str(uuid.uuid4()) if named else shared)
        out.setdefault(key, []).append(index)
    return out


def appended(body: RetainBody) -> list[str]:
    """The documents the body appends to (their memories are numbered after the ones they have)."""
    return sorted({doc for doc, indexes in documents(body).items()
                   if any(body.items[i].update_mode == "append" for i in indexes)})


def placements(
    bank_id: str, body: RetainBody, existing: Mapping[str, Sequence[str]]
) -> tuple[list[tuple[int, str, int]], list[str]]:
    """Where each memory goes, in the order they are stored, each document's together: (item index,
    document id, place); and the documents replaced whole (every other document is appended to).

    :param existing: appended document id -> the ids its memories have now (their count is where the
        new ones start).
    """
    where: list[tuple[int, str, int]] = []
    replaced: list[str] = []
    for document_id, indexes in documents(body).items():
        append = any(body.items[i].update_mode == "append" for i in indexes)
        start = len(existing.get(document_id, ())) if append else 0
        where.extend((index, document_id, place) for place, index in enumerate(indexes, start=start))
        if not append:
            replaced.append(document_id)
    return where, replaced


def item_tags(body: RetainBody, index: int) -> tuple[str, ...]:
    """The tags of item ``index``'s memory: its own, then the request's ``document_tags``."""
    given = [*(body.items[index].tags or []), *(t for t in body.document_tags or [] if t)]
    return tuple(dict.fromkeys(t.strip() for t in given if t.strip()))


def build_memory(bank_id: str, body: RetainBody, index: int, document_id: str, place: int, now: datetime) -> Memory:
    """The memory of item ``index``, the ``place``-th of its document."""
    item = body.items[index]
    when = item_date(item, index, now)
    content = item_text(item, index)
    fields: dict[str, Any] = dict(
        # the item is the memory's source chunk too, as upstream keeps a document's text in chunks
        id=memory_id(bank_id, document_id, place), text=content, chunk=content, type="world", occurred_start=when,
        occurred_end=when, mentioned_at=when, context=item.context, document_id=document_id,
        metadata=dict(item.metadata or {}),
        tags=item_tags(body, index),
        entities=item_entities(item),
        position=place,
    )
    if not fields["text"].strip():
        raise RetainError(None, f"items.{index}.content", "must not be empty")
    try:
        return Memory(**fields)
    except RetainError as exc:
        raise RetainError(None, f"items.{index}.{exc.field}", exc.why) from None


def build_memories(
    bank_id: str, body: RetainBody, existing: Mapping[str, Sequence[str]], now: datetime | None = None
) -> tuple[list[Memory], list[str]]:
    """The memories to store and the documents they replace whole (see :func:`placements`).

    :param bank_id: the bank.
    :param body: the validated request.
    :param existing: appended document id -> the ids its memories have now, in document order.
    :param now: the time an item without a timestamp gets.
    """
    now = now or datetime.now(UTC)
    where, replaced = placements(bank_id, body, existing)
    return [build_memory(bank_id, body, index, document_id, place, now)
            for index, document_id, place in where], replaced
