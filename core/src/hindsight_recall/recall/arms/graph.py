"""The graph arm: link expansion from the query's nearest memories.

Per fact type, up to B/15 *seeds* (20 at the mid budget B = 300, at least 5; similarity
≥ ``GRAPH_SEED_MIN_SIMILARITY``, passing the filters) are expanded to the other memories of that
type they reach:

- **entity**: memories sharing an entity with a seed, at most ``LINK_EXPANSION_PER_ENTITY_LIMIT``
  per entity (after the type and tag filters, highest unit id first); ``count`` = distinct seed
  entities shared. Observations go seed → source memories → their entities → other source memories
  → observations citing them, and ``count`` = distinct shared sources.
- **causal**: ``causes|caused_by|enables|prevents`` links out of a seed, the strongest weight.
- **semantic**: ``semantic`` links in either direction, the strongest weight.

The score is ``g = tanh(0.5 × count) + semantic + causal``; the arm keeps the best ``B``. The
expansion has ``LINK_EXPANSION_TIMEOUT`` seconds; past it, it runs again without the entity part.

Two rules keep the arm from flooding rank fusion with candidates that only echo the other arms:

- **Hub entities are skipped.** An entity on a large part of the memories (a conversation's
  speaker, the bank's owner) links everything to everything. An entity counts only when its reach
  (the other visible memories of the type carrying it) is at most
  ``LINK_EXPANSION_MAX_ENTITY_FRACTION`` of the visible memories of the type and does not overflow
  the per-entity cap (what the cap keeps is arbitrary). Every other entity counts 1, so the plain
  scores stay ``tanh(0.5)``, ``tanh(1)``, ``tanh(1.5)``. A fraction of 1 turns the guard off.
- **Semantic links add to a score but admit no candidate.** A semantic link is embedding
  similarity, the semantic arm's own signal: a neighbour close to the query is already in that
  arm's list (a second vote for it would count the same evidence twice), and one far from the query
  is contradicted by the direct measurement. Entity and causal links carry what embeddings miss.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import replace
from typing import Any

from ...hookspecs import hookimpl
from ...protocols import RetrievalContext
from ...settings import Settings
from ...types import FACT_TYPES, ArmResult
from ..budget import scaled
from ._ann import AnnSettings, hnsw_settings
from ._compose import ArmStatement
from ._rows import COLUMNS, base_params, nearest_sql, run_union, where_for
from .semantic import ef_search, nearest, nearest_params, semantic_floor, vector_literal

log = logging.getLogger(__name__)

#: seeds per fact type at the mid budget (B = 300); they scale with B (budget.scaled)
SEEDS_AT_MID = 20
CAUSAL_TYPES = "('causes', 'caused_by', 'enables', 'prevents')"


class GraphRetriever:
    """Link expansion: memories sharing entities with, or linked to, the query's nearest memories."""

    name = "graph"

    def __init__(self, settings: Settings | None = None) -> None:
        self._ann = AnnSettings()

    def enabled(self, ctx: RetrievalContext) -> bool:
        """Run when ``ENABLE_GRAPH_RETRIEVAL`` is on and fact types were asked for.

        :param ctx: the recall's retrieval context.
        """
        return bool(ctx.fact_types) and ctx.settings.enable_graph_retrieval

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        """Expand every fact type in one statement; rerun without entities after a timeout.

        :param ctx: the recall's retrieval context.
        """
        timeout = ctx.settings.link_expansion_timeout
        try:
            return await self._run(ctx, entities=True, timeout=timeout)
        except TimeoutError:
            log.warning("graph expansion took over %.3g s; running it again without entities", timeout)
            results = await self._run(ctx, entities=False, timeout=None)
            return [replace(r, metadata={"timed_out": True}) for r in results]

    def statement(self, ctx: RetrievalContext) -> ArmStatement:
        """The arm as one composable statement (see :mod:`._compose`); the entity part included.

        The seeds are the first of the semantic arm's nearest memories (the CTEs of
        :func:`.semantic.nearest`, shared when the two arms run as one statement), so the vector
        index is searched once per fact type instead of twice. That needs the seeds to be a prefix
        of that list: a floor at most the seeds' own and a limit at least theirs; else the arm
        searches its seeds itself.

        :param ctx: the recall's retrieval context.
        """
        ctes = nearest(ctx)
        shared = semantic_floor(ctx) <= ctx.settings.graph_seed_min_similarity and seed_limit(ctx) <= ctx.limit
        statements = [expansion_sql(ctx, ft, seeds_from=f"nearest_{ft}" if shared else None)
                      for ft in ctx.fact_types]
        params = {**statements[0][1], **(nearest_params(ctx) if shared else {})}
        ann = hnsw_settings(ef_search(ctx.limit), ctx.settings) if ctx.indexed else {}
        return ArmStatement(self.name, [f"({sql})" for sql, _ in statements], params, ann,
                            ctx.settings.link_expansion_timeout, ctes=ctes if shared else {})

    async def _run(
        self, ctx: RetrievalContext, *, entities: bool, timeout: float | None
    ) -> list[ArmResult]:
        # one statement for all fact types on one connection: measured as fast as one connection
        # per type, without taking the connections the other arms of the recall are waiting for
        statements = [expansion_sql(ctx, ft, entities=entities) for ft in ctx.fact_types]
        subselects = [f"({sql})" for sql, _ in statements]
        async with ctx.db.connect() as conn:
            # the clock starts once a connection is held: waiting for one is not expansion work
            async with asyncio.timeout(timeout):
                if ctx.indexed:
                    # the shared index holds other banks' rows too: the iterative scan keeps them
                    # (and rows a tag filter hides) from starving the seeds; a small bank is exact
                    await self._ann.apply(conn, hnsw_settings(ef_search(ctx.limit), ctx.settings))
                return await run_union(conn, self.name, ctx, subselects, statements[0][1], "graph_score")


