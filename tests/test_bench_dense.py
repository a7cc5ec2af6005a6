"""The dense-bank benchmark's bank: as densely linked as it says."""

from __future__ import annotations

import logging
from datetime import timedelta

import numpy as np
from hindsight_recall.bench.dense import DAYS, ENTITIES, MEMORIES, PER_MEMORY, _Warnings, dense_bank
from hindsight_recall.retain.links import SEMANTIC_NEIGHBOURS


def test_every_memory_has_a_full_set_of_semantic_neighbours_and_shares_its_entities() -> None:
    memories, vectors, topics, _ = dense_bank(MEMORIES // 3)
    sims = vectors[:200] @ vectors.T
    same = topics[:200, None] == topics[None, :]
    # every memory has more than SEMANTIC_NEIGHBOURS neighbours above the 0.7 link floor, all of its topic
    assert ((sims >= 0.7) & same).sum(axis=1).min() > SEMANTIC_NEIGHBOURS
    assert not ((sims >= 0.7) & ~same).any()
    assert all(len(set(m.entities)) == PER_MEMORY for m in memories)
    assert len({e for m in memories for e in m.entities}) == ENTITIES
    dates = [m.occurred_start for m in memories]
    assert all(d is not None for d in dates) and max(dates) - min(dates) <= timedelta(days=DAYS)  # type: ignore[operator]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


def test_warnings_from_recall_are_counted_only_inside_the_block() -> None:
    recall = logging.getLogger("hindsight_recall.recall.pipeline")
    with _Warnings() as warned:
        recall.warning("arms took too long as one statement; running them apart")
        recall.info("not counted")
    recall.warning("after the block")
    assert warned.count == 1
