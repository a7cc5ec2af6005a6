"""The service driven by upstream's own client, ``hindsight-client==1.1.0``, sync and async.

Runs against ``hindsight-recall serve`` (started here on 127.0.0.1), or against upstream Hindsight's
server when ``HINDSIGHT_TEST_UPSTREAM_URL`` names one: the same assertions hold for both, so a
difference in shapes or behaviour shows up as a failing test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
from hindsight_client_api.exceptions import ApiException  # noqa: E402

UPSTREAM = os.environ.get("HINDSIGHT_TEST_UPSTREAM_URL", "").strip()
ours = pytest.mark.skipif(bool(UPSTREAM), reason="behaviour of hindsight-recall only")

FACTS = [
    {"content": "Alice works as a data engineer at Helios Robotics in Munich.", "timestamp": "2023-08-01T00:00:00Z",
     "context": "career chat", "metadata": {"source": "slack"}, "tags": ["work"],
     "entities": [{"text": "Alice"}, {"text": "Helios Robotics", "type": "ORG"}]},
    {"content": "Alice ran her first marathon in Hamburg.", "timestamp": "2023-04-23T00:00:00Z", "tags": ["personal"],
     "entities": [{"text": "Alice"}]},
    {"content": "Bob cooked pasta carbonara for dinner.", "timestamp": "2023-05-02T00:00:00Z",
     "entities": [{"text": "Bob"}]},
]


@pytest.fixture(scope="module")
def service_url(serve: Callable[..., ServerThread]) -> str:
    """Upstream's URL when given; else our service on a fresh embedded server."""
    return UPSTREAM or serve(own_database=True).url


@pytest.fixture
def client(service_url: str) -> Iterator[Any]:
    """A fresh client per test: its HTTP session belongs to the event loop it first ran on."""
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def bank(service_url: str) -> str:
    """A bank holding FACTS (one document) for the recall tests."""
    bank_id = f"svc-{uuid.uuid4().hex[:10]}"
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as client:
        client.create_bank(bank_id)
        response = client.retain_batch(bank_id, FACTS, document_id="chat-1")
    assert response.success and response.items_count == len(FACTS)
    return bank_id


def texts(response: Any) -> list[str]:
    return [r.text for r in response.results]


def test_version_and_health(client: Any, service_url: str) -> None:
    import httpx

    assert client.get_version().api_version
    assert httpx.get(f"{service_url}/health").status_code == 200
    assert httpx.get(f"{service_url}/health/live").status_code == 200
    assert httpx.get(f"{service_url}/health/ready").status_code == 200


def test_create_bank_returns_the_profile(client: Any) -> None:
    bank_id = f"svc-{uuid.uuid4().hex[:10]}"
    profile = client.create_bank(bank_id, enable_graph_retrieval=False)
    assert profile.bank_id == bank_id and profile.disposition.skepticism == 3
    assert client.get_bank_config(bank_id)["overrides"]["enable_graph_retrieval"] is False
    assert client.update_bank_config(bank_id, enable_temporal_retrieval=False)["overrides"] == {
        "enable_graph_retrieval": False, "enable_temporal_retrieval": False}
    assert client.reset_bank_config(bank_id)["overrides"] == {}
    client.delete_bank(bank_id)


def test_retain_one_then_list_and_recall(client: Any) -> None:
    bank_id = f"svc-{uuid.uuid4().hex[:10]}"
    response = client.retain(bank_id, "Priya works at Orbital Foods as a pastry chef.", context="intro",
                             timestamp="2024-03-01T09:00:00Z", metadata={"channel": "dm"}, tags=["work"],
                             entities=[{"text": "Priya"}], document_id="intro-1")
    assert response.success and response.items_count == 1 and response.var_async is False
    listed = client.list_memories(bank_id)
    assert listed.total == 1 and listed.items[0].text.startswith("Priya works at Orbital Foods")
    recalled = client.recall(bank_id, "Where does Priya work?", include_entities=True)
    assert texts(recalled) == ["Priya works at Orbital Foods as a pastry chef."]
    result = recalled.results[0]
    assert result.context == "intro" and result.metadata == {"channel": "dm"} and result.tags == ["work"]
    assert result.document_id == "intro-1" and "Priya" in (result.entities or [])
    assert result.mentioned_at.startswith("2024-03-01")
    client.delete_bank(bank_id)


def test_retain_batch_keeps_every_item(client: Any, bank: str) -> None:
    listed = client.list_memories(bank, limit=10)
    assert listed.total == len(FACTS)
    assert sorted(m.text for m in listed.items) == sorted(f["content"] for f in FACTS)
    assert client.list_memories(bank, search_query="marathon").total == 1


def test_recall_finds_the_fact(client: Any, bank: str) -> None:
    assert texts(client.recall(bank, "Where does Alice work?"))[0].startswith("Alice works as a data engineer")


@pytest.mark.parametrize("budget", ["low", "mid", "high"])
def test_recall_budget(client: Any, bank: str, budget: str) -> None:
    assert "Alice ran her first marathon in Hamburg." in texts(client.recall(bank, "marathon Hamburg", budget=budget))


def test_recall_types(client: Any, bank: str) -> None:
    assert client.recall(bank, "Where does Alice work?", types=["observation"]).results == []
    assert client.recall(bank, "Where does Alice work?", types=["world", "experience"]).results


def test_recall_max_tokens_packs_fewer(client: Any, bank: str) -> None:
    few = client.recall(bank, "Alice", max_tokens=15)
    assert 1 <= len(few.results) < len(client.recall(bank, "Alice").results) or len(few.results) == 1


