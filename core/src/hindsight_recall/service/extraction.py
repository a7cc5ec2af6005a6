"""Retain's extraction looked at before it stores anything: a dry run of it, and the prompts the model gets.

``POST …/memories/dry-run-extract`` sends a text to retain's model with the bank's settings, overridden by
the body's ``retain_*`` fields, and answers the facts and chunks as upstream's ``DryRunExtractionResult``;
nothing is stored and no bank is created. ``POST …/prompts/preview`` shows the messages a retain or a
reflect of the bank would send, each part marked as the server's wording (``builtin``) or a setting's
value (``config``); it calls no model, so it answers with none configured.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine.facts import Extraction, RetainItem, prompt_blocks, reply_schema
from ..llm.errors import LLMError, LLMNotConfigured
from ..llm.types import PromptBlock
from ..reflect import prompt as reflect_prompt
from ..retain.options import FIELDS
from .base import bank_of, body_of, endpoint, engine_of
from .errors import ServiceError
from .schemas import UNSUPPORTED, _Body
from .wire import answer


class DryRunBody(_Body):
    """Upstream's ``DryRunExtractRequest``: the text, its context and date, and overrides for this call."""

    content: str | list[dict[str, Any]]
    context: str = ""
    timestamp: datetime | None = None
    agent_name: str | None = None
    retain_mission: str | None = None
    retain_extraction_mode: str | None = None
    retain_custom_instructions: str | None = None
    retain_extract_causal_links: bool | None = None
    retain_chunk_size: int | None = None
    entity_labels: list[dict[str, Any]] | None = None
    entities_allow_free_form: bool | None = None
    llm_output_language: str | None = None
    strategy: str | None = None


class PromptPreviewBody(_Body):
    """Upstream's ``PromptPreviewRequest``."""

    operation: Literal["retain", "consolidation", "reflect"] = "retain"
    strategy: str | None = None


#: dry-run fields that would change the facts in a way this server cannot: refused when set (to a value
#: other than the one that changes nothing)
NOT_HONOURED = {
    "entity_labels": "hindsight-recall extracts free-form entities only; it has no entity labels",
    "entities_allow_free_form": "hindsight-recall extracts free-form entities only (true is the only choice)",
    "llm_output_language": "the model writes every fact in the language of the text; no other language can be asked",
    "agent_name": "the prompt names no narrator; describe the speaker in context instead, as upstream advises",
}
CONSOLIDATION = ("this server does not consolidate memories into observations, so no consolidation prompt is "
                 "ever sent; retain observations directly with POST /v1/default/memories/import")


def _refuse_unhonoured(body: DryRunBody) -> None:
    given = {"entity_labels": bool(body.entity_labels), "entities_allow_free_form": body.entities_allow_free_form is
             False, "llm_output_language": body.llm_output_language is not None, "agent_name": body.agent_name
             is not None}
    for name, refused in given.items():
        if refused:
            raise ServiceError(400, "unsupported_field", f"{name}: {NOT_HONOURED[name]}")
    if body.strategy is not None:
        raise ServiceError(400, "unsupported_field", f"strategy: {UNSUPPORTED['strategy']}")


def _text(content: str | list[dict[str, Any]]) -> str:
    """The content as text: a string, or its text blocks joined (nothing else can be read without a vision model)."""
    if isinstance(content, str):
        text = content
    else:
        parts = []
        for number, block in enumerate(content):
            if block.get("type") != "text" or not isinstance(block.get("text"), str):
                raise ServiceError(400, "unsupported_content", f"content.{number}: only text blocks can be "
                                   f"extracted (got type {block.get('type')!r}); hindsight-recall runs no vision model")
            parts.append(block["text"])
        text = "\n".join(parts)
    if not text.strip():
        raise ServiceError(400, "bad_request", "content: must not be empty")
    return text


def _result(extraction: Extraction) -> dict[str, Any]:
    """Upstream's ``DryRunExtractionResult``: every fact with its chunk, each chunk with its count of facts."""
    counts = [0] * len(extraction.chunks)
    for fact in extraction.facts:
        counts[fact.chunk] += 1
    return {
        "facts": [{"text": f.text, "fact_type": f.fact_type, "entities": list(f.entities), "chunk_index": f.chunk,
                   "occurred_start": f.occurred_start.isoformat() if f.occurred_start else None,
                   "occurred_end": f.occurred_end.isoformat() if f.occurred_end else None}
                  for f in extraction.facts],
        "chunks": [{"text": text, "fact_count": count} for text, count in zip(extraction.chunks, counts, strict=True)],
        "usage": extraction.usage.as_json(),
    }


