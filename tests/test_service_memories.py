"""Memory routes through upstream's own client (``hindsight-client==1.1.0``) against a real ``serve``:
list (filters, search, pagination, total), get, edit (a re-retain: re-embedded, re-linked), history,
clear, tags, and bad query input answered 400 naming the field."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
import httpx  # noqa: E402
from hindsight_client.hindsight_client import _run_async  # noqa: E402
from hindsight_client_api.exceptions import ApiException  # noqa: E402
from hindsight_client_api.models import UpdateMemoryRequest  # noqa: E402
from hindsight_recall.service.wire import EXTRAS  # noqa: E402

B = "/v1/default/banks"
ITEMS = [
    {"content": "Gus bakes sourdough bread every Sunday.", "timestamp": "2024-01-10T00:00:00Z",
     "tags": ["food", "user:gus"], "entities": [{"text": "Gus"}], "context": "hobbies"},
    {"content": "Gus works as a nurse in Lyon.", "timestamp": "2024-02-10T00:00:00Z", "tags": ["work", "user:gus"],
     "entities": [{"text": "Gus"}, {"text": "Lyon"}]},
    {"content": "Hana climbs in the Alps.", "timestamp": "2024-03-10T00:00:00Z", "tags": ["sport", "user:hana"],
     "entities": [{"text": "Hana"}]},
    {"content": "The weather was rainy all week.", "timestamp": "2024-04-10T00:00:00Z"},
]


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True)


@pytest.fixture(scope="module")
def service_url(server: Any) -> str:
    return str(server.url)


@pytest.fixture
def client(service_url: str) -> Iterator[Any]:
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as c:
        yield c


@pytest.fixture
def http(service_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(headers=EXTRAS, base_url=service_url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def bank(service_url: str) -> str:
    bank_id = f"mem-{uuid.uuid4().hex[:10]}"
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as c:
        c.retain_batch(bank_id, ITEMS, document_id="diary")
    return bank_id


def new_bank() -> str:
    return f"mem-{uuid.uuid4().hex[:10]}"


def texts(listed: Any) -> list[str]:
    return [m.text for m in listed.items]


# --- list ---------------------------------------------------------------------------------------

def test_list_pages_with_total(client: Any, bank: str) -> None:
    first = client.list_memories(bank, limit=3)
    rest = client.list_memories(bank, limit=3, offset=3)
    assert first.total == rest.total == 4 and len(first.items) == 3 and len(rest.items) == 1
    assert set(texts(first) + texts(rest)) == {i["content"] for i in ITEMS}
    assert texts(first)[0] == "The weather was rainy all week."  # newest mention first


def test_list_search_is_a_substring_of_text_or_context(client: Any, bank: str) -> None:
    assert texts(client.list_memories(bank, search_query="SOURDOUGH")) == [ITEMS[0]["content"]]
    assert texts(client.list_memories(bank, search_query="hobbies")) == [ITEMS[0]["content"]]
    assert client.list_memories(bank, search_query="100%_").total == 0


@pytest.mark.parametrize(("tags", "match", "expected"), [
    (["user:gus"], "any", {0, 1, 3}), (["user:gus"], "any_strict", {0, 1}), (["food", "user:gus"], "all_strict", {0}),
    (["food", "sport"], "any_strict", {0, 2}), ([], "exact", {3}), (["work", "user:gus"], "exact", {1}),
])
def test_list_tag_filters(client: Any, bank: str, tags: list[str], match: str, expected: set[int]) -> None:
    listed = client.list_memories(bank, tags=tags or None, tags_match=match)
    assert set(texts(listed)) == {ITEMS[i]["content"] for i in expected}


def test_list_by_entity_document_and_type(client: Any, http: httpx.Client, bank: str, server: Any) -> None:
    from hindsight_recall.retain.ingest import entity_id

    gus = str(entity_id(bank, "Gus"))
    assert set(texts(client.list_memories(bank, entity_id=gus))) == {ITEMS[0]["content"], ITEMS[1]["content"]}
    assert client.list_memories(bank, entity_id=str(uuid.uuid4())).total == 0
    assert client.list_memories(bank, document_id="diary").total == 4
    assert client.list_memories(bank, document_id="other").total == 0
    assert client.list_memories(bank, type="world").total == 4
    assert client.list_memories(bank, type="observation").total == 0


def test_list_time_window(client: Any, bank: str) -> None:
    window = client.list_memories(bank, time_field="mentioned_at", start_date="2024-02-01T00:00:00Z",
                                  end_date="2024-04-10T00:00:00Z")
    assert texts(window) == ["Hana climbs in the Alps.", "Gus works as a nurse in Lyon."]  # end is exclusive
    assert client.list_memories(bank, start_date="2000-01-01").total == 4  # created_at by default
    assert client.list_memories(bank, time_field="occurred_end", end_date="2024-01-11").total == 1


def test_list_states(client: Any, bank: str) -> None:
    assert client.list_memories(bank, state="valid").total == 4
    assert client.list_memories(bank, state="invalidated").total == 0


async def test_alist_memories(service_url: str, bank: str) -> None:
    client = hindsight_client.Hindsight(base_url=service_url, timeout=120)
    try:
        listed = await client.alist_memories(bank, search_query="Alps", tags=["sport"], tags_match="all_strict")
        assert [m.text for m in listed.items] == ["Hana climbs in the Alps."] and listed.total == 1
    finally:
        await client.aclose()


def test_list_of_an_unknown_bank_is_empty(client: Any) -> None:
    listed = client.list_memories(new_bank())
    assert listed.total == 0 and listed.items == []


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": str(10**30)}, "limit"), ({"offset": str(2**63)}, "offset"), ({"offset": str(10**30)}, "offset"),
    ({"limit": "\u00b2"}, "limit"), ({"limit": "\u0663"}, "limit"), ({"limit": "-5"}, "limit"),
    ({"q": "a\u0000b"}, "q"), ({"document_id": "\u0000"}, "document_id"), ({"tags": "x\u0000"}, "tags"),
    ({"type": "opinion"}, "type"), ({"tags_match": "most"}, "tags_match"), ({"state": "gone"}, "state"),
    ({"time_field": "birthday"}, "time_field"), ({"start_date": "yesterday"}, "start_date"),
    ({"start_date": "2024-02-01", "end_date": "2024-01-01"}, "start_date"), ({"entity_id": "gus"}, "entity_id"),
    ({"consolidation_state": "pending"}, "consolidation_state"),
])
def test_list_bad_query_is_400_naming_it(http: httpx.Client, bank: str, params: dict[str, str], field: str) -> None:
    response = http.get(f"{B}/{bank}/memories/list", params=params)
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith(f"{field}:")


def test_largest_accepted_page_is_served(http: httpx.Client, bank: str) -> None:
    response = http.get(f"{B}/{bank}/memories/list", params={"limit": str(2**31 - 1), "offset": str(2**31 - 1)})
    assert response.status_code == 200 and response.json()["items"] == [] and response.json()["total"] == 4


# --- get and history ----------------------------------------------------------------------------

def test_get_memory_and_its_history(client: Any, bank: str) -> None:
    memory_id = client.list_memories(bank, search_query="nurse").items[0].id
    found = _run_async(client.memory.get_memory(bank, memory_id))
    assert found["text"] == "Gus works as a nurse in Lyon." and found["tags"] == ["work", "user:gus"]
    assert "Lyon" in found["entities"] and found["history"] == []
    assert _run_async(client.memory.get_observation_history(bank, memory_id)) == []


@pytest.mark.parametrize("call", ["get_memory", "get_observation_history"])
def test_get_of_a_missing_memory_is_404(client: Any, bank: str, call: str) -> None:
    with pytest.raises(ApiException) as caught:
        _run_async(getattr(client.memory, call)(bank, str(uuid.uuid4())))
    assert caught.value.status == 404


# --- edit ---------------------------------------------------------------------------------------

def fresh_bank(client: Any) -> tuple[str, dict[str, str]]:
    bank_id = new_bank()
    client.retain_batch(bank_id, [
        {"content": "Ivo plays the violin.", "timestamp": "2023-05-01T00:00:00Z", "tags": ["music"],
         "entities": [{"text": "Ivo"}], "context": "intro"},
        {"content": "Ivo teaches physics at a school in Graz.", "timestamp": "2023-05-02T00:00:00Z"},
    ], document_id="ivo")
    ids = {m.text.split()[1]: m.id for m in client.list_memories(bank_id).items}
    return bank_id, ids


def test_edit_text_is_reembedded_and_recalled(client: Any) -> None:
    bank_id, ids = fresh_bank(client)
    edited = _run_async(client.memory.update_memory(bank_id, ids["plays"], UpdateMemoryRequest(
        text="Ivo plays the cello in a string quartet.")))
    assert edited["text"] == "Ivo plays the cello in a string quartet." and edited["id"] == ids["plays"]
    assert edited["tags"] == ["music"] and edited["context"] == "intro" and "Ivo" in edited["entities"]
    assert edited["mentioned_at"].startswith("2023-05-01") and edited["document_id"] == "ivo"
    results = client.recall(bank_id, "Which instrument does Ivo play in a quartet?").results
    assert results[0].text == "Ivo plays the cello in a string quartet."
    assert client.list_memories(bank_id).total == 2


def test_edit_rebuilds_the_memorys_links(client: Any) -> None:
    bank_id, ids = fresh_bank(client)

    def semantic() -> int:
        return int(_run_async(client.banks.get_agent_stats(bank_id)).links_by_link_type.get("semantic", 0))

    assert semantic() == 0  # the violin and the physics lessons are far apart
    _run_async(client.memory.update_memory(bank_id, ids["teaches"], UpdateMemoryRequest(
        text="Ivo plays the violin in an orchestra.")))
    assert semantic() > 0  # now a near twin of the other memory
    _run_async(client.memory.update_memory(bank_id, ids["teaches"], UpdateMemoryRequest(
        text="The trams in Graz run every ten minutes.")))
    stats = _run_async(client.banks.get_agent_stats(bank_id))
    assert semantic() == 0 and stats.total_nodes == 2 and "temporal" not in stats.links_by_link_type


def test_edit_dates_tags_type_and_entities(client: Any) -> None:
    bank_id, ids = fresh_bank(client)
    memory = ids["teaches"]
    edited = _run_async(client.memory.update_memory(bank_id, memory, UpdateMemoryRequest(
        occurred_start="2020-01-01T00:00:00Z", fact_type="experience", entities=["Ivo", "Graz"], context="job")))
    assert edited["occurred_start"].startswith("2020-01-01") and edited["fact_type"] == "experience"
    assert edited["entities"] == "Graz, Ivo" and edited["context"] == "job"
    cleared = _run_async(client.memory.update_memory(bank_id, memory, UpdateMemoryRequest(
        occurred_start=None, mentioned_at="", context="")))
    assert cleared["occurred_start"] is None and cleared["mentioned_at"] is None and cleared["context"] == ""
    assert cleared["occurred_end"].startswith("2023-05-02")  # not named: kept
    tagged = httpx.patch(f"{client._base_url}{B}/{bank_id}/memories/{memory}", json={"tags": ["job", "job", " "]},
                         timeout=60).json()
    assert tagged["tags"] == ["job"] and tagged["fact_type"] == "experience"
    assert client.list_memories(bank_id, tags=["job"], tags_match="all_strict").total == 1


async def test_aupdate_memory(service_url: str) -> None:
    client = hindsight_client.Hindsight(base_url=service_url, timeout=120)
    try:
        bank_id = new_bank()
        await client.aretain(bank_id, "Jo drives a tram.", document_id="jo")
        memory_id = (await client.alist_memories(bank_id)).items[0].id
        edited = await client.memory.update_memory(bank_id, memory_id, UpdateMemoryRequest(text="Jo drives a bus."))
        assert edited["text"] == "Jo drives a bus."
        assert (await client.alist_memories(bank_id, search_query="bus")).total == 1
    finally:
        await client.aclose()


@pytest.mark.parametrize(("body", "status", "field"), [
    ({}, 422, "body"), ({"text": ""}, 400, "text"), ({"text": "a\u0000"}, 400, "text"),
    ({"fact_type": "observation"}, 422, "fact_type"), ({"state": "retired"}, 422, "state"),
    ({"mentioned_at": "soon"}, 400, "mentioned_at"), ({"mentioned_at": "20000-01-01"}, 400, "mentioned_at"),
    ({"tags": ["x" * 2000]}, 400, "tags"), ({"colour": "red"}, 422, "colour"),
])
def test_bad_edits_are_refused_naming_the_field(client: Any, http: httpx.Client, body: dict[str, Any], status: int,
                                                field: str) -> None:
    bank_id, ids = fresh_bank(client)
    response = http.patch(f"{B}/{bank_id}/memories/{ids['plays']}", json=body)
    assert response.status_code == status, response.text
    assert field in response.json()["message"]
    assert client.list_memories(bank_id, search_query="violin").total == 1  # unchanged


def test_an_invalidated_memory_leaves_recall_until_restored(client: Any, http: httpx.Client) -> None:
    bank_id, ids = fresh_bank(client)
    plays = ids["plays"]

    def recalled() -> list[str]:
        return [r.id for r in client.recall(bank_id, "What does Ivo play?").results]

    assert plays in recalled()
    retired = http.patch(f"{B}/{bank_id}/memories/{plays}", json={"state": "invalidated", "reason": "sold it"})
    assert retired.status_code == 200, retired.text
    assert retired.json()["state"] == "invalidated" and retired.json()["invalidation_reason"] == "sold it"
    assert plays not in recalled()
    assert [m.id for m in client.list_memories(bank_id).items] == [ids["teaches"]]
    listed = client.list_memories(bank_id, state="invalidated")
    assert listed.total == 1 and listed.items[0].id == plays and listed.items[0].text == "Ivo plays the violin."
    got = http.get(f"{B}/{bank_id}/memories/{plays}").json()
    assert got["state"] == "invalidated" and got["tags"] == ["music"] and got["context"] == "intro"
    # an edit of an invalidated memory keeps it invalidated; restoring brings it back with the edit
    http.patch(f"{B}/{bank_id}/memories/{plays}", json={"text": "Ivo plays the cello."})
    assert plays not in recalled()
    restored = http.patch(f"{B}/{bank_id}/memories/{plays}", json={"state": "valid"})
    assert restored.status_code == 200 and restored.json()["state"] == "valid"
    assert restored.json()["text"] == "Ivo plays the cello." and restored.json()["tags"] == ["music"]
    assert plays in recalled() and client.list_memories(bank_id, state="invalidated").total == 0
    # another bank never sees it
    other = new_bank()
    client.retain(other, "Ivo plays the drums.")
    assert http.get(f"{B}/{other}/memories/{plays}").status_code == 404
    http.patch(f"{B}/{bank_id}/memories/{plays}", json={"state": "invalidated"})
    assert client.list_memories(other, state="invalidated").total == 0
    client.delete_bank(bank_id)  # its invalidated memories go with it
    assert client.list_memories(bank_id, state="invalidated").total == 0


def test_edit_of_a_missing_memory_is_404(client: Any) -> None:
    bank_id, _ = fresh_bank(client)
    with pytest.raises(ApiException) as caught:
        _run_async(client.memory.update_memory(bank_id, str(uuid.uuid4()), UpdateMemoryRequest(text="x")))
    assert caught.value.status == 404


def test_state_valid_is_accepted(client: Any) -> None:
    bank_id, ids = fresh_bank(client)
    edited = _run_async(client.memory.update_memory(bank_id, ids["plays"], UpdateMemoryRequest(state="valid")))
    assert edited["state"] == "valid" and edited["text"] == "Ivo plays the violin."


def test_observations_cannot_be_edited(service_url: str, http: httpx.Client) -> None:
    bank_id = new_bank()
    memories = [{"bank": bank_id, "id": "f1", "text": "Kai runs daily.", "type": "world"},
                {"bank": bank_id, "id": "o1", "text": "Kai is fit.", "type": "observation", "sources": ["f1"]}]
    assert http.post("/v1/default/memories/import", json={"memories": memories}).status_code == 200
    response = http.patch(f"{B}/{bank_id}/memories/o1", json={"text": "Kai is very fit."})
    assert response.status_code == 400 and "observation" in response.json()["message"]
    # the history of an observation: nothing here consolidates, so there are no changes to list
    assert http.get(f"{B}/{bank_id}/memories/o1/history").json() == []


def test_an_edit_keeps_the_memorys_sources(http: httpx.Client) -> None:
    bank_id = new_bank()
    memories = [{"bank": bank_id, "id": "f1", "text": "Lea swims.", "type": "world"},
                {"bank": bank_id, "id": "f2", "text": "Lea swam again.", "type": "world", "causes": ["f1"]},
                {"bank": bank_id, "id": "o1", "text": "Lea swims often.", "type": "observation", "sources": ["f2"]}]
    assert http.post("/v1/default/memories/import", json={"memories": memories}).status_code == 200
    assert http.patch(f"{B}/{bank_id}/memories/f2", json={"text": "Lea swam twice."}).status_code == 200
    assert http.get(f"{B}/{bank_id}/memories/o1").json()["source_memory_ids"] == ["f2"]
    links = http.get(f"{B}/{bank_id}/stats").json()["links_by_link_type"]
    assert links.get("causes") == 1 and links.get("caused_by") == 1


# --- clear --------------------------------------------------------------------------------------

def test_clear_one_type_then_all(client: Any, http: httpx.Client) -> None:
    bank_id = new_bank()
    memories = [{"bank": bank_id, "id": "w", "text": "Mo sings.", "type": "world"},
                {"bank": bank_id, "id": "e", "text": "I heard Mo sing.", "type": "experience"},
                {"bank": bank_id, "id": "o", "text": "Mo is musical.", "type": "observation", "sources": ["w"]}]
    http.post("/v1/default/memories/import", json={"memories": memories})
    client.create_bank(bank_id, name="Keep me")
    cleared = _run_async(client.memory.clear_bank_memories(bank_id, type="observation"))
    assert cleared.success is True and cleared.deleted_count == 1
    assert cleared.message == f"Cleared 1 memory unit(s) of type 'observation' from bank '{bank_id}'"
    assert client.list_memories(bank_id).total == 2
    assert _run_async(client.memory.clear_bank_memories(bank_id)).deleted_count == 2
    assert client.list_memories(bank_id).total == 0
    assert _run_async(client.banks.get_bank_profile(bank_id)).name == "Keep me"  # the bank stays
    stats = http.get(f"{B}/{bank_id}/stats").json()
    assert stats["total_links"] == 0 and stats["entities"] == 0 and stats["chunks"] == 0


def test_clear_leaves_other_banks_alone(client: Any, bank: str) -> None:
    other = new_bank()
    client.retain(other, "Nia paints.")
    assert _run_async(client.memory.clear_bank_memories(other)).deleted_count == 1
    assert client.list_memories(bank).total == 4


def test_clear_of_an_unknown_bank_clears_none_and_a_bad_type_is_400(client: Any, http: httpx.Client) -> None:
    assert _run_async(client.memory.clear_bank_memories(new_bank())).deleted_count == 0
    response = http.delete(f"{B}/{new_bank()}/memories", params={"type": "opinion"})
    assert response.status_code == 400 and response.json()["message"].startswith("type:")


# --- tags ---------------------------------------------------------------------------------------

def test_list_tags_with_counts(client: Any, bank: str) -> None:
    listed = _run_async(client.memory.list_tags(bank))
    assert [(t.tag, t.count) for t in listed.items] == [
        ("user:gus", 2), ("food", 1), ("sport", 1), ("user:hana", 1), ("work", 1)]
    assert listed.total == 5 and (listed.limit, listed.offset) == (100, 0)


@pytest.mark.parametrize(("pattern", "expected"), [
    ("user:*", ["user:gus", "user:hana"]), ("*o*", ["food", "sport", "work"]), ("FOOD", ["food"]),
    ("user", []), ("user_gus", []), ("%", []),
])
def test_list_tags_by_pattern(client: Any, bank: str, pattern: str, expected: list[str]) -> None:
    assert [t.tag for t in _run_async(client.memory.list_tags(bank, q=pattern)).items] == expected


def test_list_tags_pages(client: Any, bank: str) -> None:
    page = _run_async(client.memory.list_tags(bank, limit=2, offset=1))
    assert [t.tag for t in page.items] == ["food", "sport"] and page.total == 5
    assert _run_async(client.memory.list_tags(bank, source="mental_models")).items == []


def test_list_tags_of_an_unknown_bank_is_404(client: Any, http: httpx.Client, bank: str) -> None:
    with pytest.raises(ApiException) as caught:
        _run_async(client.memory.list_tags(new_bank()))
    assert caught.value.status == 404
    for params, field in (({"limit": str(10**30)}, "limit"), ({"q": "\u0000"}, "q"), ({"source": "x"}, "source")):
        response = http.get(f"{B}/{bank}/tags", params=params)
        assert response.status_code == 400 and response.json()["message"].startswith(f"{field}:")
