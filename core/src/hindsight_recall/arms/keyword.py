"""The keyword arm: full text search through the selected text-search backend (SPEC §6.2)."""

from __future__ import annotations

from typing import Any

from ..hookspecs import hookimpl
from ..protocols import RetrievalContext
from ..settings import Settings
from ..types import ArmResult
from ._rows import COLUMNS, base_params, run_union, where_for


class KeywordRetriever:
    """BM25-style keyword matching; skipped when the query has no word tokens."""

    name = "keyword"

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def enabled(self, ctx: RetrievalContext) -> bool:
        return bool(ctx.tokens) and bool(ctx.fact_types) and ctx.settings.enable_text_search

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        backend = ctx.text_search
        floor = ctx.min_keyword if ctx.min_keyword is not None else ctx.settings.bm25_min_score
        async with ctx.db.connect() as conn:
            query_text = await backend.prepare_query(ctx.query, ctx.tokens, conn)
            if query_text is None:
                return []
            subselects = [backend.arm_sql(columns=COLUMNS, where=where_for(ctx, ft)) for ft in ctx.fact_types]
            params = {**base_params(ctx), "query_text": query_text, "min_score": floor, "limit": ctx.limit}
            return await run_union(conn, self.name, ctx, subselects, params, "bm25_score")


@hookimpl
def register_retrievers(register: Any) -> None:
    register(KeywordRetriever)
