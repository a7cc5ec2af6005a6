"""A conversation retained through upstream's ``hindsight-client==1.1.0`` on a ``serve`` whose retain goes
through a chat model (a real OpenAI-speaking stand-in on 127.0.0.1): it becomes facts with their dates,
entities and causal links, and the client reads them back through the list, document, entity and graph
routes as it reads upstream's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hindsight_recall.testing.http_server import FixtureServer
from hindsight_recall.testing.llm_server import STAND_IN_KEY, openai_reply
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
from hindsight_client_api import ApiClient, Configuration  # noqa: E402
from hindsight_client_api.api import DocumentsApi, EntitiesApi, MemoryApi  # noqa: E402

KEY = STAND_IN_KEY
CHAT = ("Alice: I got the data engineer job at Helios Robotics!\n"
        "Bob: Congratulations! Are you moving?\n"
        "Alice: Yes, I moved to Lisbon in May 2024 to be close to the office.")
JOINED = "Alice got a data engineer job at Helios Robotics."
MOVED = "Alice moved to Lisbon in May 2024 to be close to the Helios Robotics office."
#: the memories' texts: each fact's what, with its when, where, who and why, as upstream writes them
STORED = {JOINED: f"{JOINED} | Involving: Alice",
          MOVED: f"{MOVED} | When: May 2024 | Where: Lisbon | Involving: Alice | the new job"}
#: the model's reading of CHAT: two facts, the move dated to May 2024 and caused by the job
REPLY = {"facts": [
    {"what": JOINED, "when": "N/A", "where": "N/A", "who": "Alice", "why": "N/A", "fact_kind": "conversation",
     "fact_type": "world", "occurred_start": None, "occurred_end": None, "entities": ["Alice", "Helios Robotics"]},
    {"what": MOVED, "when": "May 2024", "where": "Lisbon", "who": "Alice", "why": "the new job",
     "fact_kind": "event", "fact_type": "world", "occurred_start": "2024-05-01T00:00:00Z",
     "occurred_end": "2024-05-31T23:59:59Z", "entities": ["Alice", "Lisbon", "Helios Robotics"],
     "causal_relations": [{"target_index": 0, "relation_type": "caused_by"}]},
]}


@pytest.fixture(scope="module")
def server(llm: FixtureServer, serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True, llm_provider="openai", llm_api_key=KEY, llm_model="stub-model",
                 llm_base_url=llm.url + "/v1", llm_max_retries=0, llm_timeout=5.0)


async def api(server: ServerThread, kind: type, method: str, **kwargs: Any) -> Any:
    async with ApiClient(Configuration(host=server.url)) as api_client:
        return await getattr(kind(api_client), method)(**kwargs)


async def test_a_conversation_retained_through_upstreams_client_becomes_linked_dated_facts(
        server: ServerThread, llm: FixtureServer) -> None:
    bank = f"client-{uuid.uuid4().hex[:10]}"
    llm.script("POST", "/v1/chat/completions", openai_reply(json.dumps(REPLY)))
    client = hindsight_client.Hindsight(base_url=server.url, timeout=120)
    try:
        answer = await client.aretain_batch(bank, [{"content": CHAT, "timestamp": "2024-06-10T09:30:00Z",
                                                    "context": "a chat between friends"}], document_id="chat-1")
        assert answer.success and answer.items_count == 1
        assert answer.usage is not None and answer.usage.total_tokens > 0
        listed = {m.text: m for m in (await client.alist_memories(bank)).items}
    finally:
        await client.aclose()
    (sent,) = llm.requests_to("POST", "/v1/chat/completions")
    assert "Alice: I got the data engineer job" in sent.body["messages"][1]["content"]

    # the list: the facts, not the turns, each with its dates and entities
    assert sorted(listed) == sorted(STORED.values())
    moved = listed[STORED[MOVED]].to_dict()
    assert moved["occurred_start"].startswith("2024-05-01") and moved["occurred_end"].startswith("2024-05-31")
    assert moved["mentioned_at"].startswith("2024-06-10") and moved["fact_type"] == "world"
    assert set(moved["entities"].split(", ")) == {"Alice", "Lisbon", "Helios Robotics"}

    # the document: the conversation as sent, with its two facts
    document = await api(server, DocumentsApi, "get_document", bank_id=bank, document_id="chat-1")
    assert document.original_text == CHAT and document.memory_unit_count == 2

    # the entities: resolved once each, Alice and the company in both facts
    entities = {e.canonical_name: e for e in (await api(server, EntitiesApi, "list_entities", bank_id=bank)).items}
    assert set(entities) == {"Alice", "Lisbon", "Helios Robotics"}
    assert entities["Alice"].mention_count == 2 and entities["Lisbon"].mention_count == 1

    # the graph: the job causes the move
    graph = await api(server, MemoryApi, "get_graph", bank_id=bank)
    ids = {n.data.text: n.data.id for n in graph.nodes}
    job, move = ids[STORED[JOINED]], ids[STORED[MOVED]]
    edges = {(e.data.source, e.data.target, e.data.link_type) for e in graph.edges}
    assert (job, move, "causes") in edges and (move, job, "caused_by") in edges
    assert {e.data.entity_name for e in graph.edges if e.data.link_type == "entity"} >= {"Alice", "Helios Robotics"}
