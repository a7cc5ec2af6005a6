"""Fact extraction: a retain item's content goes to the configured chat model, which returns separate facts.

Upstream Hindsight's retain does this for every item: content longer than ``RETAIN_CHUNK_SIZE`` is
split, each chunk is one call (all of a batch's chunks at once, at most
``RETAIN_LLM_MAX_CONCURRENT`` in flight per provider and model across the process), a reply that
does not fit gets one repair request, and the facts come back per item in chunk order, their causal
links renumbered to the item's list. Any chunk that fails fails the whole batch: a half-extracted
item would be stored as if it were complete. :func:`to_memories` turns an item's facts into the
memories retain writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import reduce
from operator import add
from typing import TYPE_CHECKING

from ..http import run_all, shared_limit
from ..llm.select import create_llm, operation_settings, provider_name
from ..llm.structured import Outcome, ask_checked
from ..llm.types import PromptBlock, Usage
from ..types import Memory
from ._extract_prompt import (
    extraction_request,
    focus_block,
    item_block,
    reply_schema,
    system_blocks,
    system_prompt,
    user_message,
)
from ._extract_reply import Fact, Reading, read_facts, unique_names
from .chunking import chunk_text
from .options import ExtractionOptions, extraction_options

if TYPE_CHECKING:
    from ..plugins import PluginManager
    from ..protocols import LLMProvider
    from ..settings import Settings

__all__ = ["BatchExtraction", "Extraction", "ExtractionOptions", "Fact", "RetainItem", "create_retain_llm", "extract",
           "extract_batch", "extraction_options", "has_retain_model", "prompt_blocks", "reply_schema",
           "retain_llm_settings", "to_memories"]


@dataclass(frozen=True)
class RetainItem:
    """What extraction needs of one retain item, and what its memories keep of it.

    :param content: the text to extract facts from.
    :param timestamp: when it was written or said: relative dates resolve against it, and it is every
        fact's ``mentioned_at``; naive means UTC.
    """

    content: str
    timestamp: datetime | None = None
    context: str | None = None
    document_id: str | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: entities the caller names for the whole item; every fact gets them too
    entities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Extraction:
    """One item's facts in order (``caused_by`` indexes this tuple), the chunks they came from, the cost."""

    facts: tuple[Fact, ...]
    chunks: tuple[str, ...]
    usage: Usage
    #: model calls made, repairs included
    calls: int


@dataclass(frozen=True)
class BatchExtraction:
    """Every item's extraction, in the order the items were given."""

    items: tuple[Extraction, ...]

    @property
    def usage(self) -> Usage:
        """Tokens of every call, in upstream's ``usage`` fields (:meth:`Usage.as_json`)."""
        return reduce(add, (item.usage for item in self.items), Usage())

    @property
    def calls(self) -> int:
        """Model calls of every item."""
        return sum(item.calls for item in self.items)


def retain_llm_settings(settings: Settings) -> Settings:
    """The settings retain's chat model is built from: ``RETAIN_LLM_*`` over ``LLM_*``.

    :param settings: core settings.
    """
    return operation_settings(settings, "retain")


def has_retain_model(settings: Settings) -> bool:
    """Say whether a chat model is configured for retain; without one, retain stores items verbatim.

    :param settings: core settings.
    """
    return provider_name(retain_llm_settings(settings)) is not None


def create_retain_llm(settings: Settings, plugins: PluginManager) -> LLMProvider:
    """Build retain's chat model.

    :param settings: core settings.
    :param plugins: the plugin manager holding the ``llm`` providers.
    :raises LLMNotConfigured: when there is none (see :func:`has_retain_model`) or it cannot be used.
    """
    return create_llm(retain_llm_settings(settings), plugins, "retain")


async def extract(llm: LLMProvider, settings: Settings, item: RetainItem,
                  options: ExtractionOptions | None = None) -> Extraction:
    """Extract the facts of one item, its chunks concurrently.

    :param llm: retain's chat model (:func:`create_retain_llm`).
    :param settings: core settings (the ``RETAIN_*`` ones shape the request).
    :param item: the item.
    :param options: what shapes the request (a bank's); default, the settings' own.
    :raises LLMError: a call failed after its retries; ``LLMTimeout`` when it timed out, ``LLMOutputError``
        when a reply was unusable even after its repair.
    """
    return (await extract_batch(llm, settings, [item], options)).items[0]


