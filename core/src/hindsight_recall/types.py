"""Frozen value types that flow between the stages of recall and retain."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from . import limits
from .errors import RetainError


class FactType(str, Enum):
    """The three kinds of memory a bank holds."""

    WORLD = "world"
    EXPERIENCE = "experience"
    OBSERVATION = "observation"


FACT_TYPES: tuple[str, ...] = tuple(t.value for t in FactType)


class Budget(str, Enum):
    """How hard recall searches: per-arm row limits grow with the level."""

    LOW = "low"
    MID = "mid"
    HIGH = "high"


class TagsMatch(str, Enum):
    """How request tags filter memories."""

    ANY = "any"
    ALL = "all"
    ANY_STRICT = "any_strict"
    ALL_STRICT = "all_strict"
    EXACT = "exact"


@dataclass(frozen=True)
class Memory:
    """A ready-made fact handed to ``retain``. ``id`` is the caller's id, unique within its bank."""

    id: str
    text: str
    type: str = "world"
    occurred_start: datetime | None = None
    occurred_end: datetime | None = None
    mentioned_at: datetime | None = None
    context: str | None = None
    entities: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    chunk: str | None = None
    document_id: str | None = None
    proof_count: int = 1
    metadata: Mapping[str, str] = field(default_factory=dict)
    causes: tuple[str, ...] = ()
    source_ids: tuple[str, ...] = ()
    #: place within its document (``document_id``, else its chunk); None: the order it was given in
    position: int | None = None

    def __post_init__(self) -> None:
        check_memory(self)


def check_memory(memory: Memory) -> None:
    """Raise :class:`RetainError` when a field would fail in PostgreSQL (see :mod:`.limits`)."""
    problems: list[tuple[str, str | None]] = [("id", limits.key_problem(memory.id))]
    for name in ("text", "context", "chunk"):
        value = getattr(memory, name)
        problems.append((name, None if value is None else limits.unicode_problem(value)))
    indexed = len(memory.text.encode("utf-8", "replace")) + len((memory.context or "").encode("utf-8", "replace"))
    if indexed > limits.MAX_INDEXED_TEXT_BYTES:
        problems.append(("text", f"text and context are {indexed} bytes long (UTF-8); the limit is "
                                 f"{limits.MAX_INDEXED_TEXT_BYTES} bytes, which keeps the text-search entry under "
                                 "PostgreSQL's 1 MB tsvector limit"))
    if memory.document_id is not None:
        problems.append(("document_id", limits.key_problem(memory.document_id)))
    for name in ("entities", "tags", "causes", "source_ids"):
        problems.extend((f"{name}[{i}]", limits.key_problem(v)) for i, v in enumerate(getattr(memory, name)))
    for name in ("occurred_start", "occurred_end", "mentioned_at"):
        value = getattr(memory, name)
        problems.append((name, None if value is None else limits.date_problem(value)))
    problems.append(("proof_count", limits.int32_problem(memory.proof_count)))
    problems.append(("position", None if memory.position is None else limits.place_problem(memory.position)))
    problems.extend(("metadata", limits.unicode_problem(k + v)) for k, v in memory.metadata.items())
    for name, problem in problems:
        if problem:
            raise RetainError(None, name, problem)


@dataclass(frozen=True)
class MemoryRow:
    """The ``memory_units`` columns an arm returns for one memory."""

    id: uuid.UUID
    external_id: str
    text: str
    fact_type: str
    context: str | None = None
    occurred_start: datetime | None = None
    occurred_end: datetime | None = None
    mentioned_at: datetime | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, str] | None = None
    document_id: str | None = None
    chunk_id: str | None = None
    proof_count: int = 1
    source_memory_ids: tuple[uuid.UUID, ...] = ()
    #: tokens of ``text``, counted at retain (``None`` for rows written before the count was stored)
    token_count: int | None = None
    #: False for a row an arm read with :data:`~hindsight_recall.store.schema.ARM_COLUMNS` only: its
    #: ``text``, ``context``, ``tags``, ``metadata`` and ``document_id`` are not filled in yet
    complete: bool = True

    @property
    def date(self) -> datetime | None:
        """The date recency and temporal bucketing use: start, else mention, else end."""
        return self.occurred_start or self.mentioned_at or self.occurred_end