def test_recall_trace(client: Any, bank: str) -> None:
    assert client.recall(bank, "Alice marathon", trace=True).trace
    assert not client.recall(bank, "Alice marathon").trace


def test_recall_query_timestamp(client: Any, bank: str) -> None:
    assert client.recall(bank, "What happened last April?", query_timestamp="2023-05-30T00:00:00").results


def test_recall_entities_and_chunks(client: Any, bank: str) -> None:
    with_entities = client.recall(bank, "Where does Alice work?", include_entities=True)
    assert "Alice" in (with_entities.entities or {})
    assert not client.recall(bank, "Where does Alice work?").entities
    chunked = client.recall(bank, "Where does Alice work?", include_chunks=True, max_chunk_tokens=100)
    assert chunked.chunks is not None


def test_recall_source_facts(client: Any, bank: str) -> None:
    response = client.recall(bank, "Where does Alice work?", include_source_facts=True, max_source_facts_tokens=100)
    assert response.results and response.source_facts is not None


@pytest.mark.parametrize(("tags", "match", "expected"), [
    (["work"], "any_strict", {"Alice works as a data engineer at Helios Robotics in Munich."}),
    (["personal"], "all_strict", {"Alice ran her first marathon in Hamburg."}),
])
def test_recall_tags(client: Any, bank: str, tags: list[str], match: str, expected: set[str]) -> None:
    assert set(texts(client.recall(bank, "Alice Bob dinner marathon work", tags=tags, tags_match=match))) == expected


def test_recall_untagged_with_exact_and_no_tags(client: Any, bank: str) -> None:
    got = texts(client.recall(bank, "Alice Bob dinner marathon work", tags_match="exact"))
    assert got == ["Bob cooked pasta carbonara for dinner."]


def test_recall_min_scores(client: Any, bank: str) -> None:
    assert client.recall(bank, "Where does Alice work?", min_scores={"final": 2.0}).results == []
    with pytest.raises(ValueError):
        client.recall(bank, "Alice", min_scores={"finale": 0.5})


def test_recall_temporal_window(client: Any, bank: str) -> None:
    window = {"start": "2023-04-01T00:00:00Z", "end": "2023-04-30T00:00:00Z"}
    assert "Alice ran her first marathon in Hamburg." in texts(client.recall(bank, "race", temporal_window=window))


def test_recall_prefer_observations(client: Any, bank: str) -> None:
    assert client.recall(bank, "Where does Alice work?", prefer_observations=True).results


async def test_async_calls(service_url: str) -> None:
    # its own client: the sync wrappers run the shared one on a loop of their own
    client = hindsight_client.Hindsight(base_url=service_url, timeout=120)
    bank_id = f"svc-{uuid.uuid4().hex[:10]}"
    await client.acreate_bank(bank_id)
    await client.aretain(bank_id, "Carla plays the cello in an amateur orchestra.")
    await client.aretain_batch(bank_id, [{"content": "Carla moved to Lisbon in 2021."}])
    listed = await client.alist_memories(bank_id)
    assert listed.total == 2
    recalled = await client.arecall(bank_id, "Which instrument does Carla play?", budget="low", trace=True,
                                    include_entities=True, tags=None)
    assert recalled.results[0].text == "Carla plays the cello in an amateur orchestra."
    await client.adelete_bank(bank_id)
    names = [b.bank_id for b in (await client.banks.list_banks()).banks]
    assert bank_id not in names
    await client.aclose()


def bank_ids(service_url: str) -> list[str]:
    import httpx

    return [b["bank_id"] for b in httpx.get(f"{service_url}/v1/default/banks").json()["banks"]]


def test_delete_bank_removes_it(client: Any, service_url: str) -> None:
    bank_id = f"svc-{uuid.uuid4().hex[:10]}"
    client.retain(bank_id, "Dan keeps bees.")
    assert bank_id in bank_ids(service_url)
    client.delete_bank(bank_id)
    assert bank_id not in bank_ids(service_url)
    with pytest.raises(ApiException):
        client.recall(bank_id, "bees")


def test_recall_of_unknown_bank_is_404(client: Any) -> None:
    with pytest.raises(ApiException) as caught:
        client.recall(f"missing-{uuid.uuid4().hex[:8]}", "anything")
    assert caught.value.status == 404


def test_redelivered_document_replaces_its_memories(client: Any) -> None:
    bank_id = f"svc-{uuid.uuid4().hex[:10]}"
    client.retain_batch(bank_id, [{"content": "Eve likes tea."}, {"content": "Eve likes jazz."}], document_id="d")
    client.retain_batch(bank_id, [{"content": "Eve likes coffee."}], document_id="d")
    assert [m.text for m in client.list_memories(bank_id).items] == ["Eve likes coffee."]
    client.delete_bank(bank_id)


@ours
def test_tag_groups_are_refused_with_a_reason(client: Any, bank: str) -> None:
    with pytest.raises(ApiException) as caught:
        client.recall(bank, "Alice", tag_groups=[{"tags": ["work"], "match": "any"}])
    assert caught.value.status == 400 and "tag_groups" in caught.value.body


@ours
async def test_mcp_tools_are_served_at_mcp(service_url: str, bank: str) -> None:
    """``serve`` mounts the MCP server over its own engine (streamable HTTP at /mcp)."""
    from mcp import Client

    async with Client(service_url + "/mcp", read_timeout_seconds=120) as mcp_client:
        assert "recall" in {t.name for t in (await mcp_client.list_tools()).tools}
        found = await mcp_client.call_tool("recall", {"bank_id": bank, "query": "Where does Alice work?"})
        assert not found.is_error and "Helios Robotics" in str(found.structured_content)
