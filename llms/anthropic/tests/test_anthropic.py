"""The Anthropic provider against a real Messages-API server on 127.0.0.1: forced tool, text, streaming, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hindsight_recall.llm import ChatRequest, LLMError, LLMNotConfigured, LLMTimeout
from hindsight_recall.llm.select import create_llm, operation_settings
from hindsight_recall.llm.types import Message
from hindsight_recall.plugins import get_plugin_manager
from hindsight_recall.settings import Settings, load_settings
from hindsight_recall.testing.http_server import FixtureServer, Reply
from hindsight_recall.testing.llm_server import anthropic_routes
from hindsight_recall_llm_anthropic import API_VERSION, AnthropicLLM

KEY = "sk-ant-test-1234567890"
PATH = "/v1/messages"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"},
                                           "memory_ids": {"type": "array", "items": {"type": "string"}}},
          "required": ["answer", "memory_ids"]}
PROMPT = '## Memories (1)\n{"id": "m1", "text": "Alice likes tea."}\n\n## Question\nWhat does Alice like?'


@pytest.fixture
def server() -> Iterator[FixtureServer]:
    with FixtureServer(anthropic_routes(api_key=KEY)) as fixture:
        yield fixture


def settings(server: FixtureServer | None = None, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"llm_provider": "anthropic", "llm_api_key": KEY, "llm_max_retries": 1,
                            "llm_initial_backoff": 0.01, "llm_timeout": 5}
    if server is not None:
        base["llm_base_url"] = server.url
    return load_settings(**{**base, **overrides})


async def ask(config: Settings, schema: dict[str, Any] | None = SCHEMA) -> Any:
    llm = AnthropicLLM(config)
    try:
        return await llm.complete(ChatRequest(system="Answer from memory.", messages=[Message("user", PROMPT)],
                                              max_tokens=200, json_schema=schema))
    finally:
        await llm.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_json_reply_comes_from_the_forced_tool(server: FixtureServer, stream: bool) -> None:
    reply = await ask(settings(server, llm_stream=stream))
    assert json.loads(reply.text) == {"answer": "From memory: Alice likes tea.", "memory_ids": ["m1"]}
    assert reply.finish_reason == "tool_use" and reply.model == "claude-stub"
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    sent = server.requests_to("POST", PATH)[0]
    assert sent.headers["x-api-key"] == KEY and sent.headers["anthropic-version"] == API_VERSION
    assert sent.body["system"] == "Answer from memory." and sent.body["max_tokens"] == 200
    assert sent.body["messages"] == [{"role": "user", "content": PROMPT}]
    assert sent.body["tools"][0]["input_schema"] == SCHEMA
    assert sent.body["tool_choice"] == {"type": "tool", "name": "answer"}
    assert sent.body.get("stream", False) is stream


@pytest.mark.parametrize("stream", [False, True])
async def test_free_text_uses_no_tool(server: FixtureServer, stream: bool) -> None:
    reply = await ask(settings(server, llm_stream=stream), schema=None)
    assert json.loads(reply.text)["answer"].startswith("From memory") and reply.finish_reason == "end_turn"
    assert "tools" not in server.requests_to("POST", PATH)[0].body


async def test_overloaded_then_success(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(529, {"type": "error", "error": {"type": "overloaded_error"}},
                                      headers={"Retry-After": "0.1"}))
    assert json.loads((await ask(settings(server))).text)["memory_ids"] == ["m1"]
    assert len(server.requests_to("POST", PATH)) == 2


async def test_errors_and_the_key(server: FixtureServer) -> None:
    with pytest.raises(LLMError, match="HTTP 401.*check HINDSIGHT_API_LLM_API_KEY") as failed:
        await ask(settings(server, llm_api_key="sk-ant-wrong"))
    assert "sk-ant-wrong" not in str(failed.value)
    server.script("POST", PATH, Reply(body={"type": "message", "content": "nope"}))
    with pytest.raises(LLMError, match="malformed reply"):
        await ask(settings(server))
    server.script("POST", PATH, Reply(raw=b'event: error\ndata: {"type": "error", "error": {"type": "x"}}\n\n',
                                      headers={"Content-Type": "text/event-stream"}))
    with pytest.raises(LLMError, match="ended in an error"):
        await ask(settings(server, llm_stream=True))
    server.script("POST", PATH, Reply(delay=3, body={}), Reply(delay=3, body={}))
    with pytest.raises(LLMTimeout, match="HINDSIGHT_API_LLM_TIMEOUT=0.3 s"):
        await ask(settings(server, llm_timeout=0.3))
    server.script("POST", PATH, Reply(delay=3, body={}))
    with pytest.raises(LLMTimeout, match="HINDSIGHT_API_RETAIN_LLM_TIMEOUT=0.3 s"):  # an operation's own limit
        await ask(operation_settings(settings(server, retain_llm_timeout=0.3, retain_llm_max_retries=0), "retain"))


def test_it_is_chosen_by_name_and_needs_a_key() -> None:
    plugins = get_plugin_manager(load=["anthropic"])
    llm = create_llm(settings(), plugins)
    assert isinstance(llm, AnthropicLLM) and llm.url == "https://api.anthropic.com/v1/messages"
    with pytest.raises(LLMNotConfigured, match="HINDSIGHT_API_LLM_API_KEY is not set"):
        create_llm(settings(llm_api_key=None), plugins)
