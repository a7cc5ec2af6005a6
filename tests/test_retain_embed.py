"""Retain embeds each distinct text once, the whole call sorted by length, and keeps the input order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest
from hindsight_recall.errors import RetainError
from hindsight_recall.retain._embed import CHUNK, distinct_by_length, embed_passages


class Recording:
    """An embedder whose vector encodes the text's length and first letter; it records every call."""

    name = "recording"

    def __init__(self, drop: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.drop = drop

    def dimensions(self) -> int:
        return 2

    async def embed(self, texts: Sequence[str], *, mode: str) -> list[list[float]]:
        assert mode == "passage"
        self.calls.append(list(texts))
        return [[float(len(t)), float(ord(t[0]) if t else 0)] for t in texts][: len(texts) - self.drop]


def test_distinct_texts_longest_first_and_mapped_back() -> None:
    texts = ["bb", "a", "cccc", "a", "bb", "dd"]
    unique, where = distinct_by_length(texts)
    assert sorted(unique) == sorted(set(texts)) and len(unique) == 4
    assert [len(t) for t in unique] == sorted((len(t) for t in unique), reverse=True)
    assert [unique[i] for i in where] == texts


def test_vectors_in_input_order_and_duplicates_embedded_once() -> None:
    distinct = ["x" * (i % 37) + str(i) for i in range(500)]
    texts = [distinct[(i * 7) % 500] for i in range(1200)]  # each distinct text two or three times
    emb = Recording()
    vectors = asyncio.run(embed_passages(emb, texts, progress=False))
    assert vectors.dtype == np.float32 and vectors.shape == (1200, 2)
    expected = np.array([[len(t), ord(t[0])] for t in texts], dtype=np.float32)
    assert np.array_equal(vectors, expected)
    sent = [t for call in emb.calls for t in call]
    assert len(sent) == len(set(sent)) == 500
    assert all(len(call) <= CHUNK for call in emb.calls)
    # longest first across the whole call, not only within each chunk
    assert [len(t) for t in sent] == sorted((len(t) for t in sent), reverse=True)


def test_no_texts() -> None:
    emb = Recording()
    assert asyncio.run(embed_passages(emb, [], progress=False)).shape[0] == 0
    assert emb.calls == []


def test_a_short_answer_from_the_embedder_is_an_error() -> None:
    with pytest.raises(RetainError, match="returned 2 vectors for 3 texts"):
        asyncio.run(embed_passages(Recording(drop=1), ["a", "b", "c"], progress=False))
