"""Reflect through ``serve``: upstream's own client (sync and async), the MCP tool and bad input, with a
real OpenAI-speaking stand-in model on 127.0.0.1 as the configured LLM; and a second ``serve`` without
any LLM, where reflect is a 501 naming the settings and recall works as before.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.http_server import FixtureServer, Reply
from hindsight_recall.testing.llm_server import STAND_IN_KEY, openai_reply, openai_routes
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
from hindsight_client_api.exceptions import ApiException  # noqa: E402
from mcp import Client  # noqa: E402
from pydantic import BaseModel  # noqa: E402

KEY = STAND_IN_KEY
PATH = "/v1/chat/completions"
FACTS = [
    {"content": "Alice works as a data engineer at Helios Robotics in Munich.", "tags": ["work"]},
    {"content": "Alice ran her first marathon in Hamburg.", "tags": ["personal"]},
    {"content": "Alice prefers Python for data science work.", "tags": ["work"]},
    {"content": "Bob cooked pasta carbonara for dinner."},
]


class Recommendation(BaseModel):
    recommendation: str
    reasons: list[str]
    confidence: str | None = None


@pytest.fixture(autouse=True)
def fresh(llm: FixtureServer) -> None:
    """Every test starts with no recorded requests, no queued replies and the stand-in's own route."""
    llm.reset()
    llm.routes.update(openai_routes(api_key=KEY))


@pytest.fixture(scope="module")
def service(llm: FixtureServer, serve: Callable[..., ServerThread]) -> str:
    return serve(llm_provider="openai", llm_base_url=llm.url + "/v1", llm_api_key=KEY, llm_model="stub-model",
                 llm_max_retries=1, llm_initial_backoff=0.01, llm_timeout=1.5).url


@pytest.fixture(scope="module")
def bare(serve: Callable[..., ServerThread]) -> str:
    """``serve`` with no LLM configured."""
    return serve().url


