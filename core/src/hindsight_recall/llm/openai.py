"""The OpenAI-compatible chat-completions provider, under each name upstream Hindsight gives such a server.

One wire format (``POST {base}/chat/completions``) serves OpenAI, Azure OpenAI, vLLM, Ollama,
LM Studio, llama.cpp's server, Groq, Together, OpenRouter and others; the names differ only in the
default base URL, the default model and whether a key is needed. ``HINDSIGHT_API_LLM_BASE_URL``
points any of them elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..errors import MissingSetting
from ..hookspecs import Register, hookimpl
from .errors import LLMError
from .transport import LLMHTTP, Event, join_url, retry_policy
from .types import ChatReply, ChatRequest, Usage, as_int

if TYPE_CHECKING:
    from ..settings import Settings


@dataclass(frozen=True)
class Preset:
    """What a provider name means when the settings leave it open."""

    base_url: str
    #: ``None``: there is no sensible default, HINDSIGHT_API_LLM_MODEL must be set
    model: str | None
    #: its default endpoint needs HINDSIGHT_API_LLM_API_KEY (another base URL may not)
    needs_key: bool = True
    #: a local server whose OpenAI-compatible routes live under ``/v1``, added to a bare host URL
    v1_path: bool = False


#: Provider name -> preset. The names, URLs and default models are upstream Hindsight's where it has
#: the name; ``together`` and ``vllm`` are ours.
PRESETS: dict[str, Preset] = {
    "openai": Preset("https://api.openai.com/v1", "gpt-4o-mini"),
    "groq": Preset("https://api.groq.com/openai/v1", "openai/gpt-oss-120b"),
    "ollama": Preset("http://localhost:11434/v1", "gemma3:12b", needs_key=False, v1_path=True),
    "ollama-cloud": Preset("https://ollama.com/v1", "gemma3:12b"),
    "lmstudio": Preset("http://localhost:1234/v1", "local-model", needs_key=False, v1_path=True),
    "llamacpp": Preset("http://localhost:8080/v1", "gemma-4-e2b-it", needs_key=False),
    "vllm": Preset("http://localhost:8000/v1", None, needs_key=False),
    "deepseek": Preset("https://api.deepseek.com", "deepseek-v4-flash"),
    "openrouter": Preset("https://openrouter.ai/api/v1", "qwen/qwen3.5-9b"),
    "requesty": Preset("https://router.requesty.ai/v1", "openai/gpt-4o-mini"),
    "together": Preset("https://api.together.xyz/v1", None),
    "fireworks": Preset("https://api.fireworks.ai/inference/v1", "accounts/fireworks/models/llama-v3p1-8b-instruct"),
    "minimax": Preset("https://api.minimax.io/v1", "MiniMax-M3"),
    "zai": Preset("https://api.z.ai/api/coding/paas/v4", "glm-4.5-flash"),
}


def is_azure(base_url: str) -> bool:
    """Azure OpenAI takes its key in an ``api-key`` header, not as a bearer token."""
    host = urlparse(base_url).hostname or ""
    return host.endswith((".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com"))


def base_url_of(preset: Preset, given: str | None) -> str:
    """The base URL to send to: the setting (with ``/v1`` added to a bare local host), else the preset's."""
    if not given:
        return preset.base_url
    url = given.rstrip("/")
    if preset.v1_path and urlparse(url).path in ("", "/"):
        url += "/v1"
    return url


