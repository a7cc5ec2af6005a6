"""Fact extraction against a real OpenAI-speaking server on 127.0.0.1: what the request carries, how a
reply becomes facts, chunking, the concurrency bound, failures (retried, timed out, repaired, refused),
the settings and their fallbacks, and the memories an item's facts become.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hindsight_recall import ConfigError
from hindsight_recall.llm import LLMError, LLMNotConfigured, LLMOutputError, LLMTimeout, Usage
from hindsight_recall.llm.openai import OpenAICompatibleLLM
from hindsight_recall.plugins import get_plugin_manager
from hindsight_recall.retain.chunking import chunk_text
from hindsight_recall.retain.extract import (
    BatchExtraction,
    Extraction,
    Fact,
    RetainItem,
    create_retain_llm,
    extract,
    extract_batch,
    has_retain_model,
    retain_llm_settings,
    to_memories,
)
from hindsight_recall.settings import Settings, load_settings
from hindsight_recall.testing.http_server import FixtureServer, Reply, Request
from hindsight_recall.testing.llm_server import STAND_IN_KEY, fact, facts_for, facts_reply, openai_reply, stand_in_model

KEY = STAND_IN_KEY
PATH = "/v1/chat/completions"
WHEN = datetime(2024, 6, 10, 9, 30, tzinfo=UTC)


@pytest.fixture
def server() -> Iterator[FixtureServer]:
    with stand_in_model() as fixture:
        yield fixture


def settings(server: FixtureServer | None = None, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"llm_provider": "openai", "llm_api_key": KEY, "llm_model": "stub-model",
                            "llm_max_retries": 2, "llm_initial_backoff": 0.01, "llm_max_backoff": 0.05,
                            "llm_timeout": 5}
    if server is not None:
        base["llm_base_url"] = server.url + "/v1"
    return load_settings(**{**base, **overrides})


async def run(config: Settings, *items: RetainItem) -> BatchExtraction:
    llm = create_retain_llm(config, get_plugin_manager(load_entry_points=False))
    try:
        return await extract_batch(llm, config, items)
    finally:
        await llm.close()




def sent(server: FixtureServer, number: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = server.requests_to("POST", PATH)[number].body
    return body


# ---- the request ----------------------------------------------------------------------------------

async def test_the_request_carries_the_item_and_the_settings(server: FixtureServer) -> None:
    config = settings(server, retain_llm_model="retain-model", retain_mission="Remember travel plans only.",
                      retain_extraction_mode="custom", retain_custom_instructions="Keep every city and date.",
                      retain_max_completion_tokens=2048)
    item = RetainItem("Alice flies to Lisbon tomorrow.", timestamp=WHEN, context="a chat with Alice",
                      metadata={"channel": "slack"})
    await run(config, item)
    body = sent(server)
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert body["model"] == "retain-model" and body["max_tokens"] == 2048
    assert "Keep every city and date." in system and "Merge statements" not in system
    assert "Remember travel plans only." in user and "takes priority" in user
    assert "Event Date: Monday, June 10, 2024 (2024-06-10T09:30:00+00:00)" in user
    assert "Context: a chat with Alice" in user and "channel: slack" in user and "Chunk: 1 of 1" in user
    assert "<text>\nAlice flies to Lisbon tomorrow.\n</text>" in user
    schema = body["response_format"]["json_schema"]
    assert body["response_format"]["type"] == "json_schema" and schema["name"] == "facts"
    fact_schema = schema["schema"]["properties"]["facts"]["items"]
    assert {"what", "when", "where", "who", "why", "fact_type"} <= set(fact_schema["required"])
    assert fact_schema["properties"]["fact_type"]["enum"] == ["world", "assistant"]
    assert "causal_relations" in fact_schema["properties"] and "caused_by" in system


async def test_an_item_without_date_or_context_says_so(server: FixtureServer) -> None:
    await run(settings(server), RetainItem("Bob likes tea."))
    user = sent(server)["messages"][1]["content"]
    assert "Event Date: unknown" in user and "Context: none" in user and "Focus" not in user


@pytest.mark.parametrize(("mode", "present", "absent"), [
    ("concise", "Merge statements", "Never summarise"),
    ("verbose", "Never summarise", "Merge statements"),
])
async def test_the_mode_chooses_the_guidance(server: FixtureServer, mode: str, present: str, absent: str) -> None:
    await run(settings(server, retain_extraction_mode=mode), RetainItem("Bob likes tea."))
    system = sent(server)["messages"][0]["content"]
    assert present in system and absent not in system


async def test_without_causal_links_no_causes_are_asked_for_or_kept(server: FixtureServer) -> None:
    server.script("POST", PATH, facts_reply(fact("Rain fell."),
                                         fact("The match was cancelled.", causal_relations=[
                                             {"target_index": 0, "relation_type": "caused_by"}])))
    batch = await run(settings(server, retain_extract_causal_links=False), RetainItem("It rained; no match."))
    body = sent(server)
    assert "causal_relations" not in json.dumps(body["response_format"]) and "caused_by" not in \
        body["messages"][0]["content"]
    assert [f.caused_by for f in batch.items[0].facts] == [(), ()]


# ---- the reply ------------------------------------------------------------------------------------

async def test_a_reply_becomes_facts(server: FixtureServer) -> None:
    server.script("POST", PATH, facts_reply(
        fact("Alice lost her job", when="June 3, 2024", who="Alice (the user's sister)", fact_kind="event",
             occurred_start="2024-06-03", entities=[" Alice ", "job", "alice", ""]),
        fact("Alice moved to Porto", where="Porto", why="rent in Lisbon was too high", fact_kind="event",
             occurred_start="2024-06-05T10:00:00", occurred_end="2024-06-07T18:00:00+02:00",
             entities=["Alice", "Porto"], causal_relations=[{"target_index": 0.0, "relation_type": "caused_by"},
                                                            {"target_index": 0, "relation_type": "caused_by"}]),
        fact("I suggested flats near the station", fact_type="assistant", entities=["Porto"], causal_relations=None),
    ))
    zone = timezone(timedelta(hours=1))
    batch = await run(settings(server), RetainItem("...", timestamp=datetime(2024, 6, 10, 9, tzinfo=zone)))
    lost, moved, suggested = batch.items[0].facts
    assert lost == Fact("Alice lost her job | When: June 3, 2024 | Involving: Alice (the user's sister)", "world",
                        datetime(2024, 6, 3, tzinfo=zone), datetime(2024, 6, 3, tzinfo=zone), ("Alice", "job"))
    assert moved.text == "Alice moved to Porto | Where: Porto | rent in Lisbon was too high"
    assert moved.occurred_start == datetime(2024, 6, 5, 10, tzinfo=zone)
    assert moved.occurred_end == datetime(2024, 6, 7, 16, tzinfo=UTC) and moved.caused_by == (0,)
    assert type(moved.caused_by[0]) is int
    assert suggested == Fact("I suggested flats near the station", "experience", entities=("Porto",))
    assert batch.items[0].calls == batch.calls == 1
    assert batch.usage == Usage(10, 5) and batch.usage.as_json()["total_tokens"] == 15


async def test_an_empty_list_of_facts_is_a_valid_reply(server: FixtureServer) -> None:
    server.script("POST", PATH, openai_reply('```json\n{"facts": []}\n```'))
    assert (await run(settings(server), RetainItem("Hello!"))).items[0].facts == ()


async def test_the_stand_in_makes_a_fact_of_each_sentence(server: FixtureServer) -> None:
    batch = await run(settings(server), RetainItem("Alice met Bob in Paris. They talked about Rome!"))
    assert [(f.text, f.entities) for f in batch.items[0].facts] == [
        ("Alice met Bob in Paris.", ("Alice", "Bob", "Paris")), ("They talked about Rome!", ("They", "Rome"))]


# ---- chunks and batches ---------------------------------------------------------------------------

def test_short_content_is_one_chunk() -> None:
    assert chunk_text("One line.", 100) == ["One line."]


@pytest.mark.parametrize("text", [
    "\n\n".join(f"Paragraph {n} says something about topic {n}." for n in range(12)),
    " ".join(f"Sentence {n} runs on for a while here." for n in range(30)),
    "\n".join(f"line {n}, with a comma; and a clause" for n in range(25)),
    "x" * 350,
    "word " * 90,
])
def test_chunks_stay_within_the_size_and_lose_nothing(text: str) -> None:
    chunks = chunk_text(text, 100)
    assert len(chunks) > 1 and all(0 < len(c) <= 100 for c in chunks)
    assert "".join(chunks) == text


def test_chunks_end_at_the_most_natural_break() -> None:
    paragraphs = chunk_text("First paragraph, short.\n\nSecond one. It has two sentences.\n\n" + "Third. " * 8, 50)
    assert paragraphs[:2] == ["First paragraph, short.\n\n", "Second one. It has two sentences.\n\n"]
    assert len(paragraphs) == 4 and all(c.startswith("Third. ") for c in paragraphs[2:])
    sentences = chunk_text("A sentence of some length here. " * 4, 70)
    assert all(c.endswith(". ") for c in sentences)


def sentence_facts(request: Request) -> Reply:
    """One fact per sentence of the chunk, each caused by the one before it in the same chunk."""
    prompt = "\n".join(m["content"] for m in request.body["messages"])
    facts = facts_for(prompt)["facts"]
    for number, found in enumerate(facts[1:], start=1):
        found["causal_relations"] = [{"target_index": number - 1, "relation_type": "caused_by"}]
    return facts_reply(*facts)


async def test_long_content_is_chunked_and_causes_follow_their_facts(server: FixtureServer) -> None:
    server.route("POST", PATH, sentence_facts)
    sentences = [f"Event {n} happened after the one before." for n in range(9)]
    batch = await run(settings(server, retain_chunk_size=100), RetainItem(" ".join(sentences)))
    item = batch.items[0]
    assert len(item.chunks) == len(server.requests_to("POST", PATH)) == batch.calls > 1
    assert [f.text for f in item.facts] == sentences
    assert [item.chunks[f.chunk] for f in item.facts] == [c for c in item.chunks for s in sentences if s in c]
    firsts = {min(n for n, f in enumerate(item.facts) if f.chunk == c) for c in range(len(item.chunks))}
    assert [f.caused_by for f in item.facts] == [() if n in firsts else (n - 1,) for n in range(len(sentences))]
    assert batch.usage.input_tokens == 10 * batch.calls


async def test_a_batch_keeps_its_items_apart_and_in_order(server: FixtureServer) -> None:
    batch = await run(settings(server), RetainItem("Alice likes tea."), RetainItem("Bob likes coffee. He runs."))
    assert [[f.text for f in item.facts] for item in batch.items] == [
        ["Alice likes tea."], ["Bob likes coffee.", "He runs."]]


async def test_calls_in_flight_stay_within_the_retain_limit_across_calls(server: FixtureServer) -> None:
    server.route("POST", PATH, lambda request: openai_reply('{"facts": []}', delay=0.15))
    config = settings(server, llm_max_concurrent=10, retain_llm_max_concurrent=2, retain_chunk_size=100)
    long = RetainItem(" ".join(f"Sentence {n} of a long enough text." for n in range(10)))
    llm = create_retain_llm(config, get_plugin_manager(load_entry_points=False))
    try:
        await asyncio.gather(extract(llm, config, long), extract_batch(llm, config, [long, long]))
    finally:
        await llm.close()
    assert len(server.requests_to("POST", PATH)) > 6 and server.max_in_flight == 2


# ---- failures -------------------------------------------------------------------------------------

async def test_429_then_success_is_retried(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "0"}))
    batch = await run(settings(server), RetainItem("Alice likes tea."))
    assert [f.text for f in batch.items[0].facts] == ["Alice likes tea."]
    assert len(server.requests_to("POST", PATH)) == 2 and batch.calls == 1


async def test_5xx_until_the_retries_run_out_names_the_status(server: FixtureServer) -> None:
    server.script("POST", PATH, *[Reply(500, {"error": {"message": "boom"}})] * 3)
    with pytest.raises(LLMError, match="HTTP 500 after 2 attempt") as failed:
        await run(settings(server, llm_max_retries=5, retain_llm_max_retries=1), RetainItem("Alice likes tea."))
    assert failed.value.answered == 500 and len(server.requests_to("POST", PATH)) == 2
    assert KEY not in str(failed.value)


@pytest.mark.parametrize(("timeouts", "named"), [
    ({"llm_timeout": 30, "retain_llm_timeout": 0.2}, "HINDSIGHT_API_RETAIN_LLM_TIMEOUT=0.2 s"),
    ({"llm_timeout": 0.2}, "HINDSIGHT_API_LLM_TIMEOUT=0.2 s"),
], ids=["retain-timeout", "llm-timeout"])
async def test_a_slow_model_hits_the_timeout_and_names_the_variable_that_set_it(
        server: FixtureServer, timeouts: dict[str, float], named: str) -> None:
    server.script("POST", PATH, openai_reply('{"facts": []}', delay=2))
    with pytest.raises(LLMTimeout, match="did not answer within") as failed:
        await run(settings(server, retain_llm_max_retries=0, **timeouts), RetainItem("Alice likes tea."))
    assert f"within {named} (1 attempt(s))" in str(failed.value)


async def test_one_failed_chunk_fails_the_batch(server: FixtureServer) -> None:
    server.script("POST", PATH, Reply(400, {"error": {"message": "bad request"}}))
    with pytest.raises(LLMError, match="HTTP 400"):
        await run(settings(server), RetainItem("Alice likes tea."), RetainItem("Bob likes coffee."))


async def test_malformed_json_is_repaired_once(server: FixtureServer) -> None:
    server.script("POST", PATH, openai_reply("Sure! Here are the facts: Alice likes tea."))
    batch = await run(settings(server), RetainItem("Alice likes tea."))
    assert [f.text for f in batch.items[0].facts] == ["Alice likes tea."]
    repair = sent(server, 1)["messages"]
    assert repair[-2] == {"role": "assistant", "content": "Sure! Here are the facts: Alice likes tea."}
    assert "not a JSON object" in repair[-1]["content"] and repair[1] == sent(server, 0)["messages"][1]
    # the usage of both calls: the scripted one's (10 in, 5 out) and the route's
    assert batch.calls == 2 and batch.usage.input_tokens > 10 and batch.usage.output_tokens > 5


async def test_malformed_twice_is_an_output_error(server: FixtureServer) -> None:
    server.script("POST", PATH, openai_reply("not json"), openai_reply("still not json", finish_reason="length"))
    with pytest.raises(LLMOutputError, match="after one repair: it is not a JSON object.*RETAIN_MAX_COMPLETION"):
        await run(settings(server), RetainItem("Alice likes tea."))
    assert len(server.requests_to("POST", PATH)) == 2


CAUSE = {"relation_type": "caused_by"}


@pytest.mark.parametrize(("facts", "problem"), [
    ([fact("Trip", fact_kind="event", occurred_start="2024-06-09", occurred_end="2024-06-01")],
     "reply.facts.0: occurred_end 2024-06-01T00:00:00+00:00 is before occurred_start 2024-06-09"),
    ([fact("A"), fact("B", causal_relations=[{"target_index": 2, **CAUSE}])],
     "reply.facts.1.causal_relations.0.target_index: 2 is out of range; the reply has 2 facts"),
    ([fact("A", causal_relations=[{"target_index": -1, **CAUSE}])], "target_index: -1 is out of range"),
    ([fact("A"), fact("B", causal_relations=[{"target_index": 1, **CAUSE}])], "1 is the fact itself"),
    ([{k: v for k, v in fact("A").items() if k != "who"}], "reply.facts.0: 'who' is a required property"),
    ([fact("   ")], "reply.facts.0.what: must not be empty"),
    ([fact("A", fact_type="robot")], "reply.facts.0.fact_type: 'robot' is not one of"),
    ([fact("A", occurred_start="next Tuesday")], "'next Tuesday' is not an ISO 8601 date"),
    ([fact("A", occurred_start="0001-01-01")], "outside the supported range"),
    ([fact("A", causal_relations=[{"target_index": 0, "relation_type": "causes"}])], "'causes' is not one of"),
])
async def test_a_reply_that_breaks_a_rule_is_refused_naming_it(server: FixtureServer, facts: list[dict[str, Any]],
                                                               problem: str) -> None:
    server.script("POST", PATH, facts_reply(*facts), facts_reply(*facts))
    with pytest.raises(LLMOutputError) as failed:
        await run(settings(server), RetainItem("Alice likes tea.", timestamp=WHEN))
    assert problem in str(failed.value)
    assert problem in sent(server, 1)["messages"][-1]["content"]


async def test_a_broken_rule_is_repaired_like_malformed_json(server: FixtureServer) -> None:
    bad = facts_reply(fact("A"), fact("B", causal_relations=[{"target_index": 7, **CAUSE}]))
    server.script("POST", PATH, bad, facts_reply(fact("A"), fact("B", causal_relations=[{"target_index": 0, **CAUSE}])))
    batch = await run(settings(server), RetainItem("Alice likes tea."))
    assert [f.caused_by for f in batch.items[0].facts] == [(), (0,)] and batch.calls == 2


# ---- memories -------------------------------------------------------------------------------------

def test_an_items_facts_become_its_memories() -> None:
    item = RetainItem("long text", timestamp=datetime(2024, 6, 10, 9), context="a chat", document_id="doc-1",
                      tags=("trip",), metadata={"channel": "slack"}, entities=("user", "Alice"))
    facts = (Fact("Alice lost her job", occurred_start=WHEN, occurred_end=WHEN, entities=("alice", "job")),
             Fact("Alice moved", caused_by=(0,), chunk=1),
             Fact("I found flats", "experience", caused_by=(0, 1), chunk=1))
    extraction = Extraction(facts, ("chunk one", "chunk two"), Usage(), 2)
    lost, moved, found = to_memories(item, extraction, ["m0", "m1", "m2"], first_position=4)
    assert (lost.id, lost.text, lost.type, lost.occurred_start, lost.chunk, lost.position) == \
        ("m0", "Alice lost her job", "world", WHEN, "chunk one", 4)
    assert lost.entities == ("alice", "job", "user") and moved.entities == ("user", "Alice")
    assert (lost.causes, moved.causes, found.causes) == (("m1", "m2"), ("m2",), ())
    assert found.type == "experience" and found.chunk == "chunk two" and found.position == 6
    for memory in (lost, moved, found):
        assert memory.mentioned_at == datetime(2024, 6, 10, 9, tzinfo=UTC) and memory.context == "a chat"
        assert (memory.document_id, memory.tags, dict(memory.metadata)) == ("doc-1", ("trip",), {"channel": "slack"})
    assert moved.occurred_start is None and to_memories(item, extraction, ["a", "b", "c"])[0].position is None
    with pytest.raises(ValueError, match="3 facts need as many ids"):
        to_memories(item, extraction, ["m0"])


# ---- settings -------------------------------------------------------------------------------------

def test_unset_retain_settings_fall_back_to_the_llm_ones() -> None:
    config = settings(None, llm_base_url="http://h:1/v1", llm_max_concurrent=7, llm_timeout=9)
    model = retain_llm_settings(config)
    assert (model.llm_provider, model.llm_model, model.llm_base_url, model.llm_timeout, model.llm_max_retries,
            model.llm_max_concurrent) == ("openai", "stub-model", "http://h:1/v1", 9, 2, 7)
    assert model.llm_api_key is not None and model.llm_api_key.get_secret_value() == KEY
    assert model.variable("llm_timeout") == "HINDSIGHT_API_LLM_TIMEOUT"


def test_retain_settings_override_the_llm_ones() -> None:
    config = settings(None, retain_llm_model="big", retain_llm_api_key="sk-other", retain_llm_base_url="http://r:2/v1",
                      retain_llm_timeout=3, retain_llm_max_retries=0, retain_llm_initial_backoff=0.5,
                      retain_llm_max_backoff=2, retain_llm_max_concurrent=1)
    model = retain_llm_settings(config)
    assert (model.llm_provider, model.llm_model, model.llm_base_url, model.llm_timeout, model.llm_max_retries,
            model.llm_initial_backoff, model.llm_max_backoff, model.llm_max_concurrent) == \
        ("openai", "big", "http://r:2/v1", 3, 0, 0.5, 2, 1)
    assert model.llm_api_key is not None and model.llm_api_key.get_secret_value() == "sk-other"
    assert (config.llm_model, config.llm_timeout) == ("stub-model", 5)
    assert (model.variable("llm_timeout"), model.variable("llm_model")) == \
        ("HINDSIGHT_API_RETAIN_LLM_TIMEOUT", "HINDSIGHT_API_RETAIN_LLM_MODEL")
    assert (config.variable("llm_timeout"), model.variable("llm_stream")) == \
        ("HINDSIGHT_API_LLM_TIMEOUT", "HINDSIGHT_API_LLM_STREAM")


def test_a_retain_provider_of_its_own_brings_its_own_default_model() -> None:
    config = settings(None, llm_provider="vllm", llm_model="served-model", retain_llm_provider="openai")
    llm = create_retain_llm(config, get_plugin_manager(load_entry_points=False))
    assert isinstance(llm, OpenAICompatibleLLM) and (llm.name, llm.model) == ("openai", "gpt-4o-mini")


def test_the_upstream_setting_names_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"RETAIN_LLM_PROVIDER": "lmstudio", "RETAIN_LLM_MODEL": "qwen3", "RETAIN_LLM_API_KEY": KEY,
              "RETAIN_LLM_BASE_URL": "http://h:1/v1", "RETAIN_LLM_TIMEOUT": "7.5", "RETAIN_LLM_MAX_RETRIES": "5",
              "RETAIN_LLM_MAX_CONCURRENT": "4", "RETAIN_CHUNK_SIZE": "1200", "RETAIN_EXTRACTION_MODE": "Verbose",
              "RETAIN_EXTRACT_CAUSAL_LINKS": "false", "RETAIN_MISSION": "travel", "RETAIN_MAX_COMPLETION_TOKENS": "900",
              "RETAIN_CUSTOM_INSTRUCTIONS": "cities"}
    for name, value in values.items():
        monkeypatch.setenv(f"HINDSIGHT_API_{name}", value)
    config = load_settings()
    assert (config.retain_llm_provider, config.retain_llm_model, config.retain_llm_base_url, config.retain_llm_timeout,
            config.retain_llm_max_retries, config.retain_llm_max_concurrent) == \
        ("lmstudio", "qwen3", "http://h:1/v1", 7.5, 5, 4)
    assert (config.retain_chunk_size, config.retain_extraction_mode, config.retain_extract_causal_links,
            config.retain_mission, config.retain_max_completion_tokens, config.retain_custom_instructions) == \
        (1200, "verbose", False, "travel", 900, "cities")
    assert has_retain_model(config)


def test_the_defaults_are_upstreams_but_the_reply_limit() -> None:
    config = Settings(_env_file=None)
    assert (config.retain_chunk_size, config.retain_extraction_mode, config.retain_extract_causal_links,
            config.retain_mission, config.retain_custom_instructions, config.retain_max_completion_tokens) == \
        (3000, "concise", True, None, None, 16384)


def test_an_unknown_mode_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="HINDSIGHT_API_RETAIN_EXTRACTION_MODE: Input should be 'concise', "
                                          "'verbose' or 'custom'"):
        load_settings(retain_extraction_mode="chunks")


def test_custom_mode_needs_instructions_and_the_message_keeps_the_key_out() -> None:
    with pytest.raises(ConfigError, match="RETAIN_EXTRACTION_MODE=custom needs HINDSIGHT_API_RETAIN_CUSTOM_INSTRUCTI"
                                          "ONS") as failed:
        load_settings(llm_api_key=KEY, retain_llm_api_key=KEY, retain_extraction_mode="custom",
                      retain_custom_instructions="  ")
    assert KEY not in str(failed.value)
    assert load_settings(retain_extraction_mode="custom", retain_custom_instructions="x").retain_custom_instructions


@pytest.mark.parametrize(("name", "value"), [
    ("retain_llm_timeout", 0), ("retain_llm_max_retries", 21), ("retain_llm_max_concurrent", 0),
    ("retain_chunk_size", 99), ("retain_max_completion_tokens", 0), ("retain_llm_initial_backoff", -1),
])
def test_invalid_retain_settings_name_the_variable(name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"HINDSIGHT_API_{name.upper()}")):
        load_settings(**{name: value})


@pytest.mark.parametrize(("overrides", "expected"), [
    ({}, False),
    ({"llm_provider": "openai", "llm_api_key": KEY}, True),
    ({"llm_provider": "openai", "llm_api_key": KEY, "retain_llm_provider": "none"}, False),
    ({"retain_llm_base_url": "http://127.0.0.1:1/v1"}, True),
    ({"retain_llm_provider": "ollama"}, True),
])
def test_whether_retain_has_a_model(overrides: dict[str, Any], expected: bool) -> None:
    assert has_retain_model(Settings(_env_file=None, **overrides)) is expected


def test_without_a_model_building_one_says_what_to_set() -> None:
    with pytest.raises(LLMNotConfigured, match="retain needs a chat model and none is configured"):
        create_retain_llm(Settings(_env_file=None), get_plugin_manager(load_entry_points=False))

