"""Recall request validation and query normalisation."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidRequest
from ..store.banks import validate_bank_id
from ..types import FACT_TYPES, Budget, TagsMatch, TimeWindow

_NON_WORD = re.compile(r"[^\w\s]+")
_MIN_SCORE_KEYS = ("semantic", "keyword", "reranker", "final")


@dataclass(frozen=True)
class RecallRequest:
    """A validated recall request."""

    bank_id: str
    query: str
    tokens: tuple[str, ...]
    budget: Budget = Budget.MID
    max_tokens: int = 4096
    types: tuple[str, ...] = FACT_TYPES
    tags: tuple[str, ...] = ()
    tags_match: TagsMatch = TagsMatch.ANY
    query_timestamp: datetime | None = None
    temporal_window: TimeWindow | None = None
    min_scores: Mapping[str, float] = field(default_factory=dict)
    include_entities: int | None = 500
    include_chunks: int | None = None
    include_source_facts: int | None = None
    source_facts_per_observation: int = -1
    prefer_observations: bool = False
    reranking: str = "cross_encoder"
    trace: bool = False
    #: Keep at most this many results after packing; ``None`` keeps every packed result.
    limit: int | None = None


def clean_text(value: str) -> str:
    """Replace lone surrogates and invalid code points; NUL bytes become spaces."""
    value = value.encode("utf-8", "replace").decode("utf-8") if _has_surrogates(value) else value
    return value.replace("\x00", " ")


def _has_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def query_tokens(query: str) -> tuple[str, ...]:
    """Lower-case word tokens: every char that is neither word nor whitespace becomes a space."""
    return tuple(_NON_WORD.sub(" ", unicodedata.normalize("NFKC", query).lower()).split())


def parse_timestamp(value: datetime | str | None, field_name: str = "query_timestamp") -> datetime | None:
    """Accept a datetime or an ISO-8601 string (``Z`` allowed); naive values are UTC."""
    if value is None or isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidRequest(
                field_name, f"{value!r} is not ISO-8601; expected e.g. 2024-05-01T12:00:00Z", status=400
            ) from None
    else:
        raise InvalidRequest(field_name, "expected an ISO-8601 string", status=400)
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _enum(cls: Any, value: Any, field_name: str) -> Any:
    try:
        return cls(value.value if isinstance(value, cls) else str(value).strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise InvalidRequest(field_name, f"{value!r} is not one of {choices}") from None


def _types(types: Sequence[str] | None) -> tuple[str, ...]:
    if types is None:
        return FACT_TYPES
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, Sequence | Set):
        raise InvalidRequest("types", f"expected a fact type or a list of them, got {type(types).__name__}")
    out: list[str] = []
    for t in types:
        t = str(t).strip().lower()
        if t == "opinion":  # accepted and ignored
            continue
        if t not in FACT_TYPES:
            raise InvalidRequest("types", f"{t!r} is not one of {', '.join(FACT_TYPES)}")
        if t not in out:
            out.append(t)
    return tuple(out)


def _min_scores(values: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if values is not None and not isinstance(values, Mapping):
        raise InvalidRequest("min_scores", f"expected a mapping of score name to number, got {type(values).__name__}")
    for key, value in (values or {}).items():
        if key not in _MIN_SCORE_KEYS:
            raise InvalidRequest(f"min_scores.{key}", f"unknown key (choices: {', '.join(_MIN_SCORE_KEYS)})")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise InvalidRequest(f"min_scores.{key}", "must be a number")
        out[key] = float(value)
    return out


def build_request(
    bank_id: str,
    query: str,
    *,
    budget: Budget | str = "mid",
    max_tokens: int = 4096,
    types: Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    tags_match: TagsMatch | str = "any",
    query_timestamp: datetime | str | None = None,
    temporal_window: tuple[datetime | str, datetime | str] | None = None,
    min_scores: Mapping[str, float] | None = None,
    include_entities: int | None = 500,
    include_chunks: int | None = None,
    include_source_facts: int | None = None,
    source_facts_per_observation: int = -1,
    prefer_observations: bool = False,
    reranking: str = "cross_encoder",
    trace: bool = False,
    limit: int | None = None,
) -> RecallRequest:
    """Validate every field; errors name the field and say why (422, or 400 for timestamps)."""
    validate_bank_id(bank_id)
    if not isinstance(query, str):
        raise InvalidRequest("query", "must be a string")
    query = clean_text(query).strip()
    tokens = query_tokens(query)
    if not tokens:
        raise InvalidRequest("query", "is empty after normalisation; give at least one word")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidRequest("max_tokens", f"must be a positive integer, got {max_tokens!r}")
    if isinstance(tags, str):  # one tag, not its characters
        tags = [tags]
    if tags is not None and not isinstance(tags, Sequence | Set):
        raise InvalidRequest("tags", f"expected a tag or a list of tags, got {type(tags).__name__}")
    tag_list = tuple(clean_text(str(t)) for t in (tags or ()))
    window = None
    if temporal_window is not None:
        if isinstance(temporal_window, str | bytes) or not isinstance(temporal_window, Sequence) \
                or len(temporal_window) != 2:
            raise InvalidRequest("temporal_window", f"expected a (start, end) pair, got {temporal_window!r}")
        start = parse_timestamp(temporal_window[0], "temporal_window.start")
        end = parse_timestamp(temporal_window[1], "temporal_window.end")
        if start is None or end is None:
            raise InvalidRequest("temporal_window", "needs both start and end")
        if end < start:
            raise InvalidRequest("temporal_window", "end is before start")
        window = TimeWindow(start, end)
    if reranking not in ("cross_encoder", "rrf", "interleave"):
        raise InvalidRequest("reranking", f"{reranking!r} is not one of cross_encoder, rrf, interleave")
    for name, budget_tokens in (("include.entities", include_entities), ("include.chunks", include_chunks),
                                ("include.source_facts", include_source_facts)):
        if budget_tokens is not None and (isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int)
                                          or budget_tokens < 0):
            raise InvalidRequest(f"{name}.max_tokens", "must be a non-negative integer")
    if isinstance(source_facts_per_observation, bool) or not isinstance(source_facts_per_observation, int) \
            or source_facts_per_observation < -1:
        raise InvalidRequest("include.source_facts.max_tokens_per_observation", "must be -1 (unlimited) or >= 0")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidRequest("limit", f"must be a positive integer or None, got {limit!r}")
    return RecallRequest(
        bank_id=bank_id,
        query=query,
        tokens=tokens,
        budget=_enum(Budget, budget, "budget"),
        max_tokens=max_tokens,
        types=_types(types),
        tags=tag_list,
        tags_match=_enum(TagsMatch, tags_match, "tags_match"),
        query_timestamp=parse_timestamp(query_timestamp),
        temporal_window=window,
        min_scores=_min_scores(min_scores),
        include_entities=include_entities,
        include_chunks=include_chunks,
        include_source_facts=include_source_facts,
        source_facts_per_observation=source_facts_per_observation,
        prefer_observations=bool(prefer_observations),
        reranking=reranking,
        trace=bool(trace),
        limit=limit,
    )
