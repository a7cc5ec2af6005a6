"""Frozen value types that flow between the stages of recall and retain."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

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