@dataclass(frozen=True)
class Hit:
    """One row surfaced by one arm, with that arm's score (higher is better)."""

    row: MemoryRow
    score: float
    #: Arm-specific extras, e.g. ``temporal_proximity`` for the temporal arm.
    extras: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ArmResult:
    """What one retriever returned for one fact type, with its timing."""

    arm: str
    fact_type: str
    hits: Sequence[Hit]
    duration_seconds: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LengthPrior:
    """How much a memory's length lowers its keyword score in one bank: the keyword score is divided by
    ``1 − b + b × length / mean`` (:mod:`hindsight_recall.recall.length_prior` chooses ``b``)."""

    #: the memories the statistics cover (the bank's, in the fact types searched)
    memories: int = 0
    #: their mean length (distinct lexemes of ``search_vector``)
    mean: float = 0.0
    #: the coefficient of variation of their lengths (standard deviation / mean)
    spread: float = 0.0
    #: the weight of a memory's length; 0 leaves the scores as they are
    b: float = 0.0


@dataclass(frozen=True)
class TimeWindow:
    """An inclusive date window [start, end] that drives the temporal arm."""

    start: datetime
    end: datetime


@dataclass
class Candidate:
    """A fused candidate travelling through rerank, scoring and packing."""

    row: MemoryRow
    rrf_score: float
    rrf_rank: int = 0
    source_ranks: dict[str, int] = field(default_factory=dict)
    #: score fusion: what each arm added to ``rrf_score`` (its weight × its min-max scaled score)
    source_scores: dict[str, float] = field(default_factory=dict)
    #: what the strategy boosts add to ``rrf_score`` when the pool is capped and, without a model,
    #: ordered (fusion.set_boosts); on the fused score's scale
    boost: float = 0.0
    semantic: float | None = None
    keyword: float | None = None
    temporal_proximity: float | None = None
    #: what the context stage added to the fused score (neighbours and the document's best)
    context: float | None = None
    cross_encoder_raw: float | None = None
    cross_encoder: float = 0.0
    reranker_score: float | None = None
    recency: float = 0.5
    temporal: float = 0.5
    proof: float = 0.5
    #: inside the period the question names (recall/scoring.favour_period)
    period: bool = False
    final: float = 0.0


@dataclass(frozen=True)
class Placement:
    """Where a bank's rows are indexed: a slot of its own, the shared indexes, or none (exact scans)."""

    slot: int | None = None
    shared: bool = False

    def predicate(self, alias: str = "") -> str:
        """The row predicate a statement ANDs in so the planner can choose the bank's index; empty
        for a bank in no index. It holds for every row of the bank, with or without the index."""
        prefix = f"{alias}." if alias else ""
        if self.slot is not None:
            return f"{prefix}ann_slot = {int(self.slot)}"
        return f"{prefix}ann" if self.shared else ""


# -- chat models: what core hands a chat model and what it gets back, provider-neutral ---------------

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One turn of the conversation after the system prompt."""

    role: Role
    content: str


@dataclass(frozen=True)
class ChatRequest:
    """One completion to ask for.

    :param system: the system prompt.
    :param messages: the turns, user first.
    :param max_tokens: the most tokens the reply may have.
    :param json_schema: when set, the reply must be one JSON object fitting this JSON Schema; the
        provider asks its server for JSON in whatever way the server supports.
    :param schema_name: a short name for the schema, for servers that want one.
    :param temperature: sampling temperature (``None``: the server's default).
    """

    system: str
    messages: Sequence[Message]
    max_tokens: int
    json_schema: Mapping[str, Any] | None = None
    schema_name: str = "answer"
    temperature: float | None = None


@dataclass(frozen=True)
class PromptBlock:
    """One part of a prompt, for showing it before it is sent: the server's own wording, or a setting's
    value (``from_setting``: a mission, custom instructions, a bank's name).

    :param heading: a short title for the part.
    :param field: the setting it shows or depends on (``retain_mission`` ...), if any.
    :param active: whether the prompt holds it now (a part the settings leave out is inactive).
    """

    text: str
    heading: str = ""
    field: str = ""
    from_setting: bool = False
    active: bool = True


def prompt_text(blocks: Sequence[PromptBlock], separator: str = "\n\n") -> str:
    """The prompt ``blocks`` make: the active ones' text, in order, joined by ``separator``."""
    return separator.join(block.text for block in blocks if block.active)


@dataclass(frozen=True)
class Usage:
    """Tokens one or more calls consumed, in upstream Hindsight's ``TokenUsage`` fields."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    thoughts_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cached_tokens + other.cached_tokens, self.thoughts_tokens + other.thoughts_tokens)

    def as_json(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens, "cached_tokens": self.cached_tokens,
                "thoughts_tokens": self.thoughts_tokens}


@dataclass(frozen=True)
class ChatReply:
    """The model's reply: its text (JSON text when a schema was asked for) and what it cost."""

    text: str
    usage: Usage = field(default_factory=Usage)
    #: the model the server says answered, when it says
    model: str | None = None
    #: why generation stopped, as the server says it (``stop``, ``length``, ``max_tokens`` ...)
    finish_reason: str | None = None


def as_int(value: Any) -> int:
    """A token count from a usage block; anything but a non-negative integer counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
