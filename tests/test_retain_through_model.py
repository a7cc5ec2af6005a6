"""Retain through ``serve`` with a chat model configured for it, against a real OpenAI-speaking stand-in on
127.0.0.1: an item becomes its facts (listed with dates and entities, kept in their document, recalled with
their chunk, linked by their causes, and ranked above the verbatim turns that echo them), a model that fails
writes nothing, an async retain extracts each chunk once, ``/metrics`` counts the model's calls and tokens, and
without a model (or with ``RETAIN_LLM_PROVIDER=none``) retain stays verbatim.
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
from hindsight_recall.testing.llm_server import fact, facts_reply, openai_reply, stand_in_settings
from hindsight_recall.testing.service import ServerThread, wait_for_operation
from prometheus_client.parser import text_string_to_metric_families

PATH = "/v1/chat/completions"
CHAT = ("Alice: I moved to Lisbon in May.\n"
        "Bob: Did you start at Helios Robotics?\n"
        "Alice: Yes, I joined Helios Robotics as a data engineer.")
#: what the stand-in makes of CHAT: one fact per sentence
CHAT_FACTS = ["Alice: I moved to Lisbon in May.", "Bob: Did you start at Helios Robotics?",
              "Alice: Yes, I joined Helios Robotics as a data engineer."]
#: the stand-in as retain's model: one quick retry, a 1-second limit
RETRY = {"llm_max_retries": 1, "llm_initial_backoff": 0.01, "llm_max_backoff": 0.02, "llm_timeout": 1.0}


@pytest.fixture(autouse=True)
def fresh(llm: FixtureServer) -> None:
    """Every test starts with no recorded requests and no queued replies."""
    llm.reset()


@pytest.fixture(scope="module")
def service(llm: FixtureServer, serve: Callable[..., ServerThread]) -> str:
    """``serve`` whose retain goes through the stand-in; async retains commit one item per chunk."""
    return serve(service_operation_chunk_items=1, **stand_in_settings(llm, **RETRY)).url


@pytest.fixture
def http(service: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service, headers=EXTRAS, timeout=60) as client:
        yield client


def new_bank() -> str:
    return f"/v1/default/banks/through-{uuid.uuid4().hex[:10]}"



def listed(http: httpx.Client, b: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(f"{b}/memories/list", params=params).json()["items"]
    return items


def extractions(llm: FixtureServer) -> list[str]:
    """The user message of every extraction request the stand-in got."""
    return [r.body["messages"][1]["content"] for r in llm.requests_to("POST", PATH)]


# ---- an item becomes its facts --------------------------------------------------------------------------

def test_a_conversation_becomes_several_facts(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank()
    item = {"content": CHAT, "timestamp": "2024-06-10T09:30:00Z", "context": "a chat between friends",
            "document_id": "chat-1", "tags": ["chat"], "metadata": {"channel": "slack"}}
    answer = http.post(f"{b}/memories", json={"items": [item]}).json()
    assert answer["success"] and answer["items_count"] == 1 and answer["async"] is False
    assert answer["verbatim"] is False and answer["memories"] == len(CHAT_FACTS)
    usage = answer["usage"]
    assert usage["input_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    (sent,) = extractions(llm)
    assert "Context: a chat between friends" in sent and "channel: slack" in sent and "Event Date: Monday" in sent

    rows = listed(http, b, document_id="chat-1")
    assert sorted(r["text"] for r in rows) == sorted(CHAT_FACTS)
    for row in rows:
        assert row["date"].startswith("2024-06-10T09:30") and row["mentioned_at"].startswith("2024-06-10T09:30")
        assert row["context"] == "a chat between friends" and row["tags"] == ["chat"]
        assert row["metadata"] == {"channel": "slack"} and row["fact_type"] == "world"
    entities = {r["text"]: r["entities"] for r in rows}
    assert set(entities[CHAT_FACTS[0]].split(", ")) == {"Alice", "Lisbon", "May"}
    assert {"Alice", "Yes", "Helios", "Robotics"} == set(entities[CHAT_FACTS[2]].split(", "))

    document = http.get(f"{b}/documents/chat-1").json()
    assert document["original_text"] == CHAT and document["memory_unit_count"] == len(CHAT_FACTS)

    recalled = http.post(f"{b}/memories/recall", json={"query": "Where did Alice move?",
                                                        "include": {"chunks": {}}}).json()
    chunk_ids = {r["chunk_id"] for r in recalled["results"]}
    assert len(chunk_ids) == 1 and recalled["chunks"][chunk_ids.pop()]["text"] == CHAT

    # sent again, the document's facts replace its memories in place: the same ids, no more of them
    ids = sorted(r["id"] for r in rows)
    assert http.post(f"{b}/memories", json={"items": [item]}).status_code == 200
    assert sorted(r["id"] for r in listed(http, b)) == ids


def test_facts_follow_each_other_within_their_document(http: httpx.Client) -> None:
    """Two items of one document: every fact its own memory id, the second item's after the first's, and an
    append continues after them."""
    b = new_bank()
    items = [{"content": "Ann sails. Ann swims.", "document_id": "log"},
             {"content": "Ann rests.", "document_id": "log"}]
    assert http.post(f"{b}/memories", json={"items": items}).json()["memories"] == 3
    appended = {"content": "Ann reads. Ann sleeps.", "document_id": "log", "update_mode": "append"}
    assert http.post(f"{b}/memories", json={"items": [appended]}).json()["memories"] == 2
    rows = listed(http, b, document_id="log")
    assert len({r["id"] for r in rows}) == 5
    document = http.get(f"{b}/documents/log").json()
    assert document["memory_unit_count"] == 5


def test_a_facts_entities_resolve_against_the_banks(http: httpx.Client, llm: FixtureServer) -> None:
    """An entity the bank has, named in another case, is that entity; one it has not is a new entity."""
    b = new_bank()
    llm.script("POST", PATH, facts_reply(fact("Ines joined Helios Robotics.", entities=["Ines", "Helios Robotics"])))
    assert http.post(f"{b}/memories", json={"items": [{"content": "Ines joined Helios."}]}).status_code == 200
    llm.script("POST", PATH, facts_reply(fact("Ines moved to Porto for HELIOS ROBOTICS.",
                                              entities=["ines", "HELIOS ROBOTICS", "Porto"])))
    assert http.post(f"{b}/memories", json={"items": [{"content": "Ines moved."}]}).status_code == 200
    entities = {e["canonical_name"]: e["mention_count"]
                for e in http.get(f"{b}/entities", params={"limit": 100}).json()["items"]}
    assert entities == {"Ines": 2, "Helios Robotics": 2, "Porto": 1}


def test_causes_in_a_reply_become_causal_links(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank()
    reply = {"facts": [fact("Dana's flight was cancelled.", entities=["Dana"]),
                       fact("Dana missed the conference in Oslo.", entities=["Dana", "Oslo"],
                            causal_relations=[{"target_index": 0, "relation_type": "caused_by"}])]}
    llm.script("POST", PATH, openai_reply(json.dumps(reply)))
    stored = http.post(f"{b}/memories", json={"items": [{"content": "Dana's trip went wrong.",
                                                          "document_id": "trip"}]}).json()
    assert stored["memories"] == 2
    ids = {r["text"]: r["id"] for r in listed(http, b)}
    cause, effect = ids["Dana's flight was cancelled."], ids["Dana missed the conference in Oslo."]
    edges = {(e["data"]["source"], e["data"]["target"], e["data"]["linkType"])
             for e in http.get(f"{b}/graph").json()["edges"]}
    assert (cause, effect, "causes") in edges and (effect, cause, "caused_by") in edges
    assert http.get(f"{b}/stats").json()["links_by_link_type"].get("causes") == 1


# ---- facts beat verbatim turns ---------------------------------------------------------------------------

#: a user turn stating a fact, and the long reply that echoes it among much else, as chat logs go
USER_TURN = "User: I'm making a photo album for my sister Maya's 30th birthday. Any tips?"
ASSISTANT_TURN = (
    "Assistant: What a lovely idea! A photo album for your sister Maya's 30th birthday is a gift she will treasure, "
    "and making it yourself makes it even more personal. Here are some tips for your sister's album. "
    "1. Start early: gathering photos from family and friends always takes longer than you expect, so ask your "
    "parents, cousins and your sister's closest friends to send you their favourite pictures of her. "
    "2. Pick a theme: you could tell the story of her life decade by decade, or organise the album around the "
    "places she has lived, the trips you took together, or the moments she would call her best. "
    "3. Mix in mementos: ticket stubs, postcards, pressed flowers and handwritten notes make the pages feel alive. "
    "4. Add captions: a short line under each photo, a date, a place or an inside joke, helps her remember. "
    "5. Ask for messages: invite the people who love her to write a few sentences for a page of wishes. "
    "6. Personalise the cover: have your sister's name, Maya, embossed on it with the year she was born. "
    "7. Choose good materials: acid-free paper and a sturdy binding keep the album looking new for decades. "
    "8. Leave a few empty pages at the end so that she can keep adding memories after her birthday. "
    "I hope your sister Maya loves it, and happy 30th birthday to her!")
#: what a model makes of each turn
USER_FACT = "The user's sister is named Maya; she turns 30 and the user is making her a photo album."
ASSISTANT_FACT = ("The assistant suggested tips for the photo album for Maya: start early, pick a theme, add "
                  "mementos, captions and messages from friends, emboss Maya's name on the cover, use acid-free paper.")


def test_a_fact_outranks_the_turns_that_echo_it(
        http: httpx.Client, llm: FixtureServer, serve: Callable[..., ServerThread]) -> None:
    """The same two turns, stored verbatim and through the model, asked about the user's fact with the default
    recall: verbatim, the assistant's echo says more of the question's words and ranks above the user's own
    turn (in spite of the bank's length prior); through the model, the user's fact ranks first."""
    question = {"query": "What is my sister's name?"}
    verbatim_url = serve().url  # no retain model: every turn is one memory
    verbatim, through = new_bank(), new_bank()
    with httpx.Client(base_url=verbatim_url, headers=EXTRAS, timeout=60) as plain:
        for turn in (USER_TURN, ASSISTANT_TURN):  # one request per turn, as a chat log is retained
            assert plain.post(f"{verbatim}/memories", json={"items": [{"content": turn}]}).json()["verbatim"] is True
        ranked = [r["text"] for r in plain.post(f"{verbatim}/memories/recall", json=question).json()["results"]]
    assert llm.requests_to("POST", PATH) == []
    assert sorted(ranked) == sorted([USER_TURN, ASSISTANT_TURN]) and ranked[0] == ASSISTANT_TURN

    for turn, what in ((USER_TURN, USER_FACT), (ASSISTANT_TURN, ASSISTANT_FACT)):
        llm.script("POST", PATH, facts_reply(fact(what, entities=["Maya"])))
        assert http.post(f"{through}/memories", json={"items": [{"content": turn}]}).json()["memories"] == 1
    ranked = [r["text"] for r in http.post(f"{through}/memories/recall", json=question).json()["results"]]
    assert sorted(ranked) == sorted([USER_FACT, ASSISTANT_FACT]) and ranked[0] == USER_FACT


# ---- a model that fails writes nothing --------------------------------------------------------------------

BATCH = [{"content": "Erin keeps bees in Lyon.", "document_id": "bees"},
         {"content": "Erin sells honey on Sundays.", "document_id": "honey"}]


@pytest.mark.parametrize(("replies", "status", "code", "says"), [
    ([Reply(500, {"error": {"message": "the model crashed"}})] * 4, 502, "llm_error", "answered HTTP 500"),
    ([Reply(delay=3, body={})] * 4, 504, "llm_timeout", "did not answer within"),
    ([openai_reply("this is not JSON")] * 4, 502, "llm_invalid_output", "after one repair"),
], ids=["error", "timeout", "malformed"])
def test_a_model_that_fails_fails_the_retain_and_writes_nothing(
        http: httpx.Client, llm: FixtureServer, replies: list[Reply], status: int, code: str, says: str) -> None:
    b = new_bank()
    kept = http.post(f"{b}/memories", json={"items": [{"content": "Erin had one hive.", "document_id": "bees"}]})
    before = sorted(r["text"] for r in listed(http, b))
    assert kept.status_code == 200 and before == ["Erin had one hive."]
    llm.script("POST", PATH, *replies)  # each of the two items' first try and its retry (or repair)
    failed = http.post(f"{b}/memories", json={"items": BATCH})
    assert failed.status_code == status
    error = failed.json()
    assert error["code"] == code and says in error["message"] and "were not retained" in error["message"]
    assert sorted(r["text"] for r in listed(http, b)) == before  # the re-sent document kept its old memory
    assert http.get(f"{b}/documents/honey").status_code == 404


# ---- async retains --------------------------------------------------------------------------------------


def test_an_async_retain_extracts_in_its_chunks_and_completes(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank()
    queued = http.post(f"{b}/memories", json={"items": [{"content": CHAT, "document_id": "chat"},
                                                        {"content": "Carol paints. Carol sings."}],
                                              "async": True}).json()
    assert queued["async"] is True and queued["operation_id"] and queued.get("usage") is None
    done = wait_for_operation(http, b, queued["operation_id"], "completed")
    result = done["result_metadata"]
    assert result["verbatim"] is False and result["memories"] == len(CHAT_FACTS) + 2
    assert result["usage"]["input_tokens"] > 0 and result["processed"] == 2
    assert sorted(r["text"] for r in listed(http, b)) == sorted([*CHAT_FACTS, "Carol paints.", "Carol sings."])
    assert len(extractions(llm)) == 2


def test_a_failed_async_retain_resumes_after_its_committed_chunk(http: httpx.Client, llm: FixtureServer) -> None:
    """The first chunk commits, the second's model fails: the operation fails naming the model's problem; retried,
    it extracts only the chunk that did not commit, and no fact is written twice."""
    b = new_bank()
    first = json.dumps({"facts": [fact("Gus bakes bread."), fact("Gus sells bread.")]})
    llm.script("POST", PATH, openai_reply(first), *[Reply(500, {"error": {"message": "overloaded"}})] * 2)
    items = [{"content": "Gus bakes and sells bread.", "document_id": "gus"},
             {"content": "Hana runs. Hana swims.", "document_id": "hana"}]
    operation_id = http.post(f"{b}/memories", json={"items": items, "async": True}).json()["operation_id"]
    failed = wait_for_operation(http, b, operation_id, "failed")
    assert "answered HTTP 500" in failed["error_message"] and failed["result_metadata"]["processed"] == 1
    assert sorted(r["text"] for r in listed(http, b)) == ["Gus bakes bread.", "Gus sells bread."]

    assert http.post(f"{b}/operations/{operation_id}/retry").status_code == 200
    wait_for_operation(http, b, operation_id, "completed")
    texts = [r["text"] for r in listed(http, b)]
    assert sorted(texts) == ["Gus bakes bread.", "Gus sells bread.", "Hana runs.", "Hana swims."]
    asked = extractions(llm)
    assert sum("Gus bakes and sells bread." in m for m in asked) == 1  # the committed chunk, asked once
    assert sum("Hana runs." in m for m in asked) == 3  # twice failing, once on the retry


# ---- what the model cost, on /metrics ---------------------------------------------------------------------

def spent(http: httpx.Client) -> dict[str, float]:
    """The retain model's counters on ``/metrics``: ``calls``, and tokens by kind (``input``, ``output``)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "hindsight_retain_llm_calls_total":
                found["calls"] = sample.value
            elif sample.name == "hindsight_retain_llm_tokens_total":
                found[sample.labels["kind"]] = sample.value
    return found


def grew(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in after}


def test_metrics_count_the_model_calls_and_tokens_of_retains(http: httpx.Client, llm: FixtureServer) -> None:
    """A synchronous retain, an async one and a failed one: the counters grow by the calls made and the
    tokens the answers' ``usage`` reports; a failed extraction adds nothing."""
    b = new_bank()
    start = spent(http)
    usage = http.post(f"{b}/memories", json={"items": [{"content": CHAT}]}).json()["usage"]
    after_sync = spent(http)
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert grew(start, after_sync) == {"calls": 1, "input": usage["input_tokens"], "output": usage["output_tokens"]}

    items = [{"content": "Ivo fishes.", "document_id": "ivo"}, {"content": "Jo rows.", "document_id": "jo"}]
    queued = http.post(f"{b}/memories", json={"items": items, "async": True}).json()
    usage = wait_for_operation(http, b, queued["operation_id"], "completed")["result_metadata"]["usage"]
    after_async = spent(http)
    assert grew(after_sync, after_async) == {"calls": 2, "input": usage["input_tokens"],
                                             "output": usage["output_tokens"]}
    assert len(extractions(llm)) == 3

    llm.script("POST", PATH, *[Reply(500, {"error": {"message": "overloaded"}})] * 2)
    assert http.post(f"{b}/memories", json={"items": [{"content": "Kim hikes."}]}).status_code == 502
    assert spent(http) == after_async


# ---- without a model ------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings", [{}, {"retain_llm_provider": "none"}], ids=["no-model", "retain-model-off"])
def test_without_a_retain_model_items_are_stored_verbatim(
        serve: Callable[..., ServerThread], llm: FixtureServer, settings: dict[str, Any]) -> None:
    model = stand_in_settings(llm, **RETRY) if settings else {}
    url = serve(**model, **settings).url
    b = new_bank()
    with httpx.Client(base_url=url, headers=EXTRAS, timeout=60) as http:
        answer = http.post(f"{b}/memories", json={"items": [{"content": CHAT}]}).json()
        assert answer["verbatim"] is True and answer["usage"] is None and answer["memories"] == 1
        assert [r["text"] for r in listed(http, b)] == [CHAT]
    plain = httpx.post(f"{url}{b}/memories", json={"items": [{"content": "Bob likes tea."}]}, timeout=60).json()
    assert plain == {"success": True, "bank_id": b.rsplit("/", 1)[1], "items_count": 1, "async": False}
    assert llm.requests_to("POST", PATH) == []