def seed_limit(ctx: RetrievalContext) -> int:
    """Seeds per fact type: B/15 (20 at the mid budget), at least 5."""
    return scaled(SEEDS_AT_MID, ctx.limit, floor=5)


def expansion_sql(
    ctx: RetrievalContext, fact_type: str, *, entities: bool = True, seeds_from: str | None = None
) -> tuple[str, dict[str, Any]]:
    """The statement (and its parameters) that expands one fact type.

    :param ctx: the recall's retrieval context.
    :param fact_type: the fact type to expand (a validated enum value).
    :param entities: include the entity part (left out on the rerun after a timeout).
    :param seeds_from: a CTE of the fact type's nearest memories, nearest first, with ``id``,
        ``source_memory_ids`` and ``similarity`` (:func:`.semantic.nearest`); the seeds are read from
        it instead of searched.
    """
    s = ctx.settings
    where = where_for(ctx, fact_type)
    cap = s.link_expansion_per_entity_limit
    guard = s.link_expansion_max_entity_fraction < 1
    params: dict[str, Any] = {
        **base_params(ctx), "embedding": vector_literal(ctx.embedding),
        "seed_floor": s.graph_seed_min_similarity, "seed_limit": seed_limit(ctx),
        "limit": ctx.limit,
        # one row past the cap tells a saturated entity apart from one that just fills it
        "entity_fetch": cap + 1 if guard else cap, "per_entity": cap,
        "fraction": s.link_expansion_max_entity_fraction,
        # counting further cannot change the verdict: reach <= cap + 1 <= fraction × this
        "visible_cap": math.ceil((cap + 1) / s.link_expansion_max_entity_fraction) + 1,
    }
    seeds = (
        f"SELECT id AS seed_id, source_memory_ids AS seed_sources FROM {seeds_from} "
        "WHERE similarity >= :seed_floor ORDER BY similarity DESC, id LIMIT :seed_limit"
        if seeds_from else
        "SELECT id AS seed_id, source_memory_ids AS seed_sources FROM "
        f"{nearest_sql(where, limit='seed_limit', floor='seed_floor')} AS nearest"
    )
    ctes = [
        f"seeds AS MATERIALIZED ({seeds})",
        "semantic_hits AS (SELECT cand_id, max(weight) AS w FROM ("
        "SELECT l.to_unit_id AS cand_id, l.weight FROM memory_links l "
        "JOIN seeds ON l.from_unit_id = seeds.seed_id WHERE l.bank_id = :bank_id AND l.link_type = 'semantic' "
        "UNION ALL SELECT l.from_unit_id, l.weight FROM memory_links l JOIN seeds ON l.to_unit_id = seeds.seed_id "
        "WHERE l.bank_id = :bank_id AND l.link_type = 'semantic') s GROUP BY cand_id)",
        "causal_hits AS (SELECT l.to_unit_id AS cand_id, max(l.weight) AS w FROM memory_links l "
        f"JOIN seeds ON l.from_unit_id = seeds.seed_id WHERE l.bank_id = :bank_id AND l.link_type IN {CAUSAL_TYPES} "
        "GROUP BY l.to_unit_id)",
    ]
    # ``admits``: a semantic link alone brings in no candidate (see the module docstring)
    parts = ["SELECT cand_id, 0 AS shared, w AS sem, 0.0 AS causal, 0 AS admits FROM semantic_hits",
             "SELECT cand_id, 0, 0.0, w, 1 FROM causal_hits"]
    if entities:
        ctes += _entity_ctes(fact_type, where, ctx.filter.sql, guard)
        parts.append("SELECT cand_id, shared, 0.0, 0.0, 1 FROM entity_hits")
    ctes.append(
        "scored AS (SELECT cand_id, sum(shared)::float8 AS shared, sum(sem) AS sem, sum(causal) AS causal "
        f"FROM ({' UNION ALL '.join(parts)}) p GROUP BY cand_id "
        "HAVING sum(admits) > 0)"
    )
    # Best first, each candidate's row read through a lateral join that keeps that order, so the
    # LIMIT stops reading rows once it has its ``:limit`` that pass the filter (before, every
    # candidate's row was read and sorted: 1,067 rows for 300 at 10k memories).
    sql = (
        f"WITH {', '.join(ctes)} "
        f"SELECT {COLUMNS}, ranked.graph_score FROM ("
        "SELECT cand_id, tanh(0.5 * shared) + sem + causal AS graph_score FROM scored "
        "WHERE cand_id NOT IN (SELECT seed_id FROM seeds) ORDER BY graph_score DESC, cand_id DESC) ranked "
        f"CROSS JOIN LATERAL (SELECT {COLUMNS} FROM memory_units WHERE memory_units.id = ranked.cand_id "
        f"AND {where}) memory_units "
        "ORDER BY ranked.graph_score DESC, ranked.cand_id DESC LIMIT :limit"
    )
    return sql, params


