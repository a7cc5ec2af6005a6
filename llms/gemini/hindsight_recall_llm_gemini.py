"""Google Gemini's ``generateContent`` API as a chat model for reflect.

A JSON reply is asked for with ``responseMimeType: application/json`` and the schema as
``responseJsonSchema``; with ``HINDSIGHT_API_LLM_STREAM`` the reply is read from
``streamGenerateContent?alt=sse``. The key goes in the ``x-goog-api-key`` header, never in the URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from hindsight_recall.errors import MissingSetting
from hindsight_recall.hookspecs import Register, hookimpl
from hindsight_recall.llm.errors import LLMError
from hindsight_recall.llm.transport import LLMHTTP, Event, join_url, retry_policy
from hindsight_recall.llm.types import ChatReply, ChatRequest, Usage, as_int

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

BASE_URL = "https://generativelanguage.googleapis.com"
#: upstream Hindsight's default model for this provider
DEFAULT_MODEL = "gemini-3.5-flash"
ROLES = {"user": "user", "assistant": "model"}


class GeminiLLM:
    """Gemini through the Generative Language API."""

    name = "gemini"

    def __init__(self, settings: Settings) -> None:
        """Read the ``HINDSIGHT_API_LLM_*`` settings; nothing is sent before :meth:`complete`.

        :param settings: core settings.
        :raises MissingSetting: without a key for Google's own endpoint.
        """
        self.model = settings.llm_model or DEFAULT_MODEL
        self.base_url = (settings.llm_base_url or BASE_URL).rstrip("/")
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else ""
        if not key and not settings.llm_base_url:
            raise MissingSetting("HINDSIGHT_API_LLM_API_KEY", f"Gemini's endpoint {BASE_URL} needs a key")
        self.stream = settings.llm_stream
        model = quote(self.model.removeprefix("models/"), safe="-._~")
        self.url = join_url(self.base_url, f"/v1beta/models/{model}:generateContent")
        self.stream_url = join_url(self.base_url, f"/v1beta/models/{model}:streamGenerateContent?alt=sse")
        self._http = LLMHTTP(
            self.name, timeout=settings.llm_timeout, headers={"x-goog-api-key": key} if key else {},
            max_concurrent=settings.llm_max_concurrent, secrets=[key],
            retry=retry_policy(settings.llm_max_retries, settings.llm_initial_backoff, settings.llm_max_backoff),
            timeout_variable=settings.variable("llm_timeout"),
        )

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The request JSON for ``request``.

        :param request: the prompt.
        """
        config: dict[str, Any] = {"maxOutputTokens": request.max_tokens}
        if request.temperature is not None:
            config["temperature"] = request.temperature
        if request.json_schema is not None:
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = dict(request.json_schema)
        return {
            "systemInstruction": {"parts": [{"text": request.system}]},
            "contents": [{"role": ROLES[m.role], "parts": [{"text": m.content}]} for m in request.messages],
            "generationConfig": config,
        }

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Ask once and return the whole reply.

        :param request: the prompt.
        """
        body = self.body(request)
        if self.stream:
            return self._from_events(await self._http.stream(self.stream_url, body))
        payload = await self._http.post(self.url, body)
        text, finish = self._candidate(payload)
        usage = payload.get("usageMetadata") if isinstance(payload, dict) else None
        return ChatReply(text, _usage(usage), _text(payload.get("modelVersion")), finish)

    def _candidate(self, payload: Any) -> tuple[str, str | None]:
        """The first candidate's text (thoughts left out) and finish reason."""
        candidates = payload.get("candidates") if isinstance(payload, dict) else None
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            blocked = (payload.get("promptFeedback") or {}).get("blockReason") if isinstance(payload, dict) else None
            why = f"the prompt was blocked ({blocked})" if blocked else "expected a 'candidates' list"
            raise LLMError(self._http.scrub(f"gemini: POST {self.url}: {why}: {repr(payload)[:200]}"))
        first = candidates[0]
        parts = (first.get("content") or {}).get("parts") or []
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and not p.get("thought"))
        return text, _text(first.get("finishReason"))

    def _from_events(self, events: list[Event]) -> ChatReply:
        texts: list[str] = []
        usage: Any = None
        model = finish = None
        for event in events:
            data = event.data
            if isinstance(data, dict) and isinstance(data.get("error"), dict):
                raise LLMError(self._http.scrub(f"gemini: POST {self.stream_url}: the stream ended in an error: "
                                                f"{repr(data['error'])[:300]}"))
            text, reason = self._candidate(data)
            texts.append(text)
            finish = reason or finish
            model = _text(data.get("modelVersion")) or model
            usage = data.get("usageMetadata") or usage
        if not events:
            raise LLMError(f"gemini: POST {self.stream_url}: malformed reply, the stream held no events")
        return ChatReply("".join(texts), _usage(usage), model, finish)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.close()


def _usage(block: Any) -> Usage:
    if not isinstance(block, Mapping):
        return Usage()
    return Usage(as_int(block.get("promptTokenCount")), as_int(block.get("candidatesTokenCount")),
                 as_int(block.get("cachedContentTokenCount")), as_int(block.get("thoughtsTokenCount")))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@hookimpl
def register_llm_providers(register: Register) -> None:
    """Register the Gemini provider.

    :param register: core's registration callback.
    """
    register(GeminiLLM)
