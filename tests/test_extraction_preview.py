"""Retain's extraction looked at before anything is stored, through ``serve``: ``POST …/memories/dry-run-extract``
against a stand-in OpenAI-speaking model on 127.0.0.1 (the bank's settings under the body's, nothing stored,
fields it cannot honour refused, the model's failures as retain's, 501 without a model), and
``POST …/prompts/preview`` (the very prompt and schema the model then receives, with and without a model).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.http_server import FixtureServer, Reply
from hindsight_recall.testing.llm_server import stand_in_settings
from hindsight_recall.testing.service import ServerThread

PATH = "/v1/chat/completions"
TRIP = ("Alice flies to Lisbon on Monday to meet her sister Maya. They plan to walk the old town together. "
        "On Wednesday Alice takes the train to Porto. She wants to taste the port wine there. "
        "Alice returns home on Friday evening.")


@pytest.fixture(autouse=True)
def fresh(llm: FixtureServer) -> None:
    llm.reset()


@pytest.fixture(scope="module")
def with_model(llm: FixtureServer, serve: Callable[..., ServerThread]) -> str:
    return serve(**stand_in_settings(llm)).url


@pytest.fixture(scope="module")
def without_model(serve: Callable[..., ServerThread]) -> str:
    return serve().url


@pytest.fixture
def http(with_model: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=with_model, timeout=60) as client:
        yield client


def bank(http: httpx.Client, **config: Any) -> str:
    b = f"/v1/default/banks/dry-{uuid.uuid4().hex[:10]}"
    assert http.put(b, json={}).status_code == 200
    if config:
        assert http.patch(f"{b}/config", json={"updates": config}).status_code == 200
    return b


def requests(llm: FixtureServer) -> list[dict[str, Any]]:
    return [r.body for r in llm.requests_to("POST", PATH)]


def dry_run(http: httpx.Client, b: str, **body: Any) -> httpx.Response:
    return http.post(f"{b}/memories/dry-run-extract", json={"content": TRIP, **body})


# ---- dry-run extraction ------------------------------------------------------------------------------------

def test_a_dry_run_extracts_with_the_banks_settings_under_the_bodys_and_stores_nothing(
        http: httpx.Client, llm: FixtureServer) -> None:
    b = bank(http, retain_mission="Keep only travel plans.", retain_extraction_mode="verbose")
    answered = dry_run(http, b, retain_chunk_size=100, context="a trip", timestamp="2024-06-10T09:30:00Z")
    assert answered.status_code == 200, answered.text
    result = answered.json()
    assert set(result) == {"chunks", "facts", "usage"}
    chunks, facts = result["chunks"], result["facts"]
    assert len(chunks) >= 3 and all(len(c["text"]) <= 100 for c in chunks)
    assert sum(c["fact_count"] for c in chunks) == len(facts) == 5  # the stand-in: a fact per sentence
    assert [f["chunk_index"] for f in facts] == sorted(f["chunk_index"] for f in facts)
    assert facts[0] == {"text": "Alice flies to Lisbon on Monday to meet her sister Maya.", "fact_type": "world",
                        "entities": ["Alice", "Lisbon", "Monday", "Maya"], "chunk_index": 0}
    assert result["usage"]["input_tokens"] > 0 and result["usage"]["total_tokens"] > result["usage"]["input_tokens"]
    sent = requests(llm)
    assert len(sent) == len(chunks)
    for body in sent:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        assert user.startswith("## Focus\nKeep only travel plans.\n") and "Never summarise" in system
        assert "Context: a trip" in user and "Event Date: Monday, June 10, 2024" in user
    assert http.get(f"{b}/memories/list").json()["items"] == []
    assert http.get(f"{b}/documents").json()["items"] == []


def test_the_bodys_fields_override_the_banks_for_that_call_only(http: httpx.Client, llm: FixtureServer) -> None:
    b = bank(http, retain_mission="Bank mission.")
    body = {"retain_mission": "Call mission.", "retain_extraction_mode": "custom",
            "retain_custom_instructions": "Keep only cities.", "retain_extract_causal_links": False}
    assert dry_run(http, b, **body).status_code == 200
    assert dry_run(http, b).status_code == 200
    (first, second) = requests(llm)
    assert first["messages"][1]["content"].startswith("## Focus\nCall mission.")
    assert "Keep only cities." in first["messages"][0]["content"] and "caused_by" not in first["messages"][0]["content"]
    assert second["messages"][1]["content"].startswith("## Focus\nBank mission.")
    assert "Merge statements" in second["messages"][0]["content"]


def test_an_unknown_bank_gets_the_servers_settings_and_is_not_created(http: httpx.Client) -> None:
    b = f"/v1/default/banks/dry-new-{uuid.uuid4().hex[:10]}"
    answered = http.post(f"{b}/memories/dry-run-extract", json={"content": [{"type": "text", "text": "Bo sings."}]})
    assert answered.status_code == 200 and [f["text"] for f in answered.json()["facts"]] == ["Bo sings."]
    assert http.get(b).status_code == 404


@pytest.mark.parametrize(("body", "status", "starts"), [
    ({"retain_extraction_mode": "chunks"}, 400, "retain_extraction_mode: Input should be"),
    ({"retain_extraction_mode": "custom"}, 400, "retain_custom_instructions: extraction mode 'custom' needs"),
    ({"retain_chunk_size": 99}, 400, "retain_chunk_size: Input should be greater than or equal to 100"),
    ({"content": "   "}, 400, "content: must not be empty"),
    ({"content": [{"type": "image", "data": "x"}]}, 400, "content.0: only text blocks"),
    ({"entity_labels": [{"key": "topic"}]}, 400, "entity_labels: hindsight-recall extracts free-form entities"),
    ({"entities_allow_free_form": False}, 400, "entities_allow_free_form:"),
    ({"llm_output_language": "fr"}, 400, "llm_output_language: the model writes every fact in the language"),
    ({"agent_name": "Ann"}, 400, "agent_name: the prompt names no narrator"),
    ({"strategy": "fast"}, 400, "strategy: hindsight-recall has no extraction strategies"),
    ({"retain_chunk_size": "big"}, 422, ""),
    ({"nope": 1}, 422, ""),
])
def test_what_cannot_be_done_is_refused_naming_it_before_the_model_is_asked(
        http: httpx.Client, llm: FixtureServer, body: dict[str, Any], status: int, starts: str) -> None:
    answered = http.post(f"{bank(http)}/memories/dry-run-extract", json={"content": TRIP, **body})
    assert answered.status_code == status, answered.text
    assert answered.json()["detail"] if status == 422 else answered.json()["detail"].startswith(starts)
    assert requests(llm) == []


def test_what_changes_nothing_is_accepted(http: httpx.Client) -> None:
    same = {"entity_labels": [], "entities_allow_free_form": True, "retain_mission": None}
    assert dry_run(http, bank(http), **same).status_code == 200


@pytest.mark.parametrize(("reply", "status", "code"), [
    (Reply(500, {"error": "down"}), 502, "llm_error"),
    (Reply(200, {"id": "x", "object": "chat.completion", "model": "stub-model", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "not json"}, "finish_reason": "stop"}]}),
     502, "llm_invalid_output"),
])
def test_the_models_failures_answer_as_retains_do(http: httpx.Client, llm: FixtureServer, reply: Reply, status: int,
                                                  code: str) -> None:
    llm.script("POST", PATH, reply, reply)
    with httpx.Client(base_url=str(http.base_url), headers=EXTRAS, timeout=60) as ours:
        answered = ours.post(f"{bank(http)}/memories/dry-run-extract", json={"content": "Bo sings."})
    assert answered.status_code == status and answered.json()["code"] == code
    assert answered.json()["message"].startswith("fact extraction failed: ")


def test_without_a_model_a_dry_run_says_what_to_set(without_model: str) -> None:
    with httpx.Client(base_url=without_model, timeout=60) as plain:
        answered = plain.post(f"/v1/default/banks/dry-{uuid.uuid4().hex[:8]}/memories/dry-run-extract",
                              json={"content": TRIP})
    assert answered.status_code == 501
    assert "needs a chat model and none is configured: set HINDSIGHT_API_LLM_PROVIDER" in answered.json()["detail"]


# ---- the prompt preview ------------------------------------------------------------------------------------

def joined(message: dict[str, Any], separator: str) -> str:
    return separator.join(block["text"] for block in message["blocks"] if block.get("active", True))


def test_the_retain_preview_is_what_the_model_then_receives(http: httpx.Client, llm: FixtureServer) -> None:
    b = bank(http, retain_mission="Keep plans.", retain_extraction_mode="custom",
             retain_custom_instructions="Keep every city.")
    answered = http.post(f"{b}/prompts/preview", json={"operation": "retain"})
    assert answered.status_code == 200, answered.text
    preview = answered.json()
    system, user = preview["messages"]
    assert (system["role"], user["role"]) == ("system", "user")
    by_field = {block.get("field"): block for block in system["blocks"] + user["blocks"]}
    assert by_field["retain_custom_instructions"]["source"] == "config"
    assert by_field["retain_custom_instructions"]["value"] == "Keep every city."
    assert by_field["retain_mission"] == {"text": "## Focus\nKeep plans.\nThis takes priority over the general "
                                          "guidance on what to keep.\n", "source": "config", "kind": "text",
                                          "field": "retain_mission", "heading": "Focus", "active": True,
                                          "editable": True, "value": "Keep plans."}
    assert by_field["retain_extract_causal_links"]["kind"] == "boolean"
    assert all(block["source"] == "builtin" for block in system["blocks"] if block.get("field") in (None, ""))
    assert {s["field"]: s.get("value") for s in preview["run_settings"]} == {
        "retain_chunk_size": "3000", "retain_max_completion_tokens": "16384", "retain_llm_provider": "openai",
        "retain_llm_model": "stub-model"}

    assert http.post(f"{b}/memories", json={"items": [{"content": "Bo flies to Oslo."}]}).status_code == 200
    (sent,) = requests(llm)
    assert sent["messages"][0]["content"] == joined(system, "\n\n")
    assert sent["response_format"]["json_schema"]["schema"] == preview["response_schema"]
    template = joined(user, "\n")
    assert sent["messages"][1]["content"].startswith(template.split("Chunk: ", 1)[0] + "Chunk: 1 of 1")
    assert "{content}" in template and "Event Date: {timestamp}" in template


def test_the_retain_preview_needs_no_model(without_model: str) -> None:
    with httpx.Client(base_url=without_model, timeout=60) as plain:
        b = f"/v1/default/banks/dry-{uuid.uuid4().hex[:8]}"
        preview = plain.post(f"{b}/prompts/preview", json={}).json()
        assert [m["role"] for m in preview["messages"]] == ["system", "user"]
        focus = next(block for block in preview["messages"][1]["blocks"] if block["field"] == "retain_mission")
        assert focus["active"] is False and "value" not in focus
        settings = {s["field"]: s.get("value") for s in preview["run_settings"]}
        assert settings["retain_llm_provider"] is None and settings["retain_chunk_size"] == "3000"
        assert "causal_relations" in str(preview["response_schema"])
        assert plain.get(b).status_code == 404  # previewing creates no bank


def test_the_reflect_preview_is_reflects_prompt(http: httpx.Client, llm: FixtureServer) -> None:
    b = bank(http)
    http.put(b, json={"name": "Trips", "mission": "You plan trips.", "disposition": {"empathy": 5}})
    http.post(f"{b}/directives", json={"name": "Brief", "content": "Answer briefly."}).raise_for_status()
    http.post(f"{b}/memories", json={"items": [{"content": "Bo flies to Oslo."}]}).raise_for_status()
    preview = http.post(f"{b}/prompts/preview", json={"operation": "reflect"}).json()
    system, user = preview["messages"]
    by_field = {block.get("field"): block for block in system["blocks"]}
    assert by_field["mission"]["source"] == "config" and by_field["mission"]["text"] == "You plan trips."
    assert "- Brief: Answer briefly." in by_field["directives"]["text"]
    assert by_field["disposition"]["active"] is True
    assert "## Question\n{query}" in user["blocks"][0]["text"]
    llm.reset()
    assert http.post(f"{b}/reflect", json={"query": "Where does Bo fly?"}).status_code == 200
    (sent,) = requests(llm)
    assert sent["messages"][0]["content"] == joined(system, "\n\n")
    assert sent["response_format"]["json_schema"]["schema"] == preview["response_schema"]
    assert http.post(f"{b}-nope/prompts/preview", json={"operation": "reflect"}).status_code == 404


def test_consolidation_is_skipped_and_strategies_refused(http: httpx.Client) -> None:
    b = bank(http)
    preview = http.post(f"{b}/prompts/preview", json={"operation": "consolidation"}).json()
    assert preview["messages"] == [] and "does not consolidate" in preview["skipped_reason"]
    refused = http.post(f"{b}/prompts/preview", json={"operation": "retain", "strategy": "fast"})
    assert refused.status_code == 400 and refused.json()["detail"].startswith("strategy:")
    assert http.post(f"{b}/prompts/preview", json={"operation": "nope"}).status_code == 422
