"""A bank's own retain settings shape its extractions: ``serve`` with a stand-in OpenAI-speaking model on
127.0.0.1, banks configured through ``PATCH .../config`` and the bank's ``PUT`` body, and the requests the
model received compared. A bank without overrides gets the server's settings; values that cannot be used
are refused naming the setting, and nothing is stored.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.errors import InvalidRequest
from hindsight_recall.retain.options import ExtractionOptions, extraction_options
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.settings import Settings
from hindsight_recall.testing.http_server import FixtureServer
from hindsight_recall.testing.llm_server import stand_in_settings
from hindsight_recall.testing.service import ServerThread

PATH = "/v1/chat/completions"
#: about 250 characters in five sentences: one chunk by default, several at a chunk size of 100
TRIP = ("Alice flies to Lisbon on Monday to meet her sister Maya. They plan to walk the old town together. "
        "On Wednesday Alice takes the train to Porto. She wants to taste the port wine there. "
        "Alice returns home on Friday evening.")


@pytest.fixture(autouse=True)
def fresh(llm: FixtureServer) -> None:
    llm.reset()


@pytest.fixture(scope="module")
def service(llm: FixtureServer, serve: Callable[..., ServerThread]) -> str:
    return serve(**stand_in_settings(llm)).url


@pytest.fixture
def http(service: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service, headers=EXTRAS, timeout=60) as client:
        yield client


def new_bank(http: httpx.Client) -> str:
    b = f"/v1/default/banks/bankcfg-{uuid.uuid4().hex[:10]}"
    assert http.put(b, json={}).status_code == 200
    return b


def sent(llm: FixtureServer) -> list[tuple[str, str, dict[str, Any]]]:
    """(system prompt, user message, reply schema) of every extraction request the model received."""
    return [(r.body["messages"][0]["content"], r.body["messages"][1]["content"],
             r.body["response_format"]["json_schema"]["schema"]) for r in llm.requests_to("POST", PATH)]


def retain(http: httpx.Client, b: str, content: str = TRIP) -> dict[str, Any]:
    answer = http.post(f"{b}/memories", json={"items": [{"content": content}]})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_configured_bank_sends_its_mission_mode_and_chunk_size_and_another_does_not(
        http: httpx.Client, llm: FixtureServer) -> None:
    configured, plain = new_bank(http), new_bank(http)
    updates = {"retain_mission": "Keep only travel plans.", "retain_extraction_mode": "verbose",
               "HINDSIGHT_API_RETAIN_CHUNK_SIZE": 100}
    answered = http.patch(f"{configured}/config", json={"updates": updates})
    assert answered.status_code == 200, answered.text
    assert answered.json()["overrides"] == {"retain_mission": "Keep only travel plans.",
                                            "retain_extraction_mode": "verbose", "retain_chunk_size": 100}
    assert answered.json()["config"]["retain_extract_causal_links"] is True  # the server's, resolved

    retain(http, configured)
    requests = sent(llm)
    assert len(requests) >= 3  # the chunk size of 100 splits the 5 sentences
    for system, user, _ in requests:
        assert user.startswith("## Focus\nKeep only travel plans.\n")
        assert "Never summarise" in system and "Merge statements" not in system
        assert len(user.split("<text>\n", 1)[1].removesuffix("\n</text>")) <= 100
    # chunks are extracted concurrently, so the model sees them in any order
    numbered = sorted(next(line for line in user.splitlines() if line.startswith("Chunk: "))
                      for _, user, _ in requests)
    assert numbered == sorted(f"Chunk: {n} of {len(requests)}" for n in range(1, len(requests) + 1))

    llm.reset()
    retain(http, plain)
    ((system, user, _),) = sent(llm)
    assert "Focus" not in user and "Chunk: 1 of 1" in user
    assert "Merge statements" in system and "Never summarise" not in system


def test_the_put_body_stores_the_extraction_fields(http: httpx.Client, llm: FixtureServer) -> None:
    b = f"/v1/default/banks/bankcfg-{uuid.uuid4().hex[:10]}"
    body = {"name": "Trips", "retain_extraction_mode": "custom", "retain_custom_instructions": "Keep every city.",
            "retain_mission": "Plan travel."}
    answered = http.put(b, json=body)
    assert answered.status_code == 200 and "X-Hindsight-Ignored-Fields" not in answered.headers
    assert http.patch(f"{b}/config", json={"updates": {"retain_extract_causal_links": False}}).status_code == 200
    retain(http, b)
    ((system, user, schema),) = sent(llm)
    assert "## What to keep\nKeep every city." in system and "Merge statements" not in system
    assert user.startswith("## Focus\nPlan travel.\n")
    assert "caused_by" not in system and "causal_relations" not in json.dumps(schema)


def test_an_async_retain_follows_the_bank_too(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank(http)
    http.patch(f"{b}/config", json={"updates": {"retain_mission": "Only Porto."}}).raise_for_status()
    queued = http.post(f"{b}/memories", json={"items": [{"content": TRIP}], "async": True}).json()
    deadline = time.monotonic() + 60
    while http.get(f"{b}/operations/{queued['operation_id']}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert [user.startswith("## Focus\nOnly Porto.\n") for _, user, _ in sent(llm)] == [True]


def test_removing_the_overrides_brings_the_servers_settings_back(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank(http)
    http.patch(f"{b}/config", json={"updates": {"retain_mission": "Only Porto."}}).raise_for_status()
    assert http.patch(f"{b}/config", json={"updates": {"retain_mission": None}}).json()["overrides"] == {}
    retain(http, b)
    assert "Focus" not in sent(llm)[0][1]


@pytest.mark.parametrize(("updates", "status", "named"), [
    ({"retain_extraction_mode": "chunks"}, 422, "retain_extraction_mode"),
    ({"retain_chunk_size": 99}, 422, "retain_chunk_size"),
    ({"retain_chunk_size": "big"}, 422, "retain_chunk_size"),
    ({"retain_extract_causal_links": "maybe"}, 422, "retain_extract_causal_links"),
    ({"retain_mission": "x" * 20_001}, 422, "retain_mission"),
    ({"retain_extraction_mode": "custom"}, 400, "retain_custom_instructions"),
    ({"retain_extraction_mode": "custom", "retain_custom_instructions": "   "}, 400, "retain_custom_instructions"),
])
def test_values_that_cannot_be_used_are_refused_naming_them(
        http: httpx.Client, updates: dict[str, Any], status: int, named: str) -> None:
    b = new_bank(http)
    answered = http.patch(f"{b}/config", json={"updates": updates})
    assert answered.status_code == status, answered.text
    assert answered.json()["message"].startswith(named)
    assert http.get(f"{b}/config").json()["overrides"] == {}


def test_custom_mode_without_instructions_is_refused_in_the_put_body_and_creates_no_bank(http: httpx.Client) -> None:
    b = f"/v1/default/banks/bankcfg-{uuid.uuid4().hex[:10]}"
    answered = http.put(b, json={"name": "Nope", "retain_extraction_mode": "custom"})
    assert answered.status_code == 400 and "custom" in answered.json()["message"]
    assert http.get(b).status_code == 404


def test_a_template_with_custom_mode_and_no_instructions_is_refused(http: httpx.Client) -> None:
    b = new_bank(http)
    refused = http.post(f"{b}/import", json={"version": "1", "bank": {"retain_extraction_mode": "custom"}})
    assert refused.status_code == 400 and "retain_custom_instructions" in refused.json()["detail"]
    template = {"version": "1", "bank": {"retain_extraction_mode": "custom", "retain_custom_instructions": "Dates."}}
    assert http.post(f"{b}/import", json=template).status_code == 200
    assert http.get(f"{b}/config").json()["overrides"] == {"retain_extraction_mode": "custom",
                                                           "retain_custom_instructions": "Dates."}


def test_instructions_stored_first_let_custom_mode_follow(http: httpx.Client) -> None:
    b = new_bank(http)
    assert http.patch(f"{b}/config", json={"updates": {"retain_custom_instructions": "Keep names."}}).status_code \
        == 200
    assert http.patch(f"{b}/config", json={"updates": {"retain_extraction_mode": "custom"}}).status_code == 200
    refused = http.patch(f"{b}/config", json={"updates": {"retain_custom_instructions": None}})
    assert refused.status_code == 400
    assert http.get(f"{b}/config").json()["overrides"]["retain_custom_instructions"] == "Keep names."


# ---- the options themselves ------------------------------------------------------------------------------

def test_layers_apply_in_order_over_the_settings() -> None:
    settings = Settings(_env_file=None, retain_mission="Server.", retain_chunk_size=500)
    assert extraction_options(settings) == ExtractionOptions(mission="Server.", chunk_size=500)
    bank = {"retain_mission": "Bank.", "retain_extraction_mode": "verbose", "recall_rrf_k": 9}
    assert extraction_options(settings, bank) == ExtractionOptions(mode="verbose", mission="Bank.", chunk_size=500)
    request = {"retain_mission": None, "retain_chunk_size": 200}
    assert extraction_options(settings, bank, request) == ExtractionOptions(mode="verbose", chunk_size=200)


def test_a_custom_mode_the_server_set_up_is_inherited() -> None:
    settings = Settings(_env_file=None, retain_extraction_mode="custom", retain_custom_instructions="Keep dates.")
    assert extraction_options(settings, {}).custom_instructions == "Keep dates."
    with pytest.raises(InvalidRequest, match="retain_custom_instructions: extraction mode 'custom' needs") as caught:
        extraction_options(settings, {"retain_custom_instructions": None})
    assert caught.value.status == 400
    with pytest.raises(InvalidRequest, match="retain_extraction_mode: Input should be 'concise', 'verbose' or "
                                             "'custom'") as caught:
        extraction_options(settings, {"retain_extraction_mode": "verbatim"})
    assert caught.value.status == 400
