"""Reflect route: upstream Hindsight 1.1.0's ``POST /v1/default/banks/{bank_id}/reflect``, one recall and one answer.

The request body takes every field of upstream's ReflectRequest. Those that steer parts of upstream's
agent this project does not have (directives, mental models, the observation search tool) are
accepted and change nothing; ``tag_groups`` is refused as recall refuses it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from pydantic import Field, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine import Engine
from ..engine.audit import PERIODS
from ..errors import QueryTooLong
from ..llm.errors import LLMError, LLMNotConfigured, LLMTimeout
from ..llm.types import ChatRequest, Message
from ..reflect import reflector_for
from ..types import Budget, FactType, TagsMatch
from ._params import bounded_int
from .base import bank_of, endpoint, engine_of, existing_bank, parse_body, text_query
from .errors import ServiceError
from .schemas import UNSUPPORTED, _Body
from .wire import answer

#: the most tokens a reply may be asked for (no model writes more; a larger number is a mistake)
MAX_REPLY_TOKENS = 1_000_000


class FactsInclude(_Body):
    """``include.facts: {}`` returns the cited memories as ``based_on``."""


class ToolCallsInclude(_Body):
    output: bool = True


class ReflectInclude(_Body):
    facts: FactsInclude | None = None
    tool_calls: ToolCallsInclude | None = None


class ReflectBody(_Body):
    """``POST /v1/default/banks/{bank_id}/reflect`` (upstream's ReflectRequest)."""

    query: str
    budget: Budget = Budget.LOW
    context: str | None = None
    max_tokens: int | None = Field(4096, ge=1, le=MAX_REPLY_TOKENS)
    include: ReflectInclude | None = Field(default_factory=ReflectInclude)
    response_schema: dict[str, Any] | None = None
    tags: list[str] | None = None
    tags_match: TagsMatch = TagsMatch.ANY
    tag_groups: list[dict[str, Any]] | None = None
    fact_types: list[FactType] | None = Field(None, min_length=1)
    # accepted, no effect: upstream's agent loop reads them (directives, mental models, observation search)
    apply_all_directives: bool | None = None
    exclude_mental_models: bool | None = None
    exclude_mental_model_ids: list[str] | None = None
    reflect_search_observations_max_tokens: int | None = Field(None, ge=1)
    reflect_search_observations_include_entities: bool | None = None

    @field_validator("query", "context")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value

    @model_validator(mode="after")
    def _has_question(self) -> ReflectBody:
        if not self.query.strip() and not (self.context or "").strip():
            raise ValueError("'query' must not be empty or whitespace-only")
        return self


@endpoint
async def reflect(request: Request) -> Response:
    """Recall with the request's budget and filters, then ask the configured chat model (501 when there is none)."""
    bank_id = bank_of(request)
    return answer(request, "ReflectResponse", await reflection(engine_of(request), bank_id, await request.body()))


async def reflection(engine: Engine, bank_id: str, raw: bytes | str) -> dict[str, Any]:
    """The answer to the reflect body ``raw`` (JSON, read only once a chat model is configured); the MCP
    tool calls this too."""
    reflector = reflector_for(engine)
    try:
        reflector.llm()
        body: ReflectBody = parse_body(raw, ReflectBody)
        if body.tag_groups is not None:
            raise ServiceError(400, "unsupported_field", f"tag_groups: {UNSUPPORTED['tag_groups']}")
        allowed = engine.settings.recall_max_query_tokens
        question = f"{body.query}\n\nAdditional context: {body.context}" if body.context else body.query
        if allowed and engine.tokens.count(question) > allowed:
            raise QueryTooLong(engine.tokens.count(question), allowed)
        include = body.include or ReflectInclude()
        # no recall admission slot: it would be held for the model's seconds; the engine bounds the recall
        result = await reflector.reflect(
            bank_id, body.query, budget=body.budget.value, context=body.context,
            max_tokens=body.max_tokens or 4096, types=[t.value for t in body.fact_types or ()] or None,
            tags=body.tags, tags_match=body.tags_match.value, response_schema=body.response_schema,
            include_facts=include.facts is not None, include_trace=include.tool_calls is not None,
            trace_output=include.tool_calls.output if include.tool_calls else True,
        )
    except LLMError as exc:
        raise ServiceError(exc.status, exc.code, str(exc)) from None
    return result


#: the reply a probe asks for: a word is enough to know the model answers
PROBE = ChatRequest(system="Reply with the single word: ok", messages=[Message("user", "ok?")], max_tokens=5)


def _probe_status(exc: LLMError) -> str:
    """Upstream's name for why a probe failed (never the provider, model, endpoint or raw error)."""
    if isinstance(exc, LLMNotConfigured):
        return "not_configured"
    if isinstance(exc, LLMTimeout):
        return "timeout"
    return "auth_failed" if exc.answered in (401, 403) else "unreachable"


@endpoint
async def health_llm(request: Request) -> Response:
    """Probe the chat model the bank's reflect uses with one minimal call (retain and consolidation use
    none here, so reflect is the one operation listed). 404 for an unknown bank."""
    bank_id = await existing_bank(request)
    engine = engine_of(request)
    began = time.perf_counter()
    try:
        await reflector_for(engine).llm().complete(PROBE)
    except LLMError as exc:
        health = {"operation": "reflect", "ok": False, "status": _probe_status(exc), "latency_ms": None}
    else:
        health = {"operation": "reflect", "ok": True, "status": "connected",
                  "latency_ms": round((time.perf_counter() - began) * 1000, 1)}
    return answer(request, "BankLlmHealthResponse", {"bank_id": bank_id, "operations": [health]})


@endpoint
async def llm_requests(request: Request) -> Response:
    """Upstream's trace of model calls: none are traced here (``llm_trace`` is off), so none are listed."""
    limit, offset = bounded_int(request, "limit", 50, minimum=1, maximum=500), bounded_int(request, "offset", 0)
    bank_id = await existing_bank(request)
    return answer(request, "LLMRequestListResponse", {"bank_id": bank_id, "total": 0, "limit": limit,
                                                      "offset": offset, "items": []})


@endpoint
async def llm_request_stats(request: Request) -> Response:
    """Counts of traced model calls per day over ``period`` (``1d``, ``7d``, ``30d``): none."""
    period = text_query(request, "period") or "7d"
    period = period if period in PERIODS else "7d"
    bank_id = await existing_bank(request)
    start = datetime.now(UTC) - PERIODS[period]
    return answer(request, "LLMRequestStatsResponse", {"bank_id": bank_id, "period": period, "trunc": "day",
                                                       "start": start.isoformat(), "buckets": []})


def routes(banks_path: str) -> list[Route]:
    """Reflect, the probe of its model, and the (empty) trace of model calls."""
    return [Route(f"{banks_path}/reflect", reflect, methods=["POST"]),
            Route(f"{banks_path}/health/llm", health_llm, methods=["POST"]),
            Route(f"{banks_path}/llm-requests", llm_requests, methods=["GET"]),
            Route(f"{banks_path}/llm-requests/stats", llm_request_stats, methods=["GET"])]
