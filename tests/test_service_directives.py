"""Directives (stored, listed, changed, deleted; given to reflect's model; in bank templates), the
mental-model and knowledge-base routes that read what is stored (nothing: an empty list, a 404 by id),
the observation routes that need no model, and the (empty) trace of model calls, over ``serve``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.http_server import FixtureServer
from hindsight_recall.testing.llm_server import STAND_IN_KEY
from hindsight_recall.testing.service import ServerThread

KEY = STAND_IN_KEY


@pytest.fixture(scope="module")
def server(llm: FixtureServer, serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(llm_provider="openai", llm_base_url=llm.url + "/v1", llm_api_key=KEY, llm_model="stub-model",
                 llm_max_retries=1, llm_timeout=5)


@pytest.fixture
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers=EXTRAS) as c:
        yield c


def fresh(http: httpx.Client) -> str:
    bank = f"dir-{uuid.uuid4().hex[:8]}"
    assert http.put(f"/v1/default/banks/{bank}", json={"name": "D"}).status_code == 200
    return f"/v1/default/banks/{bank}"


def test_a_directive_is_stored_listed_changed_and_deleted(http: httpx.Client) -> None:
    b = fresh(http)
    made = http.post(f"{b}/directives", json={"name": "Formal", "content": "Answer formally.", "priority": 5,
                                              "tags": ["work", "work", " "]})
    assert made.status_code == 200
    directive = made.json()
    assert directive["tags"] == ["work"] and directive["is_active"] and directive["priority"] == 5
    low = http.post(f"{b}/directives", json={"name": "Short", "content": "Be brief."}).json()
    assert [d["name"] for d in http.get(f"{b}/directives").json()["items"]] == ["Formal", "Short"]
    assert http.get(f"{b}/directives/{directive['id']}").json()["content"] == "Answer formally."
    changed = http.patch(f"{b}/directives/{low['id']}", json={"priority": 9, "is_active": False}).json()
    assert changed["priority"] == 9 and not changed["is_active"] and changed["updated_at"] >= low["updated_at"]
    assert [d["name"] for d in http.get(f"{b}/directives").json()["items"]] == ["Formal"]
    listed = http.get(f"{b}/directives", params={"active_only": "false"}).json()
    assert [d["name"] for d in listed["items"]] == ["Short", "Formal"] and listed["total"] == 2
    # a scope: untagged directives are in every scope, tagged ones only where their tags match
    scoped = http.get(f"{b}/directives", params={"tags": "home", "active_only": "false"}).json()
    assert [d["name"] for d in scoped["items"]] == ["Short"]
    assert http.get(f"{b}/directives", params={"tags": "work", "tags_match": "exact"}).json()["total"] == 1
    assert http.delete(f"{b}/directives/{low['id']}").json() == {"status": "deleted"}
    assert http.delete(f"{b}/directives/{low['id']}").status_code == 404
    assert http.get(f"{b}/directives/{low['id']}").status_code == 404


def test_bad_directives_are_refused(http: httpx.Client) -> None:
    b = fresh(http)
    for body in ({"name": "x"}, {"content": "y"}, {"name": "", "content": "y"}, {"name": "x", "content": "a\x00b"},
                 {"name": "x", "content": "y", "priority": "high"}, {"name": "x", "content": "y", "extra": 1}):
        refused = http.post(f"{b}/directives", json=body)
        assert refused.status_code == 422 and refused.json()["code"] == "invalid_request", body
    assert http.get(f"{b}/directives/not-a-uuid").status_code == 404
    assert http.patch(f"{b}/directives/{uuid.uuid4()}", json={"name": "n"}).status_code == 404
    assert http.get(f"{b}/directives", params={"tags_match": "some"}).status_code == 400
    assert http.get(f"{b}/directives", params={"limit": "0"}).status_code == 400
    assert http.get(f"{b}-nope/directives").status_code == 404


def test_reflect_follows_the_banks_active_directives(http: httpx.Client, llm: FixtureServer) -> None:
    b = fresh(http)
    http.post(f"{b}/memories", json={"items": [{"content": "Alice works at Helios Robotics."}]})
    http.post(f"{b}/directives", json={"name": "Pirate", "content": "Speak like a pirate.", "priority": 1})
    http.post(f"{b}/directives", json={"name": "Off", "content": "Never mention robots.", "is_active": False})
    http.post(f"{b}/directives", json={"name": "Work only", "content": "Cite the employer.", "tags": ["work"]})
    llm.reset()
    assert http.post(f"{b}/reflect", json={"query": "Where does Alice work?"}).status_code == 200
    system = llm.requests_to("POST", "/v1/chat/completions")[-1].body["messages"][0]["content"]
    assert "Pirate: Speak like a pirate." in system
    assert "Never mention robots" not in system and "Cite the employer" not in system
    http.post(f"{b}/reflect", json={"query": "Where does Alice work?", "tags": ["work"]})
    system = llm.requests_to("POST", "/v1/chat/completions")[-1].body["messages"][0]["content"]
    assert "Cite the employer" in system


def test_mental_models_and_the_knowledge_base_read_what_is_stored(http: httpx.Client) -> None:
    b = fresh(http)
    assert http.get(f"{b}/mental-models").json() == {"items": [], "total": 0, "limit": 100, "offset": 0}
    for method, path in (("GET", "m1"), ("PATCH", "m1"), ("DELETE", "m1"), ("GET", "m1/history"),
                         ("POST", "m1/clear")):
        missing = http.request(method, f"{b}/mental-models/{path}", json={})
        assert missing.status_code == 404 and missing.json()["code"] == "mental_model_not_found"
    assert http.get(f"{b}/knowledge-base/tree").json() == {"roots": []}
    assert http.get(f"{b}/knowledge-base/export").json() == {"files": []}
    assert http.get(f"{b}/knowledge-base/search", params={"q": "x"}).json() == {"results": [], "total": 0}
    assert http.get(f"{b}/knowledge-base/search").status_code == 422
    assert http.get(f"{b}/knowledge-base/pages/p1").status_code == 404
    assert http.delete(f"{b}/knowledge-base/nodes/n1").status_code == 404
    assert http.get(f"{b}-nope/mental-models").status_code == 404
    # writing one is a model's work: 501 naming why
    refused = http.post(f"{b}/mental-models", json={"name": "n", "source_query": "q"})
    assert refused.status_code == 501 and "written by a model" in refused.json()["message"]


def test_a_bank_template_carries_its_directives(http: httpx.Client) -> None:
    b = fresh(http)
    http.post(f"{b}/directives", json={"name": "Formal", "content": "Answer formally.", "priority": 2,
                                       "tags": ["work"]})
    http.post(f"{b}/directives", json={"name": "Off", "content": "Unused.", "is_active": False})
    template = http.get(f"{b}/export").json()
    assert template["directives"] == [
        {"name": "Formal", "content": "Answer formally.", "priority": 2, "is_active": True, "tags": ["work"]},
        {"name": "Off", "content": "Unused.", "priority": 0, "is_active": False, "tags": []}]
    other = fresh(http)
    http.post(f"{other}/directives", json={"name": "Formal", "content": "Old wording."})
    dry = http.post(f"{other}/import", params={"dry_run": "true"}, json=template).json()
    assert (dry["directives_created"], dry["directives_updated"]) == (["Off"], ["Formal"])
    assert [d["content"] for d in http.get(f"{other}/directives").json()["items"]] == ["Old wording."]
    applied = http.post(f"{other}/import", json=template).json()
    assert (applied["directives_created"], applied["directives_updated"]) == (["Off"], ["Formal"])
    assert http.get(f"{other}/export").json()["directives"] == template["directives"]
    bad = http.post(f"{other}/import", json={"version": "1", "directives": [{"name": "No content"}]})
    assert bad.status_code == 400 and "directives" in bad.json()["message"]
    assert http.post(f"{other}/import", json={"version": "1", "directives": "x"}).status_code == 400


def test_observations_are_cleared_and_their_scopes_listed(http: httpx.Client) -> None:
    b = fresh(http)
    bank = b.rsplit("/", 1)[1]
    memories = [
        {"id": "s1", "text": "Alice swims on Mondays.", "bank": bank},
        {"id": "s2", "text": "Alice swims on Fridays.", "bank": bank},
        {"id": "o1", "text": "Alice swims twice a week.", "type": "observation", "sources": ["s1", "s2"],
         "tags": ["sport", "alice"], "bank": bank},
        {"id": "o2", "text": "Alice likes water.", "type": "observation", "sources": ["s2"], "tags": ["alice", "sport"],
         "bank": bank},
        {"id": "o3", "text": "Mondays are busy.", "type": "observation", "sources": ["s1"], "bank": bank},
    ]
    assert http.post("/v1/default/memories/import", json={"memories": memories}).status_code == 200
    scopes = http.get(f"{b}/observations/scopes").json()
    assert scopes["scopes"] == [{"tags": ["alice", "sport"], "count": 2}, {"tags": [], "count": 1}]
    assert scopes["total"] == 2 and len(http.get(f"{b}/observations/scopes", params={"limit": 1}).json()["scopes"]) \
        == 1
    assert http.delete(f"{b}/memories/s1/observations").json() == {"deleted_count": 2}
    assert http.get(f"{b}/memories/o1").status_code == 404 and http.get(f"{b}/memories/o2").status_code == 200
    assert http.get(f"{b}/memories/s1").status_code == 200
    assert http.delete(f"{b}/memories/nobody/observations").status_code == 404
    cleared = http.delete(f"{b}/observations").json()
    assert cleared["success"] and cleared["deleted_count"] == 1
    assert http.get(f"{b}/observations/scopes").json()["scopes"] == []
    assert http.get(f"{b}/memories/list").json()["total"] == 2
    assert http.get(f"{b}-nope/observations/scopes").status_code == 404


def test_model_calls_are_not_traced_so_none_are_listed(http: httpx.Client) -> None:
    b = fresh(http)
    listed = http.get(f"{b}/llm-requests").json()
    assert listed["items"] == [] and listed["total"] == 0
    stats = http.get(f"{b}/llm-requests/stats", params={"period": "1d"}).json()
    assert stats["buckets"] == [] and stats["period"] == "1d"
    assert http.get(f"{b}-nope/llm-requests").status_code == 404