@endpoint
async def dry_run_extract(request: Request) -> Response:
    """Extract the facts of ``content`` as the bank's retain would, with the body's ``retain_*`` over the bank's
    settings; nothing is stored. 501 without a retain model; the model's failures as retain's."""
    bank_id = bank_of(request)
    engine = engine_of(request)
    body: DryRunBody = await body_of(request, DryRunBody)
    _refuse_unhonoured(body)
    text = _text(body.content)
    given = body.model_dump(include=set(FIELDS), exclude_none=True)
    options = await engine.facts.options(bank_id, given)
    if not engine.facts.configured:
        raise LLMNotConfigured("dry-run extraction (retain's model)")
    stamp = body.timestamp or datetime.now(UTC)
    item = RetainItem(text, timestamp=stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC),
                      context=body.context or None)
    try:
        batch = await engine.facts.extract([item], options)
    except LLMError as exc:
        raise ServiceError(exc.status, exc.code, f"fact extraction failed: {exc}") from None
    return answer(request, "DryRunExtractionResult", _result(batch.items[0]))


def _block(block: PromptBlock, settings: dict[str, Any]) -> dict[str, Any]:
    """Upstream's ``PromptBlockModel``: a setting's block is ``config`` and editable (per bank), with its value."""
    value = settings.get(block.field)
    choices = ["concise", "verbose", "custom"] if block.field == "retain_extraction_mode" else None
    kind = "boolean" if isinstance(value, bool) else "choice" if choices else "text"
    return {"text": block.text, "source": "config" if block.from_setting else "builtin", "kind": kind,
            "field": block.field, "heading": block.heading, "active": block.active,
            "editable": block.field in settings, "choices": choices,
            "value": None if value is None else _shown(value)}


def _shown(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _run_setting(field: str, value: Any, editable: bool) -> dict[str, Any]:
    return {"field": field, "kind": "boolean" if isinstance(value, bool) else "text",
            "value": None if value is None else _shown(value), "editable": editable}


async def _retain_preview(request: Request, bank_id: str) -> dict[str, Any]:
    engine = engine_of(request)
    options = await engine.facts.options(bank_id)
    settings = options.as_settings()
    system, user = prompt_blocks(options)
    provider, model = engine.facts.model_names()
    return {
        "messages": [{"role": "system", "blocks": [_block(b, settings) for b in system]},
                     {"role": "user", "blocks": [_block(b, settings) for b in user]}],
        "response_schema": reply_schema(options.causal_links),
        "run_settings": [
            _run_setting("retain_chunk_size", options.chunk_size, True),
            _run_setting("retain_max_completion_tokens", engine.settings.retain_max_completion_tokens, False),
            _run_setting("retain_llm_provider", provider, False),
            _run_setting("retain_llm_model", model, False),
        ],
        "strategies": [], "strategy": None, "skipped_reason": None,
    }


async def _reflect_preview(request: Request, bank_id: str) -> dict[str, Any]:
    profile = await engine_of(request).directives.reflect_profile(bank_id)
    settings = {"name": profile["name"], "mission": profile["mission"] or None,
                "disposition": ", ".join(f"{k} {v}" for k, v in profile["disposition"].items()),
                "directives": ", ".join(rule["name"] for rule in profile["directives"]) or None}
    system = [_block(b, settings) for b in reflect_prompt.system_blocks(profile, False)]
    user = {"text": reflect_prompt.USER_TEMPLATE, "source": "builtin", "kind": "text", "heading": "Question",
            "active": True}
    return {"messages": [{"role": "system", "blocks": system}, {"role": "user", "blocks": [user]}],
            "response_schema": reflect_prompt.reply_schema(None), "run_settings": [], "strategies": [],
            "strategy": None, "skipped_reason": None}


@endpoint
async def prompt_preview(request: Request) -> Response:
    """The prompt an operation of the bank would send: ``retain`` (the bank's extraction settings; an unknown
    bank gets the server's, as its first retain would), ``reflect`` (404 for an unknown bank, as reflect), or
    ``consolidation``, which this server never runs (``skipped_reason``). No model is called."""
    bank_id = bank_of(request)
    body: PromptPreviewBody = await body_of(request, PromptPreviewBody)
    if body.strategy is not None:
        raise ServiceError(400, "unsupported_field", f"strategy: {UNSUPPORTED['strategy']}")
    if body.operation == "retain":
        preview = await _retain_preview(request, bank_id)
    elif body.operation == "reflect":
        preview = await _reflect_preview(request, bank_id)
    else:
        preview = {"messages": [], "response_schema": None, "run_settings": [], "strategies": [], "strategy": None,
                   "skipped_reason": CONSOLIDATION}
    return answer(request, "PromptPreviewResponse", preview)


def routes(banks_path: str) -> list[Route]:
    return [Route(f"{banks_path}/memories/dry-run-extract", dry_run_extract, methods=["POST"]),
            Route(f"{banks_path}/prompts/preview", prompt_preview, methods=["POST"])]
