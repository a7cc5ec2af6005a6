"""Reprocessing a document through ``serve``, with a chat model on 127.0.0.1 standing in for the retain model:
the document's stored items are retained again as a queued operation and its memories become the new
extraction; a model that fails keeps the old ones; an unknown document (or another bank's) is 404; without
a model the items are stored verbatim again. And the deprecated entity regeneration answers 410, as upstream.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.http_server import FixtureServer, Reply
from hindsight_recall.testing.llm_server import fact, facts_reply, stand_in_settings
from hindsight_recall.testing.service import ServerThread, wait_for_operation

PATH = "/v1/chat/completions"
GONE = "This endpoint is deprecated. Entity observations are no longer supported."
TRIP = {"content": "Dana flew to Oslo. Dana spoke at a conference.", "document_id": "trip",
        "timestamp": "2024-03-01T10:00:00Z", "context": "a travel diary", "tags": ["travel"],
        "metadata": {"source": "diary"}, "entities": [{"text": "Dana"}]}


@pytest.fixture(autouse=True)
def fresh(llm: FixtureServer) -> None:
    llm.reset()


@pytest.fixture(scope="module")
def service(llm: FixtureServer, serve: Callable[..., ServerThread]) -> str:
    return serve(**stand_in_settings(llm, llm_max_retries=1, llm_initial_backoff=0.01, llm_max_backoff=0.02,
                                    llm_timeout=2.0)).url


@pytest.fixture
def http(service: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service, timeout=60) as client:
        yield client


def new_bank() -> str:
    return f"/v1/default/banks/reprocess-{uuid.uuid4().hex[:10]}"




def listed(http: httpx.Client, b: str, document_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(f"{b}/memories/list", params={"document_id": document_id}).json()["items"]
    return sorted(items, key=lambda r: r["text"])


def extractions(llm: FixtureServer) -> list[str]:
    return [r.body["messages"][1]["content"] for r in llm.requests_to("POST", PATH)]



def reprocessed(http: httpx.Client, b: str, document_id: str, items: int) -> str:
    """Reprocess the document; its operation id, after checking upstream's answer."""
    answer = http.post(f"{b}/documents/{document_id}/reprocess")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"success", "operation_id", "items_count"}
    assert body["success"] is True and body["items_count"] == items
    operation_id: str = body["operation_id"]
    return operation_id


