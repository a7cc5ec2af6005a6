"""The keyword arm: full text search through the selected text-search backend."""

from __future__ import annotations

from typing import Any

from ...hookspecs import hookimpl
from ...protocols import RetrievalContext
from ...settings import Settings
from ...textsearch import backend_parameters, keyword_query
from ...types import ArmResult
from .. import length_prior
from ._rows import COLUMNS, base_params, run_union, where_for


class KeywordRetriever:
    """BM25-style keyword matching; skipped when the query has no word tokens."""

    name = "keyword"
    #: the arm starts while the query is being embedded
    needs_embedding = False

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def enabled(self, ctx: RetrievalContext) -> bool:
        return bool(ctx.tokens) and bool(ctx.fact_types) and ctx.settings.enable_text_search

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        backend = ctx.text_search
        floor = ctx.min_keyword if ctx.min_keyword is not None else ctx.settings.bm25_min_score
        async with ctx.db.connect() as conn:
            query = keyword_query(await backend.prepare_query(ctx.query, ctx.tokens, conn))
            if query is None:
                return []
            params = {**base_params(ctx), **backend_parameters(backend), "query_text": query.text,
                      "query_terms": list(query.terms), "fact_types": list(ctx.fact_types), "min_score": floor,
                      "limit": ctx.limit, **length_prior.parameters(ctx.length_prior)}
            if backend.ranks_every_match and len(ctx.fact_types) > 1:
                # every fact type in one pass: LIMIT NULL lets the backend's statement return all matches
                return await run_union(conn, self.name, ctx, [_one_pass_sql(backend.arm_sql, ctx)],
                                       {**params, "limit": None, "per_type": ctx.limit}, "bm25_score")
            subselects = [backend.arm_sql(columns=COLUMNS, where=where_for(ctx, ft)) for ft in ctx.fact_types]
            return await run_union(conn, self.name, ctx, subselects, params, "bm25_score")


def _one_pass_sql(arm_sql: Any, ctx: RetrievalContext) -> str:
    """The top ``:per_type`` matches of every fact type from one scan, ranked as the per-type statements.

    For backends that score every match anyway (``ranks_every_match``): one scan instead of one per
    fact type, and only the kept rows are read whole.
    """
    types = ", ".join(f"'{ft}'" for ft in ctx.fact_types)  # validated enum values
    matched = arm_sql(columns="id, fact_type", where=f"bank_id = :bank_id AND fact_type IN ({types}) "
                                                        f"AND {ctx.filter.sql}")
    return (
        f"WITH matched AS {matched}, ranked AS (SELECT id, bm25_score, row_number() OVER "
        "(PARTITION BY fact_type ORDER BY bm25_score DESC, id) AS rn FROM matched) "
        # OFFSET 0 keeps each lookup a primary-key probe: as a join, the planner hashed the whole table
        f"SELECT kept.*, ranked.bm25_score FROM ranked CROSS JOIN LATERAL ("
        f"SELECT {COLUMNS} FROM memory_units WHERE memory_units.bank_id = :bank_id AND memory_units.id = ranked.id "
        "OFFSET 0) kept "
        "WHERE ranked.rn <= :per_type ORDER BY ranked.rn"
    )


@hookimpl
def register_retrievers(register: Any) -> None:
    register(KeywordRetriever)
