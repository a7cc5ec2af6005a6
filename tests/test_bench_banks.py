"""The many-banks benchmark's split of one synthetic bank into N."""

from __future__ import annotations

from hindsight_recall.bench.banks import split
from hindsight_recall.bench.synthetic import generate


def test_split_keeps_every_memory_and_only_references_inside_a_bank() -> None:
    bank = generate(300, seed=3)
    parts = split(bank, 7)
    assert len(parts) == 7 and sum(len(m) for m, _ in parts.values()) == 300
    for memories, vectors in parts.values():
        inside = {m.id for m in memories}
        assert len(vectors) == len(memories)
        assert all(set(m.causes) <= inside and set(m.source_ids) <= inside for m in memories)
    assert any(m.source_ids for memories, _ in parts.values() for m in memories)