async def extract_batch(llm: LLMProvider, settings: Settings, items: Sequence[RetainItem],
                        options: ExtractionOptions | None = None) -> BatchExtraction:
    """Extract the facts of every item, all their chunks concurrently; the first failure fails the batch.

    :param llm: retain's chat model (:func:`create_retain_llm`).
    :param settings: core settings (the model, its limits, the reply's token limit).
    :param items: the items.
    :param options: mode, instructions, causal links, chunk size and mission (a bank's,
        :func:`~.options.extraction_options`); default, the settings' own.
    :raises LLMError: as :func:`extract`; the other calls still running are cancelled.
    """
    shaped = options if options is not None else extraction_options(settings)
    model = retain_llm_settings(settings)
    limit = shared_limit(f"retain:{llm.name}:{model.llm_model or ''}", model.llm_max_concurrent)
    causal = shaped.causal_links
    schema = reply_schema(causal)
    system = system_prompt(shaped.mode, shaped.custom_instructions, causal)
    chunked = [chunk_text(item.content, shaped.chunk_size) for item in items]
    stamps = [_aware(item.timestamp) for item in items]

    async def one(number: int, chunk: int) -> Outcome[Reading]:
        item, chunks, stamp = items[number], chunked[number], stamps[number]
        message = user_message(chunks[chunk], chunk=chunk, chunks=len(chunks), timestamp=stamp,
                               context=item.context, metadata=item.metadata, mission=shaped.mission)
        request = extraction_request(system, message, schema, settings.retain_max_completion_tokens)
        zone = stamp.tzinfo if stamp else None

        async with limit:
            return await ask_checked(llm.complete, request,
                                     lambda reply: read_facts(reply, schema, causal=causal, zone=zone, chunk=chunk))

    jobs = [(number, chunk) for number, chunks in enumerate(chunked) for chunk in range(len(chunks))]
    outcomes = dict(zip(jobs, await run_all(one(number, chunk) for number, chunk in jobs), strict=True))
    return BatchExtraction(tuple(
        _assemble(chunks, [outcomes[(number, chunk)] for chunk in range(len(chunks))])
        for number, chunks in enumerate(chunked)))


def prompt_blocks(options: ExtractionOptions) -> tuple[list[PromptBlock], list[PromptBlock]]:
    """The parts of the system prompt and of the user's message one chunk's extraction sends under
    ``options``, the item's values as placeholders (``{content}``, ``{chunk}``, ``{chunks}``, ``{timestamp}``,
    ``{context}``); the reply must fit ``reply_schema(options.causal_links)``.

    :param options: what shapes the request.
    """
    system = system_blocks(options.mode, options.custom_instructions, options.causal_links)
    item = item_block("{content}", position="{chunk} of {chunks}", when="{timestamp}", context="{context}",
                      metadata={})
    return system, [focus_block(options.mission), item]


def _assemble(chunks: Sequence[str], outcomes: Sequence[Outcome[Reading]]) -> Extraction:
    """An item's facts in chunk order, each chunk's causal links moved past the facts of the chunks before it."""
    facts: list[Fact] = []
    for outcome in outcomes:
        offset = len(facts)
        facts += [replace(f, caused_by=tuple(offset + c for c in f.caused_by)) for f in outcome.value.facts]
    usage = reduce(add, (o.usage for o in outcomes), Usage())
    return Extraction(tuple(facts), tuple(chunks), usage, sum(o.calls for o in outcomes))


def _aware(stamp: datetime | None) -> datetime | None:
    return stamp.replace(tzinfo=UTC) if stamp is not None and stamp.tzinfo is None else stamp


def to_memories(item: RetainItem, extraction: Extraction, ids: Sequence[str],
                first_position: int | None = None) -> list[Memory]:
    """The memories retain writes for an item's facts: one per fact, with the item's document, context,
    tags and metadata, its timestamp as ``mentioned_at``, and each fact's causes as causal links.

    :param item: the item.
    :param extraction: its facts.
    :param ids: one memory id per fact, in order.
    :param first_position: the first fact's place in its document (the others follow it).
    :raises ValueError: when ``ids`` does not have one id per fact.
    :raises RetainError: a memory the store cannot hold (text and context over the indexed limit).
    """
    if len(ids) != len(extraction.facts):
        raise ValueError(f"{len(extraction.facts)} facts need as many ids, got {len(ids)}")
    # a fact lists what caused it; a memory lists what it causes
    causes: list[list[str]] = [[] for _ in ids]
    for number, fact in enumerate(extraction.facts):
        for cause in fact.caused_by:
            causes[cause].append(ids[number])
    return [Memory(
        id=ids[number], text=fact.text, type=fact.fact_type, occurred_start=fact.occurred_start,
        occurred_end=fact.occurred_end, mentioned_at=_aware(item.timestamp), context=item.context,
        entities=unique_names((*fact.entities, *item.entities)),
        tags=item.tags, chunk=extraction.chunks[fact.chunk], document_id=item.document_id,
        metadata=dict(item.metadata), causes=tuple(causes[number]),
        position=None if first_position is None else first_position + number,
    ) for number, fact in enumerate(extraction.facts)]