def test_a_reprocessed_document_holds_the_new_extraction(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank()
    assert http.post(f"{b}/memories", json={"items": [TRIP]}).status_code == 200
    before = listed(http, b, "trip")
    assert [r["text"] for r in before] == ["Dana flew to Oslo.", "Dana spoke at a conference."]

    llm.reset()
    llm.script("POST", PATH, facts_reply(fact("Dana gave a talk in Oslo.", entities=["Oslo"])))
    operation_id = reprocessed(http, b, "trip", 1)
    done = wait_for_operation(http, b, operation_id, "completed")
    assert done["result_metadata"]["memories"] == 1 and done["result_metadata"]["replaced_memories_removed"] == 1
    (asked,) = extractions(llm)  # the stored item, with its context and date, went to the model
    assert TRIP["content"] in asked and "Context: a travel diary" in asked and "source: diary" in asked

    (row,) = listed(http, b, "trip")
    # ids stay derived: the document's first memory keeps its id
    assert row["text"] == "Dana gave a talk in Oslo." and row["id"] == before[0]["id"]
    assert row["context"] == "a travel diary" and row["tags"] == ["travel"] and row["metadata"] == {"source": "diary"}
    assert row["mentioned_at"].startswith("2024-03-01T10:00") and set(row["entities"].split(", ")) == {"Dana", "Oslo"}
    document = http.get(f"{b}/documents/trip").json()
    assert document["memory_unit_count"] == 1 and document["original_text"] == TRIP["content"]

    listed_ops = http.get(f"{b}/operations").json()["operations"]
    assert [(o["id"], o["task_type"], o["status"]) for o in listed_ops] == [(operation_id, "retain", "completed")]
    history = http.get(f"{b}/documents/trip/history").json()["items"]
    assert [(e["operation_id"], e["facts_added"], e["facts_removed"]) for e in history] == [(operation_id, 1, 2)]


def test_each_stored_item_is_extracted_again_with_its_own_fields(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank()
    items = [{"content": "Ann sails. Ann swims.", "document_id": "log/2024", "timestamp": "2024-05-01T08:00:00Z",
              "context": "morning", "tags": ["sea"]},
             {"content": "Ann rests.", "document_id": "log/2024", "timestamp": "2024-05-02T20:00:00Z",
              "context": "evening", "tags": ["home"]}]
    assert http.post(f"{b}/memories", json={"items": items}).status_code == 200
    before = {r["id"]: (r["text"], r["context"], r["tags"]) for r in listed(http, b, "log/2024")}
    llm.reset()

    wait_for_operation(http, b, reprocessed(http, b, "log/2024", 2), "completed")
    asked = sorted(extractions(llm))
    assert len(asked) == 2
    assert "Ann sails. Ann swims." in asked[0] + asked[1] and "Ann rests." in asked[0] + asked[1]
    assert {"Context: morning", "Context: evening"} == {line for m in asked for line in m.splitlines()
                                                       if line.startswith("Context:")}
    assert {r["id"]: (r["text"], r["context"], r["tags"]) for r in listed(http, b, "log/2024")} == before


def test_a_model_that_fails_keeps_the_old_memories(http: httpx.Client, llm: FixtureServer) -> None:
    b = new_bank()
    assert http.post(f"{b}/memories", json={"items": [TRIP]}).status_code == 200
    before = listed(http, b, "trip")
    llm.script("POST", PATH, *[Reply(500, {"error": {"message": "the model crashed"}})] * 2)  # a try and its retry
    operation_id = reprocessed(http, b, "trip", 1)
    failed = wait_for_operation(http, b, operation_id, "failed")
    assert "answered HTTP 500" in failed["error_message"] and "not retained" in failed["error_message"]
    assert listed(http, b, "trip") == before

    # retried, it writes the new extraction once, in place of the old memories
    llm.script("POST", PATH, facts_reply(fact("Dana visited Oslo.")))
    assert http.post(f"{b}/operations/{operation_id}/retry").status_code == 200
    wait_for_operation(http, b, operation_id, "completed")
    assert [r["text"] for r in listed(http, b, "trip")] == ["Dana visited Oslo."]


def test_an_unknown_document_is_404_in_every_bank_but_its_own(http: httpx.Client) -> None:
    mine, other = new_bank(), new_bank()
    assert http.post(f"{mine}/memories", json={"items": [{"content": "Eli codes.", "document_id": "eli"}]}
                     ).status_code == 200
    assert http.post(f"{other}/memories", json={"items": [{"content": "Fay reads.", "document_id": "fay"}]}
                     ).status_code == 200
    for bank, document_id in ((other, "eli"), (mine, "nope"), (f"{mine}-nobank", "eli")):
        answer = http.post(f"{bank}/documents/{document_id}/reprocess")
        assert answer.status_code == 404 and answer.json() == {"detail": f"Document {document_id!r} not found"}
    coded = http.post(f"{other}/documents/eli/reprocess", headers=EXTRAS).json()
    assert coded["code"] == "document_not_found"
    assert http.get(f"{other}/operations").json()["operations"] == []
    assert [r["text"] for r in listed(http, mine, "eli")] == ["Eli codes."]


def test_entity_regeneration_is_gone_as_upstream(http: httpx.Client) -> None:
    b = new_bank()
    for bank in (b, f"{b}-nobank"):
        answer = http.post(f"{bank}/entities/{uuid.uuid4()}/regenerate")
        assert answer.status_code == 410 and answer.json() == {"detail": GONE}
    coded = http.post(f"{b}/entities/x/regenerate", headers=EXTRAS).json()
    assert coded == {"code": "gone", "message": GONE, "detail": GONE}


def test_without_a_model_the_items_are_stored_verbatim_again(serve: Callable[..., ServerThread]) -> None:
    """On a database of its own, so no worker of a server with a model runs its operation."""
    url = serve(own_database=True).url
    b = new_bank()
    items = [{"content": "Gil plants roses.", "document_id": "garden", "context": "spring", "tags": ["g"],
              "entities": [{"text": "Gil"}]},
             {"content": "Gil waters them.", "document_id": "garden", "timestamp": "unset"}]
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.post(f"{b}/memories", json={"items": items}).status_code == 200
        before = listed(http, b, "garden")
        done = wait_for_operation(http, b, reprocessed(http, b, "garden", 2), "completed")
        assert done["result_metadata"]["verbatim"] is True
        kept = ("id", "text", "context", "tags", "entities", "mentioned_at", "date")
        assert [{k: r[k] for k in kept} for r in listed(http, b, "garden")] == \
            [{k: r[k] for k in kept} for r in before]
        assert http.post(f"{b}/entities/{uuid.uuid4()}/regenerate").json() == {"detail": GONE}
