"""Anthropic's Messages API (``POST /v1/messages``) as a chat model for reflect.

A JSON reply is asked for the way the API documents it: one tool whose ``input_schema`` is the
schema, forced with ``tool_choice``, so the tool call's ``input`` is the reply. With
``HINDSIGHT_API_LLM_STREAM`` the reply is read from the event stream (text and
``input_json_delta`` pieces).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hindsight_recall.errors import MissingSetting
from hindsight_recall.hookspecs import Register, hookimpl
from hindsight_recall.llm.errors import LLMError
from hindsight_recall.llm.transport import LLMHTTP, Event, join_url, retry_policy
from hindsight_recall.llm.types import ChatReply, ChatRequest, Usage, as_int

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

BASE_URL = "https://api.anthropic.com"
#: upstream Hindsight's default model for this provider
DEFAULT_MODEL = "claude-haiku-4-5"
API_VERSION = "2023-06-01"


class AnthropicLLM:
    """Claude through Anthropic's Messages API."""

    name = "anthropic"

    def __init__(self, settings: Settings) -> None:
        """Read the ``HINDSIGHT_API_LLM_*`` settings; nothing is sent before :meth:`complete`.

        :param settings: core settings.
        :raises MissingSetting: without a key for Anthropic's own endpoint.
        """
        self.model = settings.llm_model or DEFAULT_MODEL
        self.base_url = (settings.llm_base_url or BASE_URL).rstrip("/")
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else ""
        if not key and not settings.llm_base_url:
            raise MissingSetting("HINDSIGHT_API_LLM_API_KEY", f"Anthropic's endpoint {BASE_URL} needs a key")
        headers = {"anthropic-version": API_VERSION, **({"x-api-key": key} if key else {})}
        self.stream = settings.llm_stream
        self.url = join_url(self.base_url, "/v1/messages")
        self._http = LLMHTTP(
            self.name, timeout=settings.llm_timeout, headers=headers, max_concurrent=settings.llm_max_concurrent,
            retry=retry_policy(settings.llm_max_retries, settings.llm_initial_backoff, settings.llm_max_backoff),
            secrets=[key], timeout_variable=settings.variable("llm_timeout"),
        )

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The request JSON for ``request``.

        :param request: the prompt.
        """
        body: dict[str, Any] = {
            "model": self.model, "max_tokens": request.max_tokens, "system": request.system,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.json_schema is not None:
            body["tools"] = [{"name": request.schema_name, "description": "Give the reply in this form.",
                              "input_schema": dict(request.json_schema)}]
            body["tool_choice"] = {"type": "tool", "name": request.schema_name}
        if self.stream:
            body["stream"] = True
        return body

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Ask once and return the whole reply (the forced tool's input as JSON text when a schema is given).

        :param request: the prompt.
        """
        body = self.body(request)
        if self.stream:
            return self._from_events(await self._http.stream(self.url, body))
        return self._from_body(await self._http.post(self.url, body))

    def _malformed(self, what: str, payload: Any) -> LLMError:
        return LLMError(self._http.scrub(f"anthropic: POST {self.url}: malformed reply, {what}: {repr(payload)[:200]}"))

    def _from_body(self, payload: Any) -> ChatReply:
        blocks = payload.get("content") if isinstance(payload, dict) else None
        if not isinstance(blocks, list):
            raise self._malformed("expected a 'content' list", payload)
        tool = next((b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"), None)
        if tool is not None:
            text = json.dumps(tool.get("input"))
        else:
            text = "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        return ChatReply(text, _usage(payload.get("usage")), _text(payload.get("model")),
                         _text(payload.get("stop_reason")))

    def _from_events(self, events: list[Event]) -> ChatReply:
        texts: list[str] = []
        tool_json: list[str] = []
        usage: dict[str, Any] = {}
        model = stop = None
        for event in events:
            data = event.data if isinstance(event.data, dict) else {}
            kind = data.get("type", event.name)
            if kind == "error":
                raise LLMError(self._http.scrub(f"anthropic: POST {self.url}: the stream ended in an error: "
                                                f"{repr(data.get('error'))[:300]}"))
            if kind == "message_start":
                message = data.get("message") or {}
                model = _text(message.get("model"))
                usage.update(message.get("usage") or {})
            elif kind == "content_block_delta":
                delta = data.get("delta") or {}
                if delta.get("type") == "text_delta":
                    texts.append(str(delta.get("text", "")))
                elif delta.get("type") == "input_json_delta":
                    tool_json.append(str(delta.get("partial_json", "")))
            elif kind == "message_delta":
                stop = _text((data.get("delta") or {}).get("stop_reason")) or stop
                usage.update(data.get("usage") or {})
        if not events:
            raise self._malformed("the stream held no events", "")
        return ChatReply("".join(tool_json) if tool_json else "".join(texts), _usage(usage), model, stop)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.close()


def _usage(block: Any) -> Usage:
    if not isinstance(block, Mapping):
        return Usage()
    cached = as_int(block.get("cache_read_input_tokens"))
    fresh = as_int(block.get("input_tokens")) + as_int(block.get("cache_creation_input_tokens"))
    return Usage(fresh + cached, as_int(block.get("output_tokens")), cached)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@hookimpl
def register_llm_providers(register: Register) -> None:
    """Register the Anthropic provider.

    :param register: core's registration callback.
    """
    register(AnthropicLLM)