@pytest.fixture
def client(service: str) -> Iterator[Any]:
    with hindsight_client.Hindsight(base_url=service, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def bank(service: str) -> str:
    bank_id = f"reflect-{uuid.uuid4().hex[:10]}"
    with hindsight_client.Hindsight(base_url=service, timeout=60) as c:
        c.create_bank(bank_id, mission="I help Alice plan her career.")
        assert c.retain_batch(bank_id, FACTS).success
    return bank_id


def prompt(llm: FixtureServer, index: int = -1) -> str:
    """Every message of one request the stand-in got, joined."""
    return "\n".join(m["content"] for m in llm.requests_to("POST", PATH)[index].body["messages"])


def post(service: str, bank: str, body: Any) -> httpx.Response:
    return httpx.post(f"{service}/v1/default/banks/{bank}/reflect", json=body, timeout=30, headers=EXTRAS)


def test_reflect_answers_from_the_recalled_memories(client: Any, bank: str, llm: FixtureServer) -> None:
    response = client.reflect(bank, "Where does Alice work?", include_facts=True)
    assert response.text.startswith("From memory:")
    recalled = [r.id for r in client.recall(bank, "Where does Alice work?", budget="low").results]
    cited = [m.id for m in response.based_on.memories]
    assert cited and set(cited) <= set(recalled) and cited == recalled[:len(cited)]
    assert all(m.text in response.text for m in response.based_on.memories)
    assert response.usage.input_tokens > 0 and response.usage.total_tokens == \
        response.usage.input_tokens + response.usage.output_tokens
    assert response.structured_output is None and response.trace is None
    sent = llm.requests_to("POST", PATH)[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}" and sent.body["max_tokens"] == 4096
    assert "Helios Robotics" in prompt(llm) and "Where does Alice work?" in prompt(llm)


def test_based_on_is_left_out_unless_asked_for(client: Any, bank: str) -> None:
    assert client.reflect(bank, "Where does Alice work?").based_on is None


async def test_areflect_sends_the_same_request(service: str, bank: str, llm: FixtureServer) -> None:
    c = hindsight_client.Hindsight(base_url=service, timeout=60)
    response = await c.areflect(bank, "What does Alice prefer?", max_tokens=500, budget="mid",
                                include_facts=True, include_tool_calls=True)
    await c.aclose()
    assert response.text and response.based_on.memories
    assert llm.requests_to("POST", PATH)[0].body["max_tokens"] == 500
    (call,) = response.trace.tool_calls
    assert call.tool == "recall" and call.input["budget"] == "mid" and call.output["memory_ids"]
    assert [c.scope for c in response.trace.llm_calls] == ["final"]


def test_structured_output_fits_the_schema(client: Any, bank: str, llm: FixtureServer) -> None:
    schema = Recommendation.model_json_schema()
    response = client.reflect(bank, "Which language should Alice learn?", response_schema=schema, max_tokens=2000)
    assert Recommendation.model_validate(response.structured_output).reasons
    sent = llm.requests_to("POST", PATH)[0].body
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["structured_output"] == schema


async def test_structured_output_through_areflect(service: str, bank: str) -> None:
    c = hindsight_client.Hindsight(base_url=service, timeout=60)
    response = await c.areflect(bank, "Which language?", response_schema=Recommendation.model_json_schema())
    await c.aclose()
    assert Recommendation.model_validate(response.structured_output).recommendation


def test_a_reply_that_misses_the_schema_is_repaired_once(client: Any, bank: str, llm: FixtureServer) -> None:
    llm.script("POST", PATH, openai_reply(json.dumps({"answer": "Python", "memory_ids": [],
                                                      "structured_output": {"recommendation": "Python"}})))
    response = client.reflect(bank, "Which language?", response_schema=Recommendation.model_json_schema(),
                              include_tool_calls=True)
    assert Recommendation.model_validate(response.structured_output)
    assert len(llm.requests_to("POST", PATH)) == 2
    repair = llm.requests_to("POST", PATH)[1].body["messages"]
    assert repair[-2]["role"] == "assistant" and "'reasons' is a required property" in repair[-1]["content"]
    assert [c.scope for c in response.trace.llm_calls] == ["final", "repair"]


def test_a_reply_that_misses_the_schema_twice_is_a_502(service: str, bank: str, llm: FixtureServer) -> None:
    llm.script("POST", PATH, openai_reply("not json at all"), openai_reply('{"answer": "x", "memory_ids": []}'))
    answer = post(service, bank, {"query": "Which language?", "response_schema": Recommendation.model_json_schema()})
    assert answer.status_code == 502 and answer.json()["code"] == "llm_invalid_output"
    assert "structured_output" in answer.json()["message"] and "after one repair" in answer.json()["message"]


def test_citations_of_memories_recall_did_not_return_are_dropped(client: Any, bank: str, llm: FixtureServer) -> None:
    recalled = [r.id for r in client.recall(bank, "Alice work", budget="low").results]
    llm.script("POST", PATH, openai_reply(json.dumps(
        {"answer": "She works in Munich.", "memory_ids": ["made-up-id", recalled[0], recalled[0]]})))
    response = client.reflect(bank, "Alice work", include_facts=True)
    assert response.text == "She works in Munich."
    assert [m.id for m in response.based_on.memories] == [recalled[0]]


def test_a_plain_text_reply_is_the_answer(client: Any, bank: str, llm: FixtureServer) -> None:
    recalled = [r.id for r in client.recall(bank, "Alice work", budget="low").results]
    llm.script("POST", PATH, openai_reply(f"Alice works at Helios Robotics [{recalled[0]}]."))
    response = client.reflect(bank, "Alice work", include_facts=True)
    assert response.text.startswith("Alice works at Helios Robotics")
    assert [m.id for m in response.based_on.memories] == [recalled[0]]


def test_an_empty_reply_is_repaired_then_a_502(service: str, bank: str, llm: FixtureServer) -> None:
    llm.script("POST", PATH, openai_reply(""), openai_reply("", finish_reason="length"))
    answer = post(service, bank, {"query": "Alice?"})
    assert answer.status_code == 502 and "raise max_tokens" in answer.json()["message"]


def test_tags_filter_what_the_model_sees(client: Any, bank: str, llm: FixtureServer) -> None:
    response = client.reflect(bank, "What does Alice do?", tags=["personal"], tags_match="any_strict",
                              include_facts=True)
    assert "marathon" in prompt(llm) and "Helios" not in prompt(llm) and "pasta" not in prompt(llm)
    assert all(m.tags == ["personal"] for m in response.based_on.memories)


def test_fact_types_filter_the_recall(service: str, bank: str, llm: FixtureServer) -> None:
    answer = post(service, bank, {"query": "Alice?", "fact_types": ["experience"], "include": {"facts": {}}})
    assert answer.status_code == 200 and answer.json()["based_on"]["memories"] == []
    assert "## Memories (0)" in prompt(llm)


def test_another_banks_memories_never_reach_the_model(client: Any, bank: str, llm: FixtureServer) -> None:
    other = f"reflect-other-{uuid.uuid4().hex[:8]}"
    client.retain_batch(other, [{"content": "Alice secretly owns a sailing yacht called Nimbus."}])
    client.reflect(bank, "What does Alice own? Nimbus yacht sailing", budget="high")
    assert "Nimbus" not in prompt(llm).split("## Question")[0]


def extracting(body: dict[str, Any]) -> bool:
    """Whether a model request is a retain's fact extraction (its reply schema is named ``facts``)."""
    return bool((body.get("response_format") or {}).get("json_schema", {}).get("name") == "facts")


def test_mission_and_disposition_shape_the_prompt(client: Any, llm: FixtureServer) -> None:
    shaped, neutral = f"reflect-m-{uuid.uuid4().hex[:8]}", f"reflect-n-{uuid.uuid4().hex[:8]}"
    client.create_bank(shaped, mission="You are Alice's cautious career coach.",
                       disposition={"skepticism": 5, "literalism": 3, "empathy": 1})
    client.create_bank(neutral)
    for bank_id in (shaped, neutral):
        client.retain(bank_id, "Alice likes green tea.")
        client.reflect(bank_id, "What does Alice drink?")
    asked = [r for r in llm.requests_to("POST", PATH) if not extracting(r.body)]  # the retains asked too
    system_shaped = asked[0].body["messages"][0]["content"]
    system_neutral = asked[1].body["messages"][0]["content"]
    assert "You are Alice's cautious career coach." in system_shaped and "skepticism 5/5" in system_shaped
    assert "empathy 1/5" in system_shaped and "## Disposition" not in system_neutral
    assert f"## Memory bank: {neutral}" in system_neutral


def test_context_is_appended_to_the_query(client: Any, bank: str, llm: FixtureServer) -> None:
    client.reflect(bank, "Should Alice learn Rust?", context="She wants a systems job")
    assert "Should Alice learn Rust?\n\nAdditional context: She wants a systems job" in prompt(llm)


def test_429_then_success(client: Any, bank: str, llm: FixtureServer) -> None:
    llm.script("POST", PATH, Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0.2"}))
    assert client.reflect(bank, "Alice?").text
    assert len(llm.requests_to("POST", PATH)) == 2


def test_an_llm_failure_is_a_502_naming_the_server(service: str, bank: str, llm: FixtureServer) -> None:
    llm.script("POST", PATH, *[Reply(500, {"error": "boom"})] * 2)
    answer = post(service, bank, {"query": "Alice?"})
    assert answer.status_code == 502 and answer.json()["code"] == "llm_error"
    assert "HTTP 500 after 2 attempt(s)" in answer.json()["message"] and KEY not in answer.text


def test_a_hung_llm_is_a_504(service: str, bank: str, llm: FixtureServer) -> None:
    llm.script("POST", PATH, Reply(delay=4, body={}), Reply(delay=4, body={}))
    answer = post(service, bank, {"query": "Alice?"})
    assert answer.status_code == 504 and answer.json()["code"] == "llm_timeout"
    assert "HINDSIGHT_API_LLM_TIMEOUT" in answer.json()["message"]


@pytest.mark.parametrize(("body", "status", "names"), [
    ({"query": "   "}, 422, "query"),
    ({}, 422, "query"),
    ({"query": "a\x00b"}, 422, "query"),
    ({"query": "a", "context": "b\x00"}, 422, "context"),
    ({"query": "a", "budget": "huge"}, 422, "budget"),
    ({"query": "a", "max_tokens": 0}, 422, "max_tokens"),
    ({"query": "a", "max_tokens": 10**30}, 422, "max_tokens"),
    ({"query": "a", "tags_match": "some"}, 422, "tags_match"),
    ({"query": "a", "fact_types": []}, 422, "fact_types"),
    ({"query": "a", "fact_types": ["opinion"]}, 422, "fact_types"),
    ({"query": "a", "tag_groups": [{"tags": ["x"], "match": "any"}]}, 400, "tag_groups"),
    ({"query": "a", "includes": {}}, 422, "includes"),
    ({"query": "a", "include": {"facts": {"x": 1}}}, 422, "include.facts.x"),
    ({"query": "a", "response_schema": {"type": "string"}}, 422, "response_schema"),
    ({"query": "a", "response_schema": {"type": "object", "properties": {}}}, 422, "response_schema"),
    ({"query": "a", "response_schema": {"type": "object", "properties": {"x": {"type": "date"}}}}, 422,
     "response_schema.properties.x.type"),
    ({"query": "a", "response_schema": {"type": "object", "properties": {"x": {"type": "string"}},
                                        "required": "x"}}, 422, "not a valid JSON Schema"),
    ({"query": "word " * 600}, 400, "HINDSIGHT_API_RECALL_MAX_QUERY_TOKENS"),
])
def test_bad_input_is_refused_naming_the_field(service: str, bank: str, llm: FixtureServer, body: dict[str, Any],
                                               status: int, names: str) -> None:
    answer = post(service, bank, body)
    assert answer.status_code == status, answer.text
    assert names in answer.json()["message"]
    assert llm.requests_to("POST", PATH) == []


def test_malformed_json_and_unknown_banks(service: str) -> None:
    raw = httpx.post(f"{service}/v1/default/banks/x/reflect", content=b"{nope", timeout=30, headers=EXTRAS)
    assert raw.status_code == 400 and raw.json()["code"] == "malformed_json"
    assert post(service, f"nobody-{uuid.uuid4().hex[:8]}", {"query": "a"}).status_code == 404


def test_upstreams_ignored_fields_are_accepted(service: str, bank: str) -> None:
    answer = post(service, bank, {"query": "Alice?", "apply_all_directives": True, "exclude_mental_models": True,
                                  "exclude_mental_model_ids": ["m"], "reflect_search_observations_max_tokens": 100,
                                  "reflect_search_observations_include_entities": False, "tag_groups": None,
                                  "context": None, "response_schema": None, "include": None})
    assert answer.status_code == 200, answer.text
    assert set(answer.json()) == {"text", "based_on", "structured_output", "structured_output_error", "usage",
                                  "trace"}


def test_without_an_llm_reflect_is_a_501_and_recall_still_works(bare: str) -> None:
    bank_id = f"reflect-bare-{uuid.uuid4().hex[:8]}"
    with hindsight_client.Hindsight(base_url=bare, timeout=60) as c:
        c.retain_batch(bank_id, FACTS)
        assert c.recall(bank_id, "Where does Alice work?").results
        with pytest.raises(ApiException) as refused:
            c.reflect(bank_id, "Where does Alice work?")
    assert refused.value.status == 501
    error = json.loads(refused.value.body)  # upstream's error shape: the message as detail
    assert post(bare, bank_id, {"query": "Q"}).json()["code"] == "llm_not_configured"
    for setting in ("HINDSIGHT_API_LLM_PROVIDER", "HINDSIGHT_API_LLM_MODEL", "HINDSIGHT_API_LLM_API_KEY",
                    "HINDSIGHT_API_LLM_BASE_URL"):
        assert setting in error["detail"]
    assert post(bare, bank_id, {"query": "   "}).status_code == 501


async def test_the_mcp_tool_reflects(service: str, bank: str) -> None:
    async with Client(service + "/mcp", read_timeout_seconds=60) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        schema = tools["reflect"].input_schema
        assert set(schema["required"]) == {"query"}  # the bank: the argument, else the session's
        assert {"context", "budget", "max_tokens", "response_schema", "tags", "tags_match", "apply_all_directives",
                "include_based_on", "include_trace"} <= set(schema["properties"])
        plain = await mcp.call_tool("reflect", {"bank_id": bank, "query": "Where does Alice work?"})
        assert not plain.is_error and plain.structured_content is not None
        assert plain.structured_content["text"].startswith("From memory:")
        # the HTTP route's body: what was not asked for is null
        assert plain.structured_content.get("based_on") is None and plain.structured_content.get("trace") is None
        full = await mcp.call_tool("reflect", {"bank_id": bank, "query": "Where does Alice work?",
                                               "include_based_on": True, "include_trace": True})
        assert full.structured_content is not None and full.structured_content["based_on"]["memories"]
        assert full.structured_content["trace"]["tool_calls"][0]["tool"] == "recall"
        bad = await mcp.call_tool("reflect", {"bank_id": bank, "query": "x", "response_schema": {"type": "string"}})
        assert bad.is_error and "response_schema" in bad.content[0].text  # type: ignore[union-attr]


async def test_the_mcp_tool_without_an_llm_names_the_settings(bare: str) -> None:
    async with Client(bare + "/mcp", read_timeout_seconds=60) as mcp:
        failed = await mcp.call_tool("reflect", {"bank_id": "anything", "query": "Where does Alice work?"})
    assert failed.is_error
    text = failed.content[0].text  # type: ignore[union-attr]
    assert "HINDSIGHT_API_LLM_PROVIDER" in text and "Traceback" not in text


def test_hindsight_agno_tools_reflect_against_serve(service: str, llm: FixtureServer) -> None:
    """Upstream's Agno integration (``hindsight-agno`` from PyPI), its toolkit driven as an agent would."""
    agno = pytest.importorskip("hindsight_agno")
    from agno.run.base import RunContext

    bank_id = f"reflect-agno-{uuid.uuid4().hex[:8]}"
    tools = agno.HindsightTools(bank_id=bank_id, hindsight_api_url=service, budget="low")
    assert {"retain_memory", "recall_memory", "reflect_on_memory"} <= set(tools.functions)
    run = RunContext(run_id="run-1", session_id="session-1", user_id="alice")
    tools.retain_memory(run, "Alice's favourite editor is Helix.")
    assert "Helix" in tools.recall_memory(run, "Which editor does Alice use?")
    answer = tools.reflect_on_memory(run, "Which editor does Alice use?")
    assert answer.startswith("From memory:") and "Helix" in answer
    assert "Which editor does Alice use?" in prompt(llm)
