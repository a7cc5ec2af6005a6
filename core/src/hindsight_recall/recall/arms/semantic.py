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
from ._rows import base_params, nearest_sql, run_union, where_for


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
    """Nearest memories by embedding cosine similarity: exact in a small bank, else its HNSW indexes."""

    name = "semantic"

    def __init__(self, settings: Settings | None = None) -> None:
        self._ann = AnnSettings()

    def enabled(self, ctx: RetrievalContext) -> bool:
        return bool(ctx.fact_types)

    def statement(self, ctx: RetrievalContext) -> ArmStatement:
        """The arm as one composable statement (see :mod:`._compose`): its nearest memories of each
        fact type are the CTEs ``nearest_<fact type>`` (:func:`nearest`), which the graph arm's
        seeds read too.

        :param ctx: the recall's retrieval context.
        """
        ctes = nearest(ctx)
        subselects = [f"(SELECT * FROM {name})" for name in ctes]
        # a small bank's rows are ranked exactly, with no index to tune
        ann = hnsw_settings(ef_search(ctx.limit), ctx.settings) if ctx.indexed else {}
        return ArmStatement(self.name, subselects, nearest_params(ctx), ann, ctes=ctes)

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        st = self.statement(ctx)
        async with ctx.db.connect() as conn:
            if st.ann:
                await self._ann.apply(conn, st.ann)
            return await run_union(conn, self.name, ctx, [st.sql()], st.params, "similarity")


def semantic_floor(ctx: RetrievalContext) -> float:
    """The least similarity the arm keeps: the request's ``min_semantic``, else ``SEMANTIC_MIN_SIMILARITY``."""
    return ctx.min_semantic if ctx.min_semantic is not None else ctx.settings.semantic_min_similarity


def nearest(ctx: RetrievalContext) -> dict[str, str]:
    """Per fact type, the CTE ``nearest_<fact type>``: the ``:limit`` memories closest to the query
    with a similarity of at least ``:floor``, nearest first (parameters: :func:`nearest_params`)."""
    return {f"nearest_{ft}": nearest_sql(where_for(ctx, ft)) for ft in ctx.fact_types}


def nearest_params(ctx: RetrievalContext) -> dict[str, Any]:
    """The parameters :func:`nearest` binds."""
    return {**base_params(ctx), "embedding": vector_literal(ctx.embedding), "floor": semantic_floor(ctx),
            "limit": ctx.limit}


@hookimpl
def register_retrievers(register: Any) -> None:
    register(SemanticRetriever)
