"""The OpenAI-compatible chat provider on the wire, against a real OpenAI-speaking server on 127.0.0.1.

Streaming off and on, the three ways of asking for JSON, malformed replies, 429 then success
(honouring Retry-After), 5xx until the retries run out, a hung reply hitting the timeout, the presets
and how the settings choose a provider; and the key never shows in a message or a log.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hindsight_recall.llm import ChatRequest, LLMError, LLMNotConfigured, LLMTimeout
from hindsight_recall.llm.openai import PRESETS, OpenAICompatibleLLM, base_url_of, is_azure
from hindsight_recall.llm.select import create_llm, provider_name
from hindsight_recall.llm.types import Message
from hindsight_recall.plugins import get_plugin_manager
from hindsight_recall.settings import Settings, load_settings
from hindsight_recall.testing.http_server import FixtureServer, Reply
from hindsight_recall.testing.llm_server import STAND_IN_KEY, openai_reply, stand_in_model

KEY = STAND_IN_KEY
PATH = "/v1/chat/completions"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"},
                                           "memory_ids": {"type": "array", "items": {"type": "string"}}},
          "required": ["answer", "memory_ids"]}
PROMPT = '## Memories (1)\n{"id": "m1", "text": "Alice likes tea."}\n\n## Question\nWhat does Alice like?'


@pytest.fixture
def server() -> Iterator[FixtureServer]:
    with stand_in_model() as fixture:
        yield fixture


def settings(server: FixtureServer | None = None, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"llm_provider": "openai", "llm_api_key": KEY, "llm_model": "stub-model",
                            "llm_max_retries": 2, "llm_initial_backoff": 0.01, "llm_timeout": 5}
    if server is not None:
        base["llm_base_url"] = server.url + "/v1"
    return load_settings(**{**base, **overrides})


def request(schema: dict[str, Any] | None = SCHEMA) -> ChatRequest:
    return ChatRequest(system="Answer from memory.", messages=[Message("user", PROMPT)], max_tokens=300,
                       json_schema=schema)


async def ask(config: Settings, chat: ChatRequest | None = None) -> Any:
    llm = OpenAICompatibleLLM(config)
    try:
        return await llm.complete(chat or request())
    finally:
        await llm.close()


async def test_a_reply_without_streaming(server: FixtureServer) -> None:
    reply = await ask(settings(server))
    assert json.loads(reply.text) == {"answer": "From memory: Alice likes tea.", "memory_ids": ["m1"]}
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0 and reply.model == "stub-model"
    assert reply.finish_reason == "stop"
    sent = server.requests_to("POST", PATH)[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["model"] == "stub-model" and sent.body["max_tokens"] == 300
    assert sent.body["messages"][0] == {"role": "system", "content": "Answer from memory."}
    assert sent.body["messages"][1] == {"role": "user", "content": PROMPT}
    assert sent.body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": SCHEMA, "strict": False}}
    assert "stream" not in sent.body


async def test_a_streamed_reply_is_the_same_reply(server: FixtureServer) -> None:
    plain = await ask(settings(server))
    streamed = await ask(settings(server, llm_stream=True))
    assert streamed.text == plain.text and streamed.usage == plain.usage and streamed.finish_reason == "stop"
    sent = server.requests_to("POST", PATH)[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(("mode", "expected"), [("json_object", {"type": "json_object"}), ("none", None)])
async def test_the_json_mode_follows_the_setting(server: FixtureServer, mode: str, expected: Any) -> None:
    reply = await ask(settings(server, llm_response_format=mode))
    assert json.loads(reply.text)["memory_ids"] == ["m1"]
    assert server.requests_to("POST", PATH)[0].body.get("response_format") == expected


async def test_free_text_asks_for_no_json(server: FixtureServer) -> None:
    await ask(settings(server), request(schema=None))
    assert "response_format" not in server.requests_to("POST", PATH)[0].body


async def test_a_temperature_is_sent_when_given(server: FixtureServer) -> None:
    await ask(settings(server), ChatRequest(system="s", messages=[Message("user", "q")], max_tokens=5,
                                            temperature=0.2))
    assert server.requests_to("POST", PATH)[0].body["temperature"] == 0.2


@pytest.mark.parametrize("reply", [
    Reply(raw=b"<html>not json</html>"),
    Reply(body={"choices": []}),
    Reply(body={"choices": [{"message": {"role": "assistant", "content": None}}]}),
    Reply(body=["not", "an", "object"]),
])
async def test_a_malformed_reply_is_an_error_naming_it(server: FixtureServer, reply: Reply) -> None:
    server.script("POST", PATH, reply)
    with pytest.raises(LLMError, match="malformed reply"):
        await ask(settings(server, llm_max_retries=0))


@pytest.mark.parametrize("events", [
    b"data: {not json}\n\n",
    b'data: {"error": {"message": "overloaded"}}\n\n',
    b"data: [DONE]\n\n",
])
async def test_a_malformed_stream_is_an_error(server: FixtureServer, events: bytes) -> None:
    server.script("POST", PATH, Reply(raw=events, headers={"Content-Type": "text/event-stream"}))
    with pytest.raises(LLMError, match="malformed|error"):
        await ask(settings(server, llm_stream=True, llm_max_retries=0))


async def test_429_then_success_waits_as_retry_after_says(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "0.3"}))
    began = time.perf_counter()
    reply = await ask(settings(server))
    assert time.perf_counter() - began >= 0.3
    assert json.loads(reply.text)["memory_ids"] == ["m1"]
    assert len(server.requests_to("POST", PATH)) == 2


async def test_retry_after_is_capped_by_the_max_backoff(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(503, {"error": "busy"}, headers={"Retry-After": "30"}))
    began = time.perf_counter()
    await ask(settings(server, llm_max_backoff=0.1))
    assert time.perf_counter() - began < 5


async def test_5xx_until_the_retries_run_out(server: FixtureServer) -> None:
    server.script("POST", PATH, *[Reply(502, {"error": "bad gateway"})] * 3)
    with pytest.raises(LLMError, match=r"HTTP 502 after 3 attempt\(s\)"):
        await ask(settings(server, llm_max_retries=2))
    assert len(server.requests_to("POST", PATH)) == 3


async def test_a_client_error_is_not_retried(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(400, {"error": {"message": "bad max_tokens"}}))
    with pytest.raises(LLMError, match="HTTP 400 after 1 attempt"):
        await ask(settings(server))
    assert len(server.requests_to("POST", PATH)) == 1


async def test_a_wrong_key_says_to_check_it(server: FixtureServer) -> None:
    with pytest.raises(LLMError, match="HTTP 401.*check HINDSIGHT_API_LLM_API_KEY"):
        await ask(settings(server, llm_api_key="sk-wrong"))


async def test_a_hung_reply_hits_the_timeout(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(delay=3, body={}), Reply(delay=3, body={}))
    began = time.perf_counter()
    with pytest.raises(LLMTimeout, match=r"HINDSIGHT_API_LLM_TIMEOUT=0.3 s \(2 attempt"):
        await ask(settings(server, llm_timeout=0.3, llm_max_retries=1))
    assert time.perf_counter() - began < 2
    assert LLMTimeout.status == 504


async def test_a_hung_stream_hits_the_timeout(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(delay=3, raw=b"data: {}\n\n"))
    with pytest.raises(LLMTimeout):
        await ask(settings(server, llm_timeout=0.3, llm_max_retries=0, llm_stream=True))


async def test_an_unreachable_server_names_the_base_url() -> None:
    with FixtureServer() as gone:
        url = gone.url
    with pytest.raises(LLMError, match="check HINDSIGHT_API_LLM_BASE_URL"):
        await ask(settings(llm_base_url=url + "/v1", llm_max_retries=0))


async def test_the_key_never_reaches_a_message_or_the_log(server: FixtureServer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    server.script("POST", PATH, Reply(400, {"error": {"message": f"key {KEY} is not allowed here"}}))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(LLMError) as failed:
        await ask(settings(server))
    assert KEY not in str(failed.value) and "***" in str(failed.value)
    assert KEY not in caplog.text
    config = settings(server)
    assert KEY not in repr(config) and KEY not in str(config.model_dump())


async def test_concurrent_calls_stay_within_the_limit(server: FixtureServer) -> None:
    import asyncio

    server.route("POST", PATH, lambda r: openai_reply('{"answer": "a", "memory_ids": []}'))
    llm = OpenAICompatibleLLM(settings(server, llm_max_concurrent=2))
    server.route("POST", PATH, lambda r: Reply(delay=0.1, body=openai_reply("{}").body))
    await asyncio.gather(*(llm.complete(request()) for _ in range(6)))
    await llm.close()
    assert server.max_in_flight <= 2


def test_azure_takes_the_key_as_api_key() -> None:
    assert is_azure("https://my-resource.openai.azure.com/openai/v1")
    assert not is_azure("https://api.openai.com/v1")
    llm = OpenAICompatibleLLM(settings(llm_base_url="https://my-resource.openai.azure.com/openai/v1"))
    assert llm._http.headers == {"api-key": KEY}


def test_presets_fill_the_base_url_and_model() -> None:
    plugins = get_plugin_manager(load_entry_points=False)
    ollama = create_llm(settings(llm_provider="ollama", llm_api_key=None, llm_model=None), plugins)
    assert isinstance(ollama, OpenAICompatibleLLM)
    assert ollama.url == "http://localhost:11434/v1/chat/completions" and ollama.model == "gemma3:12b"
    assert "authorization" not in {k.lower() for k in ollama._http.headers}
    assert base_url_of(PRESETS["lmstudio"], "http://127.0.0.1:1234") == "http://127.0.0.1:1234/v1"
    assert base_url_of(PRESETS["lmstudio"], "http://127.0.0.1:1234/api/") == "http://127.0.0.1:1234/api"
    assert base_url_of(PRESETS["openai"], "http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    groq = create_llm(settings(llm_provider="groq", llm_model=None), plugins)
    assert groq.url == "https://api.groq.com/openai/v1/chat/completions"  # type: ignore[attr-defined]
    assert set(PRESETS) <= set(plugins.names("llm"))


@pytest.mark.parametrize(("overrides", "expected"), [
    ({}, None),
    ({"llm_provider": "none", "llm_api_key": KEY}, None),
    ({"llm_api_key": KEY}, "openai"),
    ({"llm_base_url": "http://127.0.0.1:1/v1"}, "openai"),
    ({"llm_provider": " Ollama "}, "ollama"),
    ({"llm_provider": "  ", "llm_model": " ", "llm_base_url": ""}, None),
])
def test_which_provider_the_settings_choose(overrides: dict[str, Any], expected: str | None) -> None:
    assert provider_name(Settings(_env_file=None, **overrides)) == expected


def test_the_upstream_setting_names_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"PROVIDER": "lmstudio", "MODEL": "qwen3", "API_KEY": KEY, "BASE_URL": "http://h:1/v1",
                        "TIMEOUT": "7.5", "MAX_RETRIES": "5", "INITIAL_BACKOFF": "0.5", "MAX_BACKOFF": "9",
                        "MAX_CONCURRENT": "4", "STREAM": "true", "RESPONSE_FORMAT": "json_object"}.items():
        monkeypatch.setenv(f"HINDSIGHT_API_LLM_{name}", value)
    config = load_settings()
    assert (config.llm_provider, config.llm_model, config.llm_base_url) == ("lmstudio", "qwen3", "http://h:1/v1")
    assert config.llm_api_key is not None and config.llm_api_key.get_secret_value() == KEY
    assert (config.llm_timeout, config.llm_max_retries, config.llm_initial_backoff, config.llm_max_backoff,
            config.llm_max_concurrent, config.llm_stream, config.llm_response_format) == \
        (7.5, 5, 0.5, 9, 4, True, "json_object")


@pytest.mark.parametrize(("name", "value"), [
    ("llm_timeout", 0), ("llm_max_retries", -1), ("llm_max_retries", 21), ("llm_initial_backoff", -1),
    ("llm_max_backoff", -1), ("llm_max_concurrent", 0), ("llm_response_format", "xml"),
])
def test_invalid_llm_settings_name_the_variable(name: str, value: Any) -> None:
    from hindsight_recall import ConfigError

    with pytest.raises(ConfigError, match=f"HINDSIGHT_API_{name.upper()}"):
        load_settings(**{name: value})


@pytest.mark.parametrize(("overrides", "names"), [
    ({}, "none is configured"),
    ({"llm_provider": "nosuch"}, "no llm plugin named 'nosuch'"),
    ({"llm_provider": "vllm", "llm_model": None}, "HINDSIGHT_API_LLM_MODEL is not set"),
    ({"llm_provider": "openai", "llm_api_key": None}, "HINDSIGHT_API_LLM_API_KEY is not set"),
])
def test_an_unusable_choice_is_not_configured_and_says_why(overrides: dict[str, Any], names: str) -> None:
    given = {"llm_provider": "openai", "llm_api_key": KEY} if overrides else {}
    config = Settings(_env_file=None, **{**given, **overrides})
    with pytest.raises(LLMNotConfigured) as failed:
        create_llm(config, get_plugin_manager(load_entry_points=False))
    message = str(failed.value)
    assert names in message and "HINDSIGHT_API_LLM_PROVIDER" in message and failed.value.status == 501
