"""The semantic arm: pgvector cosine search per fact type (SPEC §6.1)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ..hookspecs import hookimpl
from ..protocols import RetrievalContext
from ..settings import Settings
from ..types import ArmResult
from ._ann import AnnSettings
from ._rows import COLUMNS, base_params, run_union, where_for

_DISTANCE = "(embedding <=> CAST(:embedding AS vector))"


def vector_literal(values: Any) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"


class SemanticRetriever:
    """Nearest memories by embedding cosine similarity, through the per-(bank, type) HNSW index."""

    name = "semantic"

    def __init__(self, settings: Settings | None = None) -> None:
        self._ann = AnnSettings()

    def enabled(self, ctx: RetrievalContext) -> bool:
        return bool(ctx.fact_types)

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        floor = ctx.min_semantic if ctx.min_semantic is not None else ctx.settings.semantic_min_similarity
        subselects = [
            f"(SELECT {COLUMNS}, 1 - {_DISTANCE} AS similarity FROM memory_units "
            f"WHERE {where_for(ctx, ft)} AND embedding IS NOT NULL AND 1 - {_DISTANCE} >= :floor "
            f"ORDER BY {_DISTANCE} LIMIT :limit)"
            for ft in ctx.fact_types
        ]
        params = {**base_params(ctx), "embedding": vector_literal(ctx.embedding), "floor": floor,
                  "limit": ctx.limit}
        async with ctx.db.connect() as conn:
            await self._ann_settings(conn, ctx)
            return await run_union(conn, self.name, ctx, subselects, params, "similarity")

    async def _ann_settings(self, conn: AsyncConnection, ctx: RetrievalContext) -> None:
        s = ctx.settings
        wanted: dict[str, str] = {"hnsw.ef_search": str(min(max(ctx.limit, 40), 1000))}
        if s.ann_iterative_scan:
            wanted["hnsw.iterative_scan"] = "strict_order"
            wanted["hnsw.max_scan_tuples"] = str(s.ann_max_scan_tuples)
        await self._ann.apply(conn, wanted)


@hookimpl
def register_retrievers(register: Any) -> None:
    register(SemanticRetriever)
