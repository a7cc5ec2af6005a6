"""Upstream's client asks the service a vague question with tags, in each ``tags_match`` mode, and
gets the tagged memories back (the same questions as upstream's own client tests)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")

VAGUE = "What has everyone been working on?"
ITEMS = [
    {"content": "Alice presented the Q3 roadmap at the Monday standup", "tags": ["project_x", "meetings"]},
    {"content": "Bob wrote the architecture document for the new auth system", "tags": ["project_x", "docs"]},
    {"content": "Charlie led the sprint planning session for the mobile app", "tags": ["project_y", "meetings"]},
    {"content": "Diana announced the company picnic for next Friday", "tags": ["company"]},
    {"content": "Eve mentioned she likes pineapple on pizza"},
]


@pytest.fixture(scope="module")
def service_url(serve: Callable[..., ServerThread]) -> str:
    return serve(own_database=True).url


@pytest.fixture(scope="module")
def team(service_url: str) -> str:
    bank_id = f"vague-{uuid.uuid4().hex[:10]}"
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as client:
        client.create_bank(bank_id)
        assert client.retain_batch(bank_id, ITEMS, retain_async=False).success
    return bank_id


@pytest.fixture
def client(service_url: str) -> Iterator[Any]:
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as c:
        yield c


@pytest.mark.parametrize(("tags", "mode", "allowed"), [
    (["project_x"], "any", lambda t: "project_x" in t or not t),
    (["project_x"], "all", lambda t: "project_x" in t or not t),
    (["project_x"], "any_strict", lambda t: "project_x" in t),
    (["project_x", "meetings"], "all_strict", lambda t: {"project_x", "meetings"} <= t),
    (["project_x", "project_y"], "any_strict", lambda t: bool(t & {"project_x", "project_y"})),
])
def test_vague_question_with_tags(client: Any, team: str, tags: list[str], mode: str, allowed: Any) -> None:
    response = client.recall(bank_id=team, query=VAGUE, tags=tags, tags_match=mode, max_tokens=16000)
    assert response.results, "the bank holds memories that pass the filter"
    got = [set(r.tags or ()) for r in response.results]
    assert all(allowed(t) for t in got)
    assert any(tags[0] in t for t in got)
    expected = sum(1 for item in ITEMS if allowed(set(item.get("tags", ()))))
    assert len(response.results) == expected


def test_vague_question_without_tags_and_a_minimum_score(client: Any, team: str) -> None:
    weak = client.recall(bank_id=team, query=VAGUE, max_tokens=16000).results
    assert {r.text for r in weak} == {i["content"] for i in ITEMS}
    # a caller's minimum score is honoured: nothing here reaches 0.3, so nothing comes back
    assert client.recall(bank_id=team, query=VAGUE, max_tokens=16000, min_scores={"semantic": 0.3}).results == []
