"""A question's embedding is kept for when it is asked again, in any bank, and answers as the first time."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from hindsight_recall.engine import Engine
from hindsight_recall.protocols import EmbeddingProvider
from hindsight_recall.recall.query_vectors import QueryVectors
from hindsight_recall.settings import Settings
from pydantic import ValidationError

from .conftest import ALICE_BANK


class Counting:
    """The engine's embedder, counting the texts it is asked to embed as questions."""

    def __init__(self, embedder: EmbeddingProvider) -> None:
        self.embedder = embedder
        self.questions: list[str] = []

    async def embed(self, texts: Sequence[str], *, mode: str) -> list[list[float]]:
        if mode == "query":
            self.questions.extend(texts)
        return await self.embedder.embed(texts, mode=mode)


async def test_a_repeated_question_is_embedded_once_and_gets_the_same_vector(engine: Engine) -> None:
    counting = Counting(engine.embedder)
    vectors = QueryVectors(counting, size=8)
    first = await vectors.vector("Where does Alice work?")
    again = await vectors.vector("Where does Alice work?")
    assert again == first and all(type(x) is float for x in again)
    assert first == (await engine.embedder.embed(["Where does Alice work?"], mode="query"))[0]
    assert counting.questions == ["Where does Alice work?"]
    assert (vectors.hits, vectors.misses) == (1, 1)


async def test_the_least_recently_asked_question_is_dropped_first(engine: Engine) -> None:
    counting = Counting(engine.embedder)
    vectors = QueryVectors(counting, size=2)
    for question in ("a", "b", "a", "c", "a", "b"):  # c drops b (a was asked since), b then drops c
        await vectors.vector(question)
    assert counting.questions == ["a", "b", "c", "b"]


async def test_size_0_keeps_nothing(engine: Engine) -> None:
    counting = Counting(engine.embedder)
    vectors = QueryVectors(counting, size=0)
    for _ in range(3):
        await vectors.vector("a")
    assert counting.questions == ["a", "a", "a"] and vectors.hits == 0


async def test_one_question_in_two_banks_is_embedded_once_and_each_bank_answers_its_own(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    alice, bob = (f"test-qv-{name}-{uuid.uuid4().hex[:8]}" for name in ("alice", "bob"))
    await engine.retain(alice, ALICE_BANK)
    await engine.retain(bob, [{"id": "job", "text": "Bob works as a baker in Lyon.", "entities": ["Bob"]}])
    question = "Where does Alice work? (asked in two banks)"
    uncached = {bank: await engine.recall(bank, question) for bank in (alice, bob)}
    counting = Counting(engine.embedder)
    monkeypatch.setattr(engine, "query_vectors", QueryVectors(counting, size=8))
    cached = {bank: await engine.recall(bank, question) for bank in (alice, bob)}
    assert counting.questions == [question]
    for bank in (alice, bob):  # the same answer as without the cache, from the bank's own memories
        assert [(r["id"], r["scores"]) for r in cached[bank]["results"]] == \
               [(r["id"], r["scores"]) for r in uncached[bank]["results"]]
    assert {r["text"] for r in cached[bob]["results"]} == {"Bob works as a baker in Lyon."}
    for bank in (alice, bob):
        await engine.delete_bank(bank)


def test_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().embeddings_query_cache_size == 1024
    monkeypatch.setenv("HINDSIGHT_API_EMBEDDINGS_QUERY_CACHE_SIZE", "0")
    assert Settings().embeddings_query_cache_size == 0
    monkeypatch.setenv("HINDSIGHT_API_EMBEDDINGS_QUERY_CACHE_SIZE", "-1")
    with pytest.raises(ValidationError, match="embeddings_query_cache_size"):
        Settings()