class OpenAICompatibleLLM:
    """Chat completions from an OpenAI-compatible server (``POST /chat/completions``)."""

    name = "openai"
    preset = PRESETS["openai"]

    def __init__(self, settings: Settings) -> None:
        """Read the ``HINDSIGHT_API_LLM_*`` settings; nothing is sent before :meth:`complete`.

        :param settings: core settings.
        :raises MissingSetting: for a model or key the chosen name cannot default.
        """
        preset = self.preset
        self.model = settings.llm_model or preset.model
        if not self.model:
            raise MissingSetting("HINDSIGHT_API_LLM_MODEL", f"{self.name} has no default model; name the served one")
        self.base_url = base_url_of(preset, settings.llm_base_url)
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else ""
        if not key and preset.needs_key and not settings.llm_base_url:
            raise MissingSetting("HINDSIGHT_API_LLM_API_KEY", f"{self.name}'s endpoint {self.base_url} needs a key")
        headers = {}
        if key:
            headers = {"api-key": key} if is_azure(self.base_url) else {"Authorization": f"Bearer {key}"}
        self.stream = settings.llm_stream
        self.response_format = settings.llm_response_format
        self.url = join_url(self.base_url, "/chat/completions")
        self._http = LLMHTTP(
            self.name, timeout=settings.llm_timeout, headers=headers, max_concurrent=settings.llm_max_concurrent,
            retry=retry_policy(settings.llm_max_retries, settings.llm_initial_backoff, settings.llm_max_backoff),
            secrets=[key], timeout_variable=settings.variable("llm_timeout"),
        )

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The request JSON for ``request``.

        :param request: the prompt.
        """
        messages = [{"role": "system", "content": request.system},
                    *({"role": m.role, "content": m.content} for m in request.messages)]
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": request.max_tokens}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.json_schema is not None and self.response_format == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": request.schema_name, "schema": dict(request.json_schema), "strict": False}}
        elif request.json_schema is not None and self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Ask once (streamed when ``HINDSIGHT_API_LLM_STREAM`` is on) and return the whole reply.

        :param request: the prompt.
        """
        body = self.body(request)
        if self.stream:
            return self._from_events(await self._http.stream(self.url, body))
        return self._from_body(await self._http.post(self.url, body))

    def _malformed(self, what: str, payload: Any) -> LLMError:
        return LLMError(self._http.scrub(f"{self.name}: POST {self.url}: malformed reply, {what}: "
                                         f"{repr(payload)[:200]}"))

    def _from_body(self, payload: Any) -> ChatReply:
        choices = payload.get("choices") if isinstance(payload, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise self._malformed("expected choices[0].message.content as text", payload)
        return ChatReply(content, _usage(payload.get("usage")), _text(payload.get("model")),
                         _text(first.get("finish_reason") if isinstance(first, dict) else None))

    def _from_events(self, events: list[Event]) -> ChatReply:
        parts: list[str] = []
        usage, model, finish = Usage(), None, None
        for event in events:
            chunk = event.data
            if not isinstance(chunk, dict):
                raise self._malformed("expected each event to be a JSON object", chunk)
            if isinstance(chunk.get("error"), dict):
                raise LLMError(self._http.scrub(f"{self.name}: POST {self.url}: the stream ended in an error: "
                                                f"{repr(chunk['error'])[:300]}"))
            model = _text(chunk.get("model")) or model
            if chunk.get("usage"):
                usage = _usage(chunk["usage"])
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") if isinstance(choice, dict) else None
                piece = delta.get("content") if isinstance(delta, dict) else None
                if isinstance(piece, str):
                    parts.append(piece)
                finish = _text(choice.get("finish_reason") if isinstance(choice, dict) else None) or finish
        if not events:
            raise self._malformed("the stream held no events", "")
        return ChatReply("".join(parts), usage, model, finish)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.close()


def _usage(block: Any) -> Usage:
    if not isinstance(block, Mapping):
        return Usage()
    prompt = block.get("prompt_tokens_details")
    completion = block.get("completion_tokens_details")
    return Usage(as_int(block.get("prompt_tokens")), as_int(block.get("completion_tokens")),
                 as_int(prompt.get("cached_tokens")) if isinstance(prompt, Mapping) else 0,
                 as_int(completion.get("reasoning_tokens")) if isinstance(completion, Mapping) else 0)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def preset_class(name: str, preset: Preset) -> type[OpenAICompatibleLLM]:
    """The provider class registered under ``name``: the OpenAI-compatible one with that preset."""
    doc = f"Chat completions from an OpenAI-compatible server ({name}: {preset.base_url} by default)."
    return type(f"OpenAICompatibleLLM_{name}", (OpenAICompatibleLLM,), {"name": name, "preset": preset, "__doc__": doc})


@hookimpl
def register_llm_providers(register: Register) -> None:
    """Register the OpenAI-compatible provider under every preset name.

    :param register: core's registration callback.
    """
    for name, preset in PRESETS.items():
        register(OpenAICompatibleLLM if name == "openai" else preset_class(name, preset))
