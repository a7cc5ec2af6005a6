"""Upstream retain items through the chat model: each item's facts, extracted behind the engine, become its memories.

An item's facts take the places of its document one after another, the first where the item's own
memory would have gone (see :func:`~.items.placements`), so ids stay derived, not random: the
``n``-th fact of a document is always the same memory id, a re-sent document replaces its memories
and an ``append`` continues after them, as for items stored verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ..engine import Engine
from ..engine.facts import Extraction, RetainItem, to_memories
from ..errors import RetainError
from ..llm.errors import LLMError
from ..types import Memory, Usage
from .errors import ServiceError
from .items import item_date, item_entities, item_tags, item_text, memory_id
from .schemas import RetainBody


@dataclass(frozen=True)
class Extracted:
    """The facts of some of a body's items, by item index, and what asking for them cost."""

    items: Mapping[int, Extraction]
    usage: Usage


def retain_item(body: RetainBody, index: int, now: datetime) -> RetainItem:
    """What extraction reads of item ``index``: its text, date (``now`` when it gives none), context, tags,
    metadata and entities."""
    item = body.items[index]
    content = item_text(item, index)
    if not content.strip():
        raise RetainError(None, f"items.{index}.content", "must not be empty")
    return RetainItem(content, timestamp=item_date(item, index, now), context=item.context,
                      tags=item_tags(body, index), metadata=dict(item.metadata or {}),
                      entities=item_entities(item))


async def extract(engine: Engine, bank_id: str, body: RetainBody, indexes: Sequence[int], now: datetime) -> Extracted:
    """The facts of items ``indexes``, all asked for at once, shaped by the bank's settings; nothing is written.

    :raises InvalidRequest: (400) the bank's overrides cannot be used with the server's settings.
    :raises ServiceError: the model failed, timed out or answered unusably: its status and code, and a
        message saying what went wrong and that these items were not retained.
    """
    items = [retain_item(body, index, now) for index in indexes]
    options = await engine.facts.options(bank_id)
    try:
        batch = await engine.facts.extract(items, options)
    except LLMError as exc:
        raise ServiceError(exc.status, exc.code,
                           f"fact extraction failed, so the items it was for were not retained: {exc}") from None
    return Extracted(dict(zip(indexes, batch.items, strict=True)), batch.usage)


def fact_memories(bank_id: str, body: RetainBody, where: Sequence[tuple[int, str, int]], found: Extracted,
                  now: datetime) -> list[list[Memory]]:
    """Each placed item's memories (see :func:`~.items.placements`), its facts numbered on within its document.

    :param where: (item index, document id, place) of items whose facts are in ``found``, each document's
        together, its first item at the place its memories start.
    """
    following: dict[str, int] = {}
    out: list[list[Memory]] = []
    for index, document_id, place in where:
        first = following.setdefault(document_id, place)
        extraction = found.items[index]
        ids = [memory_id(bank_id, document_id, first + n) for n in range(len(extraction.facts))]
        item = replace(retain_item(body, index, now), document_id=document_id)
        try:
            out.append(to_memories(item, extraction, ids, first))
        except RetainError as exc:
            raise RetainError(None, f"items.{index}.{exc.field}", exc.why) from None
        following[document_id] = first + len(ids)
    return out