def _entity_ctes(fact_type: str, where: str, tag_sql: str, guard: bool) -> list[str]:
    """CTEs ending in ``entity_hits(cand_id, shared)``: the entity part, direct or via sources."""
    if fact_type != "observation":
        origin = ("SELECT DISTINCT ue.entity_id FROM unit_entities ue JOIN seeds ON ue.unit_id = seeds.seed_id "
                  "WHERE ue.bank_id = :bank_id")
        # the tag filter goes inside the per-entity cap, so invisible rows never use it up
        walk = _walk(fact_type, "AND ue.unit_id NOT IN (SELECT seed_id FROM seeds)", tag_sql)
        population = where
    else:
        origin = (
            "SELECT DISTINCT ue.entity_id FROM unit_entities ue JOIN (SELECT DISTINCT unnest(seed_sources) "
            "AS source_id FROM seeds) ss ON ue.unit_id = ss.source_id WHERE ue.bank_id = :bank_id"
        )
        # source memories are hops, not answers: only the bank bounds them; the filter applies to
        # the observations reached. One ordered walk per source type, merged: each stops at its LIMIT.
        walk = ("SELECT unit_id FROM (" + " UNION ALL ".join(
            f"({_walk(ft, '', 'TRUE')})" for ft in FACT_TYPES if ft != "observation"
        ) + ") w ORDER BY unit_id DESC LIMIT :entity_fetch")
        population = "bank_id = :bank_id AND fact_type <> 'observation'"
    kept = "count(*) <= :per_entity AND count(*) <= :fraction * (SELECT n FROM visible)" if guard else "TRUE"
    ctes = [
        f"origin_entities AS ({origin})",
        f"entity_reach AS (SELECT oe.entity_id, r.unit_id FROM origin_entities oe CROSS JOIN LATERAL ({walk}) r)",
        "visible AS (SELECT count(*) AS n FROM "
        f"(SELECT 1 FROM memory_units WHERE {population} LIMIT :visible_cap) v)",
        f"kept_entities AS (SELECT entity_id FROM entity_reach GROUP BY entity_id HAVING {kept})",
        "reached AS (SELECT entity_reach.entity_id, unit_id FROM entity_reach JOIN kept_entities "
        "ON kept_entities.entity_id = entity_reach.entity_id)",
    ]
    if fact_type != "observation":
        ctes.append("entity_hits AS (SELECT unit_id AS cand_id, count(DISTINCT entity_id) AS shared "
                    "FROM reached GROUP BY unit_id)")
    else:
        ctes.append(
            "entity_hits AS (SELECT os.observation_id AS cand_id, count(DISTINCT os.source_id) AS shared "
            "FROM (SELECT DISTINCT unit_id FROM reached) rs "
            "JOIN observation_sources os ON os.bank_id = :bank_id AND os.source_id = rs.unit_id "
            "JOIN memory_units o ON o.id = os.observation_id "
            "WHERE o.bank_id = :bank_id AND o.fact_type = 'observation' GROUP BY os.observation_id)"
        )
    return ctes


def _walk(fact_type: str, exclude: str, tag_sql: str) -> str:
    """An entity's memories of one fact type, newest id first, up to ``:entity_fetch``.

    An entity belongs to one bank and its pairs carry their fact type and bank, so without a tag filter
    the walk is an index-only scan of ``idx_unit_entities_reach`` that stops at the LIMIT;
    ``memory_units`` is read only to apply a tag filter.
    """
    join = ("" if tag_sql == "TRUE" else
            "JOIN memory_units ON memory_units.bank_id = :bank_id AND memory_units.id = ue.unit_id ")
    return (f"SELECT ue.unit_id FROM unit_entities ue {join}"
            f"WHERE ue.bank_id = :bank_id AND ue.entity_id = oe.entity_id AND ue.fact_type = '{fact_type}' "
            f"{exclude} AND {tag_sql} ORDER BY ue.unit_id DESC LIMIT :entity_fetch")


@hookimpl
def register_retrievers(register: Any) -> None:
    register(GraphRetriever)
