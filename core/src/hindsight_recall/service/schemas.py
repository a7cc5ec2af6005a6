"""Request bodies of the HTTP API: upstream Hindsight 1.1.0's fields, names and defaults.

Every model forbids unknown fields, so a misspelt option is a 422 naming it, never a silently
different answer. Fields this project cannot honour are listed in :data:`UNSUPPORTED` (refused
when set) or described in docs/service.md (accepted: they steer LLM steps that do not run here).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..types import Budget, TagsMatch


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class EntityIncludeOptions(_Body):
    max_tokens: int = 500


class ChunkIncludeOptions(_Body):
    max_tokens: int = 8192


class SourceFactsIncludeOptions(_Body):
    #: -1 = unlimited
    max_tokens: int = 4096
    max_tokens_per_observation: int = -1


class IncludeOptions(_Body):
    """What a recall adds besides its results; entities are in by default, chunks and source facts not."""

    entities: EntityIncludeOptions | None = Field(default_factory=EntityIncludeOptions)
    chunks: ChunkIncludeOptions | None = None
    source_facts: SourceFactsIncludeOptions | None = None


class MinScores(_Body):
    semantic: float | None = None
    keyword: float | None = None
    reranker: float | None = None
    final: float | None = None


class TemporalWindow(_Body):
    start: datetime
    end: datetime


class RecallBody(_Body):
    """``POST /v1/default/banks/{bank_id}/memories/recall``."""

    query: str
    types: list[str] | None = None
    prefer_observations: bool | None = None
    budget: Budget = Budget.MID
    max_tokens: int = 4096
    trace: bool = False
    query_timestamp: str | None = None
    include: IncludeOptions = Field(default_factory=IncludeOptions)
    tags: list[str] | None = None
    tags_match: TagsMatch = TagsMatch.ANY
    tag_groups: list[dict[str, Any]] | None = None
    min_scores: MinScores | None = None
    temporal_window: TemporalWindow | None = None
    # ours: keep at most this many results after packing; how the fused list is reranked
    limit: int | None = None
    reranking: Literal["cross_encoder", "rrf", "interleave"] | None = None


class EntityInput(_Body):
    text: str
    #: accepted; entities are stored by name only
    type: str | None = None


class MemoryItem(_Body):
    """One item of a retain: stored verbatim as one memory, or as its facts with a retain model."""

    content: str | list[dict[str, Any]]
    timestamp: datetime | str | None = None
    context: str | None = None
    metadata: dict[str, str] | None = None
    document_id: str | None = None
    entities: list[EntityInput] | None = None
    resolve_entities: bool = True
    tags: list[str] | None = None
    observation_scopes: str | list[list[str]] | None = None
    strategy: str | None = None
    update_mode: Literal["replace", "append"] | None = None

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_from_string(cls, value: Any) -> Any:
        """As upstream: a JSON array sent as a string is parsed; any other string is one tag."""
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                return [value]
            return parsed if isinstance(parsed, list) else [value]
        return value


class RetainBody(_Body):
    """``POST /v1/default/banks/{bank_id}/memories``."""

    items: list[MemoryItem]
    async_: bool = Field(default=False, alias="async")
    document_tags: list[str] | None = None
    operation_id: str | None = None


class DispositionTraits(_Body):
    skepticism: int = Field(3, ge=1, le=5)
    literalism: int = Field(3, ge=1, le=5)
    empathy: int = Field(3, ge=1, le=5)


class CreateBankBody(_Body):
    """``PUT /v1/default/banks/{bank_id}``: the recall toggles and retain's extraction fields are stored as the
    bank's settings (:data:`BANK_CONFIG`)."""

    name: str | None = None
    disposition: DispositionTraits | None = None
    disposition_skepticism: int | None = None
    disposition_literalism: int | None = None
    disposition_empathy: int | None = None
    mission: str | None = None
    background: str | None = None
    reflect_mission: str | None = None
    retain_mission: str | None = None
    retain_extraction_mode: str | None = None
    retain_custom_instructions: str | None = None
    retain_chunk_size: int | None = None
    retain_structured_chunk_size: int | None = None
    retain_max_attachments_per_chunk: int | None = None
    enable_observations: bool | None = None
    observations_mission: str | None = None
    enable_text_search: bool | None = None
    enable_temporal_retrieval: bool | None = None
    enable_graph_retrieval: bool | None = None
    enable_reranking: bool | None = None


#: CreateBankBody fields that become bank settings (BankSettings has the same names): the recall toggles and
#: what shapes retain's fact extraction
BANK_CONFIG = ("enable_text_search", "enable_temporal_retrieval", "enable_graph_retrieval", "enable_reranking",
               "retain_mission", "retain_extraction_mode", "retain_custom_instructions", "retain_chunk_size")


class BankConfigBody(_Body):
    """``PATCH /v1/default/banks/{bank_id}/config``: keys as field names or ``HINDSIGHT_API_*`` names."""

    updates: dict[str, Any]


class ImportBody(_Body):
    """Ours (``POST /v1/default/memories/import``): memories in the JSONL format, each with its ``bank``."""

    memories: list[dict[str, Any]]


#: request fields that would change the answer in a way this project cannot: refused when set
UNSUPPORTED = {
    "tag_groups": "compound tag groups are not supported by hindsight-recall; use tags with tags_match",
    "observation_scopes": "hindsight-recall does not consolidate observations, so observation_scopes has no "
                          "meaning here; retain observations directly with the import endpoint",
    "strategy": "hindsight-recall has no extraction strategies: retain stores items verbatim, or extracts facts "
                "with the one configured retain model",
}


class CreateAliasBody(_Body):
    """Upstream's CreateBankAliasRequest: the extra id, and whether to show the bank under it."""

    alias: str
    primary: bool = False


class SetAliasPrimaryBody(_Body):
    primary: bool


class DispositionBody(_Body):
    """``PUT /v1/default/banks/{bank_id}/profile`` (upstream's older ``update_bank_disposition``)."""

    disposition: DispositionTraits


class BackgroundBody(_Body):
    """``POST /v1/default/banks/{bank_id}/background`` (upstream's older ``add_bank_background``)."""

    content: str
    #: accepted; upstream no longer infers a disposition from the background either
    update_disposition: bool = True


class UpdateMemoryBody(_Body):
    """``PATCH /v1/default/banks/{bank_id}/memories/{memory_id}`` (upstream's ``update_memory``).

    A date or the context set to ``""`` (or a date to ``null``) clears it; an omitted field stays.
    """

    text: str | None = None
    context: str | None = None
    occurred_start: str | None = None
    occurred_end: str | None = None
    mentioned_at: str | None = None
    fact_type: Literal["world", "experience"] | None = None
    entities: list[str] | None = None
    #: accepted; entities are always matched by name, case-insensitively
    resolve_entities: bool = True
    state: Literal["valid", "invalidated"] | None = None
    reason: str | None = None
    # ours: replace the memory's tags
    tags: list[str] | None = None

    @model_validator(mode="after")
    def _an_edit(self) -> UpdateMemoryBody:
        dates = {"occurred_start", "occurred_end", "mentioned_at"} & self.model_fields_set
        edits = ("text", "context", "fact_type", "entities", "state", "tags")
        if not dates and all(getattr(self, name) is None for name in edits):
            raise ValueError("provide at least one field to update")
        return self
