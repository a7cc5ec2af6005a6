"""Bulk link computation: exact and approximate kNN, the temporal window, both database paths."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hindsight_recall import Engine, RetainError
from hindsight_recall.bench.synthetic import generate
from hindsight_recall.retain import _knn, links
from hindsight_recall.retain.ingest import unit_id
from sqlalchemy import text


def brute_force(vectors: np.ndarray, k: int, floor: float) -> set[tuple[int, int]]:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    out = set()
    for i, row in enumerate(sims):
        top = [j for j in np.argsort(-row)[:k] if row[j] >= floor]
        out |= {(i, int(j)) for j in top}
    return out


def test_exact_search_matches_brute_force() -> None:
    vectors = generate(1500, seed=2).vectors
    rows, cols, sims = _knn.neighbours(vectors, np.arange(1500), 5, 0.6)
    assert set(zip(rows.tolist(), cols.tolist(), strict=True)) == brute_force(vectors, 5, 0.6)
    assert np.all(rows != cols) and np.all(sims >= 0.6)
    assert np.allclose(sims, np.einsum("ij,ij->i", vectors[rows], vectors[cols]), atol=1e-5)


def test_inverted_file_finds_most_close_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_knn, "LIST_SIZE", 200)
    vectors = generate(6000, seed=5).vectors
    rows, cols, _ = _knn.neighbours(vectors, np.arange(6000), 50, 0.7, exact=False)
    want = brute_force(vectors, 50, 0.7)
    got = set(zip(rows.tolist(), cols.tolist(), strict=True))
    assert len(got & want) / len(want) > 0.9
    assert np.bincount(rows).max() <= 50


async def links_of(engine: Engine, bank: str, kind: str) -> set[tuple[uuid.UUID, uuid.UUID]]:
    async with engine.db.connect() as conn:
        rows = await conn.execute(text(
            "SELECT l.from_unit_id, l.to_unit_id FROM memory_links l "
            "JOIN memory_units u ON u.id = l.from_unit_id WHERE u.bank_id = :b AND l.link_type = :t"),
            {"b": bank, "t": kind})
        return {(r[0], r[1]) for r in rows}


async def test_given_embeddings_skip_the_model(engine: Engine, bank: str) -> None:
    synthetic = generate(200, seed=9)
    stats = await engine.retain(bank, synthetic.memories, embeddings=synthetic.vectors)
    assert stats.memories == 200 and stats.links > 0
    async with engine.db.connect() as conn:
        stored = await conn.scalar(text("SELECT embedding::text FROM memory_units WHERE id = :i"),
                                   {"i": unit_id(bank, synthetic.memories[0].id)})
    stored_vector = np.array(stored.strip("[]").split(","), dtype=np.float32)
    assert np.allclose(stored_vector, synthetic.vectors[0], atol=1e-6)
    with pytest.raises(RetainError, match="vectors"):
        await engine.retain(bank, synthetic.memories[:2], embeddings=synthetic.vectors[:1])
    with pytest.raises(RetainError, match="dimensional"):
        await engine.retain(bank, synthetic.memories[:2], embeddings=[[0.1, 0.2], [0.3, 0.4]])


async def test_batches_into_an_existing_bank_link_like_one_load(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    synthetic = generate(600, seed=11)
    whole, split, by_index, unindexed = (f"test-links-{uuid.uuid4().hex[:8]}" for _ in range(4))
    await engine.retain(whole, synthetic.memories, embeddings=synthetic.vectors)
    await engine.retain(split, synthetic.memories[:400], embeddings=synthetic.vectors[:400])
    await engine.retain(split, synthetic.memories[400:], embeddings=synthetic.vectors[400:])
    monkeypatch.setattr(engine._ingestor.settings, "vector_index_min_rows", 0)  # by_index: in the HNSW indexes
    await engine.retain(by_index, synthetic.memories[:400], embeddings=synthetic.vectors[:400])
    monkeypatch.setattr(links, "INDEX_MIN_ROWS", 0)
    monkeypatch.setattr(links, "INDEX_RATIO", 1)
    await engine.retain(by_index, synthetic.memories[400:], embeddings=synthetic.vectors[400:])
    # a bank past INDEX_MIN_ROWS that is not in the HNSW indexes (VECTOR_INDEX_MIN_ROWS set higher) reads vectors
    monkeypatch.setattr(engine._ingestor.settings, "vector_index_min_rows", 10_000)
    for part in (slice(0, 400), slice(400, None)):
        await engine.retain(unindexed, synthetic.memories[part], embeddings=synthetic.vectors[part])

    def renamed(pairs: set[tuple[uuid.UUID, uuid.UUID]], bank: str) -> set[tuple[uuid.UUID, uuid.UUID]]:
        back = {unit_id(bank, m.id): unit_id(whole, m.id) for m in synthetic.memories}
        late = {unit_id(bank, m.id) for m in synthetic.memories[400:]}
        return {(back[a], back[b]) for a, b in pairs if a in late}

    late_whole = {unit_id(whole, m.id) for m in synthetic.memories[400:]}
    expected = {p for p in await links_of(engine, whole, "semantic") if p[0] in late_whole}
    assert expected
    assert renamed(await links_of(engine, split, "semantic"), split) == expected
    assert renamed(await links_of(engine, unindexed, "semantic"), unindexed) == expected
    found = renamed(await links_of(engine, by_index, "semantic"), by_index)
    assert len(found & expected) >= 0.95 * len(expected)  # HNSW on a few hundred rows is exact in practice
    for bank_id in (whole, split, unindexed, by_index):  # neighbours in time are read from the dates
        assert not await links_of(engine, bank_id, "temporal")


async def test_small_batches_into_an_existing_bank_are_linked_by_the_database(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of up to SCAN_MAX_BATCH rows never read the bank's vectors, and link exactly as one load."""
    synthetic = generate(320, seed=12)
    memories = [dataclasses.replace(m, causes=()) for m in synthetic.memories]  # a batch may not name a later one
    whole, batched = (f"test-links-{uuid.uuid4().hex[:8]}" for _ in range(2))
    await engine.retain(whole, memories, embeddings=synthetic.vectors)
    await engine.retain(batched, memories[:256], embeddings=synthetic.vectors[:256])

    async def no_reading(*args: object) -> None:
        raise AssertionError("a small batch read the bank's vectors")

    monkeypatch.setattr(links, "_by_reading", no_reading)
    for start in range(256, 320, links.SCAN_MAX_BATCH):
        end = start + links.SCAN_MAX_BATCH
        await engine.retain(batched, memories[start:end], embeddings=synthetic.vectors[start:end])

    async def weighted(bank: str) -> dict[tuple[str, str], float]:
        names = {unit_id(bank, m.id): m.id for m in memories}
        last = [unit_id(bank, m.id) for m in memories[-links.SCAN_MAX_BATCH:]]  # it sees the bank as one load does
        async with engine.db.connect() as conn:
            rows = await conn.execute(text(
                "SELECT from_unit_id, to_unit_id, weight FROM memory_links "
                "WHERE from_unit_id = ANY(:ids) AND link_type = 'semantic'"), {"ids": last})
            return {(names[a], names[b]): w for a, b, w in rows}

    expected, found = await weighted(whole), await weighted(batched)
    assert expected and found.keys() == expected.keys()
    assert all(abs(found[pair] - weight) < 1e-5 for pair, weight in expected.items())


async def test_reretain_keeps_links_unique(engine: Engine, bank: str) -> None:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [{"id": f"m{i}", "text": f"Note {i} about the garden.",
             "occurred_at": (start + timedelta(hours=i)).isoformat()} for i in range(30)]
    await engine.retain(bank, rows)
    before = await links_of(engine, bank, "semantic")
    assert before
    await engine.retain(bank, rows[:5])
    assert await links_of(engine, bank, "semantic") == before  # same memories, same links, no duplicates
