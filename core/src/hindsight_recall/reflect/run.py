"""Reflect: one recall, one answer from the configured chat model, citations checked against the recall.

Upstream Hindsight's reflect is an agent loop (the model calls search tools until it is done); this
one recalls once with the request's budget and filters and asks once, plus at most one repair when
the reply does not have the asked-for form. The model never sees another bank's memories: the
prompt holds only what the recall of this bank returned, and a cited id recall did not return is
dropped.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BankNotFound
from ..llm.select import create_llm
from ..llm.structured import ask_checked
from ..llm.types import ChatReply, ChatRequest, Usage
from ..store import banks, directives
from .answer import Answer, check_response_schema, read_reply
from .prompt import first_request

if TYPE_CHECKING:
    from ..plugins import PluginManager
    from ..protocols import LLMProvider
    from ..settings import Settings
    from ..store.db import Database

#: tokens of memories the prompt holds (the recall's max_tokens); reflect's own max_tokens bounds the reply
RECALL_TOKENS = 4096
#: the fields of a cited memory in ``based_on.memories`` (upstream's ReflectFact)
FACT_FIELDS = ("id", "text", "type", "context", "occurred_start", "occurred_end", "mentioned_at", "document_id",
               "chunk_id", "tags", "metadata")


class Engine(Protocol):
    """What reflect uses of an engine: its settings and plugins (the chat model), its database (the bank's
    profile and directives) and recall. :class:`hindsight_recall.engine.Engine` is one."""

    settings: Settings
    plugins: PluginManager
    db: Database

    async def recall(self, bank_id: str, query: str, **options: Any) -> dict[str, Any]:
        """Recall ``query`` from the bank, in upstream's RecallResponse shape."""
        ...


@dataclass
class Timings:
    """Where one reflect spent its time, in seconds (the benchmark reads it)."""

    recall: float = 0.0
    llm: list[float] = field(default_factory=list)
    total: float = 0.0


