"""Entities, their co-occurrence graph and the bank's memory graph over HTTP, driven by upstream's
``hindsight-client==1.1.0`` and by httpx."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
from hindsight_client_api import ApiClient, Configuration  # noqa: E402
from hindsight_client_api.api import EntitiesApi, MemoryApi  # noqa: E402
from hindsight_client_api.exceptions import ApiException  # noqa: E402

ITEMS = [
    {"content": "Alice works at Google.", "timestamp": "2023-01-01T00:00:00Z", "tags": ["work"],
     "entities": [{"text": "Alice"}, {"text": "Google"}]},
    {"content": "Bob is friends with Alice.", "timestamp": "2023-02-01T00:00:00Z", "tags": ["social"],
     "entities": [{"text": "Bob"}, {"text": "Alice"}]},
    {"content": "Alice and Bob visit Google.", "timestamp": "2023-03-01T00:00:00Z", "tags": ["work"],
     "entities": [{"text": "Alice"}, {"text": "Bob"}, {"text": "Google"}]},
]


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True)


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(headers=EXTRAS, base_url=server.url, timeout=120) as c:
        yield c


def new_bank() -> str:
    return f"ent-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def bank(http: httpx.Client) -> str:
    """Alice in all three memories, Bob in two, Google in two; one document."""
    bank_id = new_bank()
    items = [{**item, "document_id": "story"} for item in ITEMS]
    assert http.post(f"/v1/default/banks/{bank_id}/memories", json={"items": items}).status_code == 200
    return bank_id


def path(bank: str, rest: str = "") -> str:
    return f"/v1/default/banks/{bank}{rest}"


async def api(server: Any, kind: type, method: str, **kwargs: Any) -> Any:
    async with ApiClient(Configuration(host=server.url)) as api_client:
        return await getattr(kind(api_client), method)(**kwargs)


def assert_error(response: httpx.Response, status: int, code: str | None = None, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert "Traceback" not in response.text and body["detail"]
    if code:
        assert body["code"] == code, body
    if field:
        assert field in body["message"], body


# ---- upstream's own client tests -----------------------------------------------------------------

async def test_list_entities_as_upstreams_suite(server: Any) -> None:
    bank_id = new_bank()
    client = hindsight_client.Hindsight(base_url=server.url, timeout=120)
    await client.aretain_batch(bank_id, [{"content": "Alice works at Google as a software engineer"},
                                         {"content": "Bob is friends with Alice and works at Microsoft"}])
    response = await api(server, EntitiesApi, "list_entities", bank_id=bank_id)
    assert isinstance(response.items, list) and response.total is not None
    assert (response.offset, response.limit) == (0, 100)
    page = await api(server, EntitiesApi, "list_entities", bank_id=bank_id, limit=5, offset=0)
    assert (page.limit, page.offset) == (5, 0) and len(page.items) <= 5
    page = await api(server, EntitiesApi, "list_entities", bank_id=bank_id, limit=1, offset=1)
    assert (page.limit, page.offset) == (1, 1)
    await client.aclose()


async def test_get_entity_as_upstreams_suite(server: Any, bank: str) -> None:
    listed = await api(server, EntitiesApi, "list_entities", bank_id=bank)
    entity_id = listed.items[0].id
    entity = await api(server, EntitiesApi, "get_entity", bank_id=bank, entity_id=entity_id)
    assert entity.id == entity_id


# ---- list ----------------------------------------------------------------------------------------

async def test_entities_are_listed_by_mentions_with_dates(server: Any, bank: str) -> None:
    client = hindsight_client.Hindsight(base_url=server.url, timeout=120)
    page = await client.entities.list_entities(bank_id=bank)  # the client's own accessor
    await client.aclose()
    assert page.total == 3 and [e.canonical_name for e in page.items][0] == "Alice"
    counts = {e.canonical_name: e.mention_count for e in page.items}
    assert counts == {"Alice": 3, "Bob": 2, "Google": 2}
    alice = page.items[0]
    assert alice.first_seen.startswith("2023-01-01") and alice.last_seen.startswith("2023-03-01")
    assert alice.metadata == {}


def test_entity_paging_search_and_tags(http: httpx.Client, bank: str) -> None:
    def names(**params: Any) -> tuple[list[str], int]:
        response = http.get(path(bank, "/entities"), params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        return [e["canonical_name"] for e in body["items"]], body["total"]

    first, total = names(limit=1)
    rest, _ = names(limit=5, offset=1)
    assert total == 3 and first == ["Alice"] and sorted(rest) == ["Bob", "Google"]
    assert names(q="goo") == (["Google"], 1)
    assert names(q="%") == ([], 0) and names(q="_") == ([], 0) and names(q="'; --") == ([], 0)
    work = http.get(path(bank, "/entities"), params={"tags": "work"}).json()["items"]
    assert {e["canonical_name"]: e["mention_count"] for e in work} == {"Alice": 2, "Bob": 1, "Google": 2}
    social = {e["canonical_name"] for e in http.get(path(bank, "/entities"), params={"tags": "social"}).json()["items"]}
    assert social == {"Alice", "Bob"}


@pytest.mark.parametrize(("route", "params", "status", "field"), [
    ("/entities", {"limit": str(10**30)}, 400, "limit"),
    ("/entities", {"offset": str(2**63)}, 400, "offset"),
    ("/entities", {"limit": "²"}, 400, "limit"),
    ("/entities", {"q": "a\x00"}, 400, "q"),
    ("/entities", {"tags_match": "most"}, 400, "tags_match"),
    ("/entities", {"tag_groups": "[]x"}, 400, "tag_groups"),
    ("/entities/graph", {"limit": "-1"}, 400, "limit"),
    ("/entities/graph", {"min_count": str(2**40)}, 400, "min_count"),
    ("/graph", {"type": "opinion"}, 400, "type"),
    ("/graph", {"limit": str(10**30)}, 400, "limit"),
    ("/graph", {"q": "\x00"}, 400, "q"),
    ("/graph", {"document_id": "a\x00"}, 400, "document_id"),
    ("/graph", {"tags": "\x00"}, 400, "tags"),
])
def test_bad_input_is_a_clear_error(http: httpx.Client, bank: str, route: str, params: dict[str, str], status: int,
                                    field: str) -> None:
    assert_error(http.get(path(bank, route), params=params), status, field=field)


def test_unknown_banks_are_404_as_upstream_reads_them(http: httpx.Client) -> None:
    other = new_bank()
    for route in ("/entities", "/entities/graph", "/graph"):
        assert_error(http.get(path(other, route)), 404, "bank_not_found")
    assert_error(http.get(path(other, f"/entities/{uuid.uuid4()}")), 404, "entity_not_found")


# ---- get -----------------------------------------------------------------------------------------

def test_an_entity_comes_with_the_memories_that_mention_it(http: httpx.Client, bank: str) -> None:
    listed = http.get(path(bank, "/entities")).json()["items"]
    ids = {e["canonical_name"]: e["id"] for e in listed}
    alice = http.get(path(bank, f"/entities/{ids['Alice']}")).json()
    assert (alice["canonical_name"], alice["mention_count"], alice["observations"]) == ("Alice", 3, [])
    assert [m["text"] for m in alice["memories"]] == [i["content"] for i in reversed(ITEMS)]
    assert alice["memories"][0]["document_id"] == "story" and alice["memories"][0]["type"] == "world"
    assert len(http.get(path(bank, f"/entities/{ids['Alice']}"), params={"limit": 1}).json()["memories"]) == 1
    social = http.get(path(bank, f"/entities/{ids['Alice']}"), params={"tags": "social"}).json()
    assert social["mention_count"] == 1 and [m["text"] for m in social["memories"]] == [ITEMS[1]["content"]]
    assert_error(http.get(path(bank, f"/entities/{ids['Google']}"), params={"tags": "social"}), 404,
                 "entity_not_found")


async def test_get_entity_errors_through_the_client(server: Any, bank: str) -> None:
    for entity_id, status in (("not-a-uuid", 400), (str(uuid.uuid4()), 404)):
        with pytest.raises(ApiException) as caught:
            await api(server, EntitiesApi, "get_entity", bank_id=bank, entity_id=entity_id)
        assert caught.value.status == status


def test_one_banks_entities_never_answer_through_another(http: httpx.Client, bank: str) -> None:
    other = new_bank()
    http.post(path(other, "/memories"), json={"items": [{"content": "Alice sings.", "entities": [{"text": "Alice"}]}]})
    mine = {e["canonical_name"]: e["id"] for e in http.get(path(bank, "/entities")).json()["items"]}
    theirs = http.get(path(other, "/entities")).json()["items"]
    assert [(e["canonical_name"], e["mention_count"]) for e in theirs] == [("Alice", 1)]
    assert theirs[0]["id"] != mine["Alice"]
    assert_error(http.get(path(other, f"/entities/{mine['Google']}")), 404, "entity_not_found")
    assert_error(http.get(path(other, f"/entities/{mine['Alice']}")), 404, "entity_not_found")
    assert http.get(path(other, "/entities/graph")).json()["edges"] == []
    nodes = http.get(path(other, "/graph")).json()["nodes"]
    assert [n["data"]["text"] for n in nodes] == ["Alice sings."]


# ---- the entity graph ----------------------------------------------------------------------------

async def test_entity_graph_counts_shared_memories(server: Any, bank: str) -> None:
    graph = await api(server, EntitiesApi, "get_entity_graph", bank_id=bank)
    names = {n.data.id: n.data.label for n in graph.nodes}
    edges = {tuple(sorted((names[e.data.source], names[e.data.target]))): e.data.weight for e in graph.edges}
    assert edges == {("Alice", "Google"): 2, ("Alice", "Bob"): 2, ("Bob", "Google"): 1}
    assert (graph.total_entities, graph.total_edges, graph.limit) == (3, 3, 1000)
    assert {n.data.label: n.data.mention_count for n in graph.nodes} == {"Alice": 3, "Bob": 2, "Google": 2}
    strongest = graph.edges[0].data
    assert strongest.link_type == "cooccurrence" and strongest.last_cooccurred.startswith("2023-03-01")
    assert strongest.id == f"{strongest.source}-{strongest.target}"


def test_entity_graph_limit_min_count_and_tags(http: httpx.Client, bank: str) -> None:
    def weights(**params: Any) -> list[int]:
        response = http.get(path(bank, "/entities/graph"), params=params)
        assert response.status_code == 200, response.text
        return [e["data"]["weight"] for e in response.json()["edges"]]

    assert weights(limit=1) == [2] and weights(min_count=2) == [2, 2] and weights(min_count=3) == []
    assert weights(min_count=-5) == [2, 2, 1]
    assert sorted(weights(tags="work")) == [1, 1, 2]  # item 3 alone links Bob; items 1 and 3 link Alice-Google


# ---- the memory graph ----------------------------------------------------------------------------

async def test_memory_graph_through_the_client(server: Any, bank: str) -> None:
    graph = await api(server, MemoryApi, "get_graph", bank_id=bank)
    assert graph.total_units == 3 and graph.limit == 1000 and len(graph.nodes) == 3 == len(graph.table_rows)
    texts = [n.data.text for n in graph.nodes]
    assert texts == [i["content"] for i in reversed(ITEMS)]  # newest first
    kinds = {e.data.link_type for e in graph.edges}
    assert "entity" in kinds and kinds & {"semantic", "temporal"}
    ids = {n.data.id for n in graph.nodes}
    assert all(e.data.source in ids and e.data.target in ids for e in graph.edges)
    entity_edges = [e.data for e in graph.edges if e.data.link_type == "entity"]
    assert {e.entity_name for e in entity_edges} == {"Alice", "Bob", "Google"}
    row = graph.table_rows[0]
    assert row.document_id == "story" and row.fact_type == "world" and row.tags == ["work"]
    assert row.entities == "Alice, Bob, Google" and row.context == "N/A"
    assert row.to_dict()["date"] == "2023-03-01 00:00"
    assert row.chunk_id and row.occurred_start.startswith("2023-03-01")


def test_memory_graph_filters(http: httpx.Client, bank: str) -> None:
    def graph(**params: Any) -> dict[str, Any]:
        response = http.get(path(bank, "/graph"), params=params)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    one = graph(limit=1)
    assert len(one["nodes"]) == 1 and one["total_units"] == 3 and one["edges"] == []
    assert graph(type="experience")["total_units"] == 0 and graph(type="world")["total_units"] == 3
    assert graph(q="BOB")["total_units"] == 2 and graph(q="%")["total_units"] == 0
    assert graph(tags="work")["total_units"] == 2 and graph(tags=["work", "social"])["total_units"] == 0
    assert graph(tags=["work", "social"], tags_match="any")["total_units"] == 3
    assert graph(document_id="story")["total_units"] == 3 and graph(document_id="other")["total_units"] == 0
    chunk_id = graph()["table_rows"][0]["chunk_id"]
    assert graph(chunk_id=chunk_id)["total_units"] == 1
    empty = graph(limit=0)
    assert empty["nodes"] == [] and empty["total_units"] == 3


def test_the_graph_draws_neighbours_in_time_from_the_dates() -> None:
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from hindsight_recall.service.graph import _nearby
    from hindsight_recall.store.graph import GraphPage

    start = datetime(2024, 1, 1, tzinfo=UTC)
    units = [SimpleNamespace(id=name, event_date=None if hours is None else start + timedelta(hours=hours))
             for name, hours in (("a", 0), ("b", 10), ("c", 40), ("undated", None))]
    edges = list(_nearby(GraphPage(units, len(units), [], {})))  # type: ignore[arg-type]
    # b is 10 h after a; c is 30 h after b: too far, as for the temporal arm
    assert edges == [("b", "a", "temporal", pytest.approx(1 - 10 / 24), "")]
