"""The semantic arm: pgvector cosine search per fact type."""

from __future__ import annotations

import functools
from typing import Any

from ...hookspecs import hookimpl
from ...protocols import RetrievalContext
from ...settings import Settings
from ...types import ArmResult
from ._ann import AnnSettings, hnsw_settings
from ._compose import ArmStatement
from ._rows import COLUMNS, DISTANCE, base_params, run_union, where_for


def ef_search(limit: int) -> int:
    """HNSW search depth for a LIMIT: at least pgvector's default 40, at most its maximum 1000."""
    return min(max(limit, 40), 1000)


def vector_literal(values: Any) -> str:
    """pgvector's text form of a vector (formatted once per query vector: several arms bind it)."""
    return _literal(tuple(values))


@functools.lru_cache(maxsize=32)
def _literal(values: tuple[float, ...]) -> str:
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"


class SemanticRetriever:
    """Nearest memories by embedding cosine similarity: exact in a small bank, else the shared HNSW index."""

    name = "semantic"

    def __init__(self, settings: Settings | None = None) -> None:
        self._ann = AnnSettings()

    def enabled(self, ctx: RetrievalContext) -> bool:
        return bool(ctx.fact_types)

    def statement(self, ctx: RetrievalContext) -> ArmStatement:
        """The arm as one composable statement (see :mod:`._compose`).

        :param ctx: the recall's retrieval context.
        """
        floor = ctx.min_semantic if ctx.min_semantic is not None else ctx.settings.semantic_min_similarity
        subselects = [
            f"(SELECT {COLUMNS}, 1 - {DISTANCE} AS similarity FROM memory_units "
            f"WHERE {where_for(ctx, ft)} AND embedding IS NOT NULL AND 1 - {DISTANCE} >= :floor "
            f"ORDER BY {DISTANCE} LIMIT :limit)"
            for ft in ctx.fact_types
        ]
        params = {**base_params(ctx), "embedding": vector_literal(ctx.embedding), "floor": floor,
                  "limit": ctx.limit}
        # a small bank's rows are ranked exactly, with no index to tune
        ann = hnsw_settings(ef_search(ctx.limit), ctx.settings) if ctx.indexed else {}
        return ArmStatement(self.name, subselects, params, ann)

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        st = self.statement(ctx)
        async with ctx.db.connect() as conn:
            if st.ann:
                await self._ann.apply(conn, st.ann)
            return await run_union(conn, self.name, ctx, st.subselects, st.params, "similarity")


@hookimpl
def register_retrievers(register: Any) -> None:
    register(SemanticRetriever)