class Reflector:
    """Reflect over one engine; the chat model is built from the settings when first needed.

    :param engine: an open engine.
    :param llm: a provider to use instead of the one ``HINDSIGHT_API_LLM_PROVIDER`` names.
    """

    def __init__(self, engine: Engine, llm: LLMProvider | None = None) -> None:
        self.engine = engine
        self._llm = llm
        self.last = Timings()

    def llm(self) -> LLMProvider:
        """The chat model; raises :class:`~hindsight_recall.llm.errors.LLMNotConfigured` when there is none."""
        if self._llm is None:
            self._llm = create_llm(self.engine.settings, self.engine.plugins)
        return self._llm

    async def reflect(
        self, bank_id: str, query: str, *, budget: str = "low", context: str | None = None, max_tokens: int = 4096,
        types: Sequence[str] | None = None, tags: Sequence[str] | None = None, tags_match: str = "any",
        response_schema: Mapping[str, Any] | None = None, include_facts: bool = False, include_trace: bool = False,
        trace_output: bool = True,
    ) -> dict[str, Any]:
        """Answer ``query`` from the bank's memories, in upstream's ReflectResponse shape.

        :param bank_id: the bank.
        :param query: the question.
        :param budget: the recall's budget level.
        :param context: more about the question, appended to it (as upstream does).
        :param max_tokens: the most tokens the model's reply may take.
        :param types: fact types to recall (default: all).
        :param tags: recall's tag filter.
        :param tags_match: how ``tags`` match.
        :param response_schema: a JSON Schema; the reply's ``structured_output`` then fits it.
        :param include_facts: return the cited memories as ``based_on``.
        :param include_trace: return the recall and model calls as ``trace``.
        :param trace_output: with the trace, include each call's output.
        :raises LLMNotConfigured: no chat model is configured (checked first).
        :raises LLMOutputError: the reply did not have the asked-for form, twice.
        """
        started = time.perf_counter()
        llm = self.llm()
        schema = check_response_schema(response_schema) if response_schema is not None else None
        question = f"{query}\n\nAdditional context: {context}" if context else query
        options: dict[str, Any] = {
            "budget": budget, "max_tokens": RECALL_TOKENS, "types": list(types) if types else None,
            "tags": list(tags) if tags is not None else None, "tags_match": tags_match, "include_entities": None,
        }
        timings = Timings()
        recalled, profile = await asyncio.gather(self._recall(bank_id, question, options, timings),
                                                 self._profile(bank_id, tags))
        memories = recalled["results"]
        ids = [m["id"] for m in memories]
        request = first_request(profile, question, memories, datetime.now(UTC), max_tokens, schema)
        outcome = await ask_checked(lambda chat: self._ask(llm, chat, timings), request,
                                    lambda reply: read_reply(reply.text, ids, schema, reply.finish_reason))
        answer, usage = outcome.value, outcome.usage
        calls = list(zip(("final", "repair"), timings.llm, strict=False))
        timings.total = time.perf_counter() - started
        self.last = timings
        return self._response(answer, memories, usage, include_facts,
                              _trace(options, question, memories, timings, calls, trace_output) if include_trace
                              else None)

    async def _recall(self, bank_id: str, question: str, options: dict[str, Any], timings: Timings) -> dict[str, Any]:
        began = time.perf_counter()
        result = await self.engine.recall(bank_id, question, **options)
        timings.recall = time.perf_counter() - began
        return result

    async def _profile(self, bank_id: str, tags: Sequence[str] | None) -> dict[str, Any]:
        """The bank's profile with the directives that apply to the question's tags (untagged ones always)."""
        async with self.engine.db.connect() as conn:
            profile = await banks.bank_profile(conn, bank_id)
            if profile is None:
                raise BankNotFound(bank_id)
            rules = await directives.active(conn, bank_id, tags)
        return {**profile, "directives": rules}

    async def _ask(self, llm: LLMProvider, request: ChatRequest, timings: Timings) -> ChatReply:
        began = time.perf_counter()
        try:
            return await llm.complete(request)
        finally:
            timings.llm.append(time.perf_counter() - began)

    @staticmethod
    def _response(answer: Answer, memories: Sequence[Mapping[str, Any]], usage: Usage, include_facts: bool,
                  trace: dict[str, Any] | None) -> dict[str, Any]:
        based_on = None
        if include_facts:
            by_id = {m["id"]: m for m in memories}
            facts = [{k: by_id[i].get(k) for k in FACT_FIELDS} for i in answer.cited]
            based_on = {"memories": facts, "mental_models": [], "directives": []}
        return {"text": answer.text, "based_on": based_on, "structured_output": answer.structured,
                "structured_output_error": None, "usage": usage.as_json(), "trace": trace}

    async def close(self) -> None:
        """Close the chat model's connections."""
        if self._llm is not None:
            await self._llm.close()


def _trace(options: Mapping[str, Any], question: str, memories: Sequence[Mapping[str, Any]], timings: Timings,
           calls: Sequence[tuple[str, float]], output: bool) -> dict[str, Any]:
    """Upstream's ReflectTrace: the one recall as a tool call, and the model calls."""
    shown = ("budget", "max_tokens", "types", "tags", "tags_match")
    recall_input = {"query": question, **{k: options[k] for k in shown}}
    recall_output = {"memory_ids": [m["id"] for m in memories]} if output else None
    return {"tool_calls": [{"tool": "recall", "input": recall_input, "output": recall_output,
                            "duration_ms": round(timings.recall * 1000), "iteration": 1}],
            "llm_calls": [{"scope": scope, "duration_ms": round(seconds * 1000)} for scope, seconds in calls]}


_REFLECTORS: weakref.WeakKeyDictionary[Engine, Reflector] = weakref.WeakKeyDictionary()


def reflector_for(engine: Engine) -> Reflector:
    """The one :class:`Reflector` of ``engine`` (the service's routes and MCP tools share it)."""
    found = _REFLECTORS.get(engine)
    if found is None:
        found = _REFLECTORS[engine] = Reflector(engine)
    return found


async def close_reflector(engine: Engine) -> None:
    """Close the chat model of ``engine``'s reflector, if one was made."""
    found = _REFLECTORS.pop(engine, None)
    if found is not None:
        await found.close()
