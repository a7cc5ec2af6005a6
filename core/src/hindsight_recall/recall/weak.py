"""Weak results: when no memory reaches any arm's floor, the nearest ones, scored as what they are.

A vague question ("What has everyone been working on?") can sit below every floor of a small
model while the bank plainly holds what it asks about; an empty answer helps nobody. A nonsense
question sits there too, so the memories let in are few (``RECALL_WEAK_RESULTS``) and their final
score says how far below the floor they are: ``WEAK_CEILING × similarity / floor``, under
``WEAK_CEILING`` (0.1, the least score a result that reached a floor gets without a cross-encoder).
"""

from __future__ import annotations

from typing import Any

from ..protocols import RetrievalContext
from ..types import Candidate
from .arms._ann import AnnSettings, hnsw_settings
from .arms._rows import nearest_sql, run_union
from .arms.semantic import ef_search, semantic_floor, vector_literal

#: weak results score below this
WEAK_CEILING = 0.1

_ANN = AnnSettings()


def weak_score(similarity: float, floor: float) -> float:
    """``WEAK_CEILING × similarity / floor``, in [0, WEAK_CEILING); 0 for a floor at or below 0."""
    if floor <= 0:
        return 0.0
    return WEAK_CEILING * min(max(similarity, 0.0) / floor, 1.0) * (1 - 1e-9)


async def weak_candidates(ctx: RetrievalContext, count: int) -> list[Candidate]:
    """The ``count`` memories nearest the query that pass the request's filters, whatever their
    similarity, most similar first, each with its :func:`weak_score` as the final score.

    :param ctx: the recall's retrieval context (its settings hold the floors in force).
    :param count: how many to return at most.
    """
    if count <= 0 or not ctx.fact_types or not ctx.embedding:
        return []
    subselects = [nearest_sql(ctx.where(ft), limit="weak_limit", floor="weak_floor") for ft in ctx.fact_types]
    params: dict[str, Any] = {**ctx.params(), "embedding": vector_literal(ctx.embedding), "weak_limit": count,
                              "weak_floor": -1.0}
    async with ctx.db.connect() as conn:
        if ctx.indexed:
            await _ANN.apply(conn, hnsw_settings(ef_search(count), ctx.settings))
        results = await run_union(conn, "weak", ctx, subselects, params, "similarity")
    hits = sorted((h for r in results for h in r.hits), key=lambda h: (-h.score, str(h.row.id)))[:count]
    floor = semantic_floor(ctx)
    out = []
    for rank, hit in enumerate(hits, start=1):
        score = weak_score(hit.score, floor)
        out.append(Candidate(row=hit.row, rrf_score=score, rrf_rank=rank, semantic=hit.score, cross_encoder=score,
                             final=score))
    return out
