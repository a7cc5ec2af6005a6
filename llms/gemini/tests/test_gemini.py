"""The Gemini provider against a real generateContent server on 127.0.0.1: JSON mode, streaming, errors."""

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
from hindsight_recall.testing.llm_server import gemini_routes
from hindsight_recall_llm_gemini import GeminiLLM

KEY = "AIza-test-1234567890"
MODEL = "gemini-stub"
PATH = f"/v1beta/models/{MODEL}:generateContent"
STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"},
                                           "memory_ids": {"type": "array", "items": {"type": "string"}}},
          "required": ["answer", "memory_ids"]}
PROMPT = '## Memories (1)\n{"id": "m1", "text": "Alice likes tea."}\n\n## Question\nWhat does Alice like?'


@pytest.fixture
def server() -> Iterator[FixtureServer]:
    with FixtureServer(gemini_routes(api_key=KEY, model=MODEL)) as fixture:
        yield fixture


def settings(server: FixtureServer | None = None, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"llm_provider": "gemini", "llm_api_key": KEY, "llm_model": MODEL, "llm_max_retries": 1,
                            "llm_initial_backoff": 0.01, "llm_timeout": 5}
    if server is not None:
        base["llm_base_url"] = server.url
    return load_settings(**{**base, **overrides})


async def ask(config: Settings, schema: dict[str, Any] | None = SCHEMA) -> Any:
    llm = GeminiLLM(config)
    try:
        return await llm.complete(ChatRequest(system="Answer from memory.",
                                              messages=[Message("user", PROMPT), Message("assistant", "{}"),
                                                        Message("user", "again")],
                                              max_tokens=200, json_schema=schema))
    finally:
        await llm.close()


@pytest.mark.parametrize(("stream", "path"), [(False, PATH), (True, STREAM)])
async def test_a_json_reply(server: FixtureServer, stream: bool, path: str) -> None:
    reply = await ask(settings(server, llm_stream=stream))
    assert json.loads(reply.text) == {"answer": "From memory: Alice likes tea.", "memory_ids": ["m1"]}
    assert reply.finish_reason == "STOP" and reply.model == MODEL and reply.usage.output_tokens > 0
    (sent,) = server.requests_to("POST", path)
    assert sent.headers["x-goog-api-key"] == KEY and KEY not in sent.path
    assert sent.body["systemInstruction"] == {"parts": [{"text": "Answer from memory."}]}
    assert [c["role"] for c in sent.body["contents"]] == ["user", "model", "user"]
    assert sent.body["generationConfig"] == {"maxOutputTokens": 200, "responseMimeType": "application/json",
                                             "responseJsonSchema": SCHEMA}


async def test_free_text_asks_for_no_json(server: FixtureServer) -> None:
    await ask(settings(server), schema=None)
    assert server.requests_to("POST", PATH)[0].body["generationConfig"] == {"maxOutputTokens": 200}


async def test_429_then_success(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}},
                                      headers={"Retry-After": "0.1"}))
    assert json.loads((await ask(settings(server))).text)["memory_ids"] == ["m1"]
    assert len(server.requests_to("POST", PATH)) == 2


async def test_errors_and_the_key(server: FixtureServer) -> None:
    with pytest.raises(LLMError, match="HTTP 403.*check HINDSIGHT_API_LLM_API_KEY"):
        await ask(settings(server, llm_api_key="AIza-wrong"))
    server.script("POST", PATH, Reply(body={"promptFeedback": {"blockReason": "SAFETY"}}))
    with pytest.raises(LLMError, match=r"blocked \(SAFETY\)"):
        await ask(settings(server))
    server.script("POST", STREAM, Reply(raw=b'data: {"error": {"code": 500}}\n\n',
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
    plugins = get_plugin_manager(load=["gemini"])
    llm = create_llm(settings(llm_model=None), plugins)
    assert isinstance(llm, GeminiLLM)
    assert llm.url == "https://generativelanguage.googleapis.com/v1beta/models/gemini-3.5-flash:generateContent"
    with pytest.raises(LLMNotConfigured, match="HINDSIGHT_API_LLM_API_KEY is not set"):
        create_llm(settings(llm_api_key=None), plugins)
