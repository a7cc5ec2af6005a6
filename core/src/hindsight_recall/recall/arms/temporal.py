"""The temporal arm: memories dated inside the query's window, spread over it, then along links.

1. A pool per fact type: up to B/5 rows (60 at the mid budget, at least 10) whose dates touch the
   window, most similar first.
2. Up to 10 entry points taken round-robin over 8 equal time buckets, so one busy week cannot
   crowd out the rest of the window.
3. Each row's proximity to the window's midpoint becomes its ``temporal_proximity``.
4. Spreading from the entry points to the memories nearest them in time (read from the dates: the
   nearest 20 of the same type on each side within 24 hours, weighted ``max(0.3, 1 − Δh/24)``) and
   along causal links finds related rows that may lie outside the window, one statement per round
   for every fact type.

Departure from upstream Hindsight: the arm ranks by relevance, not by closeness to the window's middle. A
row's score is its similarity to the query plus ``PROXIMITY_WEIGHT`` × its proximity (for a row
reached by spreading, its own proximity; the activation only decides which rows are reached). A
window says *when*; which of the many memories of that time answer the question is a matter of
relevance (docs/benchmarks.md has the numbers).
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ...hookspecs import hookimpl
from ...protocols import RetrievalContext
from ...settings import Settings
from ...store.schema import OCCURRED_RANGE
from ...types import ArmResult, Hit, MemoryRow, TimeWindow
from .. import cost
from ..budget import scaled
from ._ann import AnnSettings, hnsw_settings
from ._rows import COLUMNS, DISTANCE, base_params, nearest_sql, row_reader, run_union, where_for
from .semantic import ef_search, vector_literal

#: the pool per fact type at the mid budget (B = 300); it scales with B (budget.scaled)
POOL_AT_MID = 60
BUCKETS = 8
ENTRY_POINTS = 10
MAX_ROUNDS = 5
BATCH_SIZE = 20
LINKS_PER_NODE = 10
#: neighbours in time: the nearest memories of a node's type on each side within this many hours
NEIGHBOURS_PER_SIDE = 20
NEIGHBOUR_HOURS = 24.0
MIN_LINK_WEIGHT = 0.1
DECAY = 0.7
FRONTIER_MIN = 0.2
ENTRY_NO_DATE = 0.5
NEIGHBOUR_NO_DATE = 0.3
#: link type -> how strongly activation crosses it; causal links carry more than mere closeness in time
#: how much closeness to the window's middle adds to a row's similarity: it breaks near-ties only
PROXIMITY_WEIGHT = 0.1
LINK_FACTORS: dict[str, float] = {
    "causes": 2.0, "caused_by": 2.0, "enables": 1.5, "prevents": 1.5, "temporal": 1.0,
}

# The window test (the occurrence overlaps the window, or a date of the row lies in it) as one range
# overlap on the GiST (bank_id, fact_type, occurred range) index plus the mentioned_at btree.
_TOUCHES_WINDOW = (
    f"({OCCURRED_RANGE} && tstzrange(:window_start, :window_end, '[]') "
    "OR mentioned_at BETWEEN :window_start AND :window_end)"
)
_CAUSAL_TYPES = ", ".join(f"'{t}'" for t in LINK_FACTORS if t != "temporal")


def bucket_of(date: datetime | None, window: TimeWindow, buckets: int = BUCKETS) -> int:
    """The time bucket of a date: ``clamp(floor(n × (d − s)/(e − s)), 0, n − 1)``.

    :param date: the row's ``occurred_start ?? mentioned_at ?? occurred_end``.
    :param window: the query's window.
    :param buckets: how many equal buckets the window is split into.
    """
    span = (window.end - window.start).total_seconds()
    if date is None or span <= 0:
        return 0
    index = int(buckets * (date - window.start).total_seconds() // span)
    return min(max(index, 0), buckets - 1)


def spread_over_time(pool: Sequence[Hit], window: TimeWindow, limit: int = ENTRY_POINTS) -> list[Hit]:
    """Pick entry points that cover the window: the best of every bucket, then the second best, ...

    :param pool: candidate hits whose ``score`` is the similarity to the query.
    :param window: the query's window.
    :param limit: how many entry points to keep; a pool this small is kept whole.
    """
    ranked = sorted(pool, key=lambda h: -h.score)
    if len(ranked) <= limit:
        return ranked
    by_bucket: dict[int, list[Hit]] = {}
    for hit in ranked:
        by_bucket.setdefault(bucket_of(hit.row.date, window), []).append(hit)
    # Buckets fill in similarity order, so walking them by their best row is "strongest first".
    columns = sorted(by_bucket.values(), key=lambda hits: -hits[0].score)
    picked: list[Hit] = []
    for depth in range(max(len(c) for c in columns)):
        for hits in columns:
            if depth < len(hits):
                picked.append(hits[depth])
                if len(picked) == limit:
                    return picked
    return picked


def proximity(row: MemoryRow, window: TimeWindow, no_date: float) -> float:
    """How close a row lies to the window's midpoint: ``1 − min(|m − c| / (L/2), 1)``.

    :param row: the memory; ``m`` is the midpoint of its occurrence, else the date it has.
    :param window: the query's window (``L`` is its length).
    :param no_date: the value for a row without any date.
    """
    start, end = row.occurred_start, row.occurred_end
    if start is not None and end is not None:
        moment: datetime | None = start + (end - start) / 2
    else:
        moment = start or end or row.mentioned_at
    if moment is None:
        return no_date
    half = (window.end - window.start).total_seconds() / 2
    if half <= 0:
        return 1.0
    centre = window.start + (window.end - window.start) / 2
    return 1.0 - min(abs((moment - centre).total_seconds()) / half, 1.0)


def relevance(similarity: float, proximity_value: float) -> float:
    """A row's score in the arm: ``similarity + PROXIMITY_WEIGHT × proximity``."""
    return similarity + PROXIMITY_WEIGHT * proximity_value


def neighbour_weight(hours: float) -> float:
    """How strongly two memories ``hours`` apart are linked in time: ``max(0.3, 1 − Δh/24)``
    (the spreading statement computes the same in SQL)."""
    return max(0.3, 1 - abs(hours) / NEIGHBOUR_HOURS)


def propagate(t_parent: float, weight: float, link_type: str, p_child: float) -> float:
    """A neighbour's activation: ``max(p_child, t_parent × weight × factor × 0.7)``.

    :param t_parent: the parent's activation (1.0 for entry points).
    :param weight: the link weight in [0, 1].
    :param link_type: one of :data:`LINK_FACTORS`.
    :param p_child: the neighbour's own proximity.
    """
    return max(p_child, t_parent * weight * LINK_FACTORS[link_type] * DECAY)


@dataclass
class _Reached:
    row: MemoryRow
    t: float
    p: float
    similarity: float


@dataclass
class _Spreading:
    """One fact type's spreading state: its hits so far, frontier and node budget."""

    fact_type: str
    pool_size: int
    hits: list[Hit]
    budget: int
    entries: int = 0
    frontier: deque[tuple[uuid.UUID, float]] = field(default_factory=deque)
    rounds: int = 0

    @classmethod
    def from_pool(cls, fact_type: str, pool: Sequence[Hit], window: TimeWindow, limit: int) -> _Spreading:
        hits = []
        for entry in spread_over_time(pool, window):
            p = proximity(entry.row, window, ENTRY_NO_DATE)
            hits.append(Hit(entry.row, relevance(entry.score, p), {"temporal_proximity": p}))
        state = cls(fact_type, len(pool), hits, limit - len(hits), entries=len(hits))
        state.frontier.extend((h.row.id, 1.0) for h in hits)  # entry points act as parents with t = 1
        return state

    @property
    def active(self) -> bool:
        return bool(self.frontier) and self.budget > 0 and self.rounds < MAX_ROUNDS

    def next_batch(self) -> dict[uuid.UUID, float]:
        self.rounds += 1
        return dict(self.frontier.popleft() for _ in range(min(BATCH_SIZE, len(self.frontier))))

    def absorb(
        self, rows: Sequence[Any], batch: dict[uuid.UUID, float], window: TimeWindow
    ) -> list[uuid.UUID]:
        """Add the best-reached children (``(row, mapping)`` pairs) within the budget; return their ids."""
        reached: dict[uuid.UUID, _Reached] = {}
        for row, m in rows:
            p = proximity(row, window, NEIGHBOUR_NO_DATE)
            t = propagate(batch[m["parent"]], float(m["weight"]), m["link_type"], p)
            best = reached.get(row.id)
            if best is None or t > best.t:  # a child reached from several parents keeps its best path
                reached[row.id] = _Reached(row, t, p, float(m["similarity"]))
        added = sorted(reached.values(), key=lambda r: -r.t)[: self.budget]
        for child in added:
            self.hits.append(Hit(child.row, relevance(child.similarity, child.p), {"temporal_proximity": child.p}))
            if child.t > FRONTIER_MIN:
                self.frontier.append((child.row.id, child.t))
        self.budget -= len(added)
        return [child.row.id for child in added]

    def meta(self) -> dict[str, Any]:
        return {"pool": self.pool_size, "entry_points": self.entries, "rounds": self.rounds}


class TemporalRetriever:
    """Relevant memories from the query's time window, plus what they are linked to in time or cause."""

    name = "temporal"

    def __init__(self, settings: Settings | None = None) -> None:
        self._ann = AnnSettings()

    def enabled(self, ctx: RetrievalContext) -> bool:
        return ctx.window is not None and ctx.settings.enable_temporal_retrieval and bool(ctx.fact_types)

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        assert ctx.window is not None  # enabled() guarantees it
        started = time.perf_counter()
        params = {
            **base_params(ctx), "embedding": vector_literal(ctx.embedding),
            "floor": ctx.settings.temporal_semantic_min_similarity,
        }
        pool = scaled(POOL_AT_MID, ctx.limit, floor=ENTRY_POINTS)
        async with ctx.db.connect() as conn:
            # the pool may be served by the HNSW index with the dates as a post-filter
            await self._ann.apply(conn, hnsw_settings(ef_search(pool), ctx.settings))
            pools = await run_union(conn, self.name, ctx, [_pool_sql(ctx, ft) for ft in ctx.fact_types], {
                **params, "window_start": ctx.window.start, "window_end": ctx.window.end, "limit": pool,
            }, "similarity")
            states = [_Spreading.from_pool(p.fact_type, p.hits, ctx.window, ctx.limit) for p in pools]
            await self._spread(conn, ctx, states, params)
        elapsed = time.perf_counter() - started
        return [ArmResult(self.name, s.fact_type, s.hits, elapsed, s.meta()) for s in states]

    async def _spread(
        self, conn: AsyncConnection, ctx: RetrievalContext, states: Sequence[_Spreading],
        params: dict[str, Any],
    ) -> None:
        """Spread every fact type at once: one statement per round carries each type's next batch."""
        assert ctx.window is not None
        # A memory has one fact type, so one visited set serves every type.
        visited = {h.row.id for s in states for h in s.hits}
        sql = text(_neighbours_sql(ctx))
        while active := [s for s in states if s.active]:
            batches = {s.fact_type: s.next_batch() for s in active}
            parents = [parent for batch in batches.values() for parent in batch]
            kinds = [ft for ft, batch in batches.items() for _ in batch]
            async with cost.statement(conn, self.name):
                result = await conn.execute(sql, {
                    **params, "frontier": parents, "kinds": kinds, "visited": list(visited),
                    "per_node": LINKS_PER_NODE, "min_weight": MIN_LINK_WEIGHT, "per_side": NEIGHBOURS_PER_SIDE,
                    "hours": NEIGHBOUR_HOURS,
                })
                fetched = result.all()
            with cost.python(self.name):
                read = row_reader(tuple(result.keys()))
                rows = [(read(r), r._mapping) for r in fetched]
                by_type: dict[str, list[Any]] = {ft: [] for ft in batches}
                for row, m in rows:
                    by_type[row.fact_type].append((row, m))
                for state in active:
                    visited.update(state.absorb(by_type[state.fact_type], batches[state.fact_type], ctx.window))


async def window_holds_memories(ctx: RetrievalContext) -> bool:
    """Whether any memory that passes the request's filters is dated inside the window (one index probe
    per fact type): a window the bank has nothing in says the date words meant something else.

    :param ctx: the recall's context, with its window.
    """
    assert ctx.window is not None
    probes = " OR ".join(f"EXISTS (SELECT 1 FROM memory_units WHERE {where_for(ctx, ft)} AND {_TOUCHES_WINDOW})"
                         for ft in ctx.fact_types)
    if not probes:
        return False
    async with ctx.db.connect() as conn:
        return bool(await conn.scalar(text(f"SELECT {probes}"), {
            **base_params(ctx), "window_start": ctx.window.start, "window_end": ctx.window.end,
        }))


def _pool_sql(ctx: RetrievalContext, fact_type: str) -> str:
    return nearest_sql(f"{where_for(ctx, fact_type)} AND {_TOUCHES_WINDOW}")


def _neighbours_sql(ctx: RetrievalContext) -> str:
    # Each frontier node carries its fact type (`kind`); its neighbours must share it. Neighbours in
    # time are read from the dates (idx_mu_event_date), not stored: the node's NEIGHBOURS_PER_SIDE
    # nearest memories of its type before and after it within NEIGHBOUR_HOURS, weighted
    # max(0.3, 1 − Δh/24). Causal links are stored, both ways (causes / caused_by).
    side = ("(SELECT m.id, m.event_date FROM memory_units m WHERE m.bank_id = :bank_id AND m.fact_type = f.kind "
            "AND m.event_date {cmp} AND m.id <> f.parent ORDER BY m.event_date {order}, m.id {order} "
            "LIMIT :per_side)")
    hours = "CAST(:hours AS float8) * interval '1 hour'"
    before = side.format(cmp=f"BETWEEN p.event_date - {hours} AND p.event_date", order="DESC")
    after = side.format(cmp=f"> p.event_date AND m.event_date <= p.event_date + {hours}", order="ASC")
    return (
        f"SELECT f.parent, n.* FROM unnest(CAST(:frontier AS uuid[]), CAST(:kinds AS text[])) "
        f"AS f(parent, kind) JOIN memory_units p ON p.bank_id = :bank_id AND p.id = f.parent CROSS JOIN LATERAL ("
        f"SELECT {COLUMNS}, l.link_type, l.weight, 1 - {DISTANCE} AS similarity FROM ("
        f"SELECT to_unit_id AS child, link_type, weight FROM memory_links "
        f"WHERE bank_id = :bank_id AND from_unit_id = f.parent "
        f"AND link_type IN ({_CAUSAL_TYPES}) AND weight >= :min_weight "
        f"UNION ALL SELECT near.id, 'temporal', greatest(0.3, 1 - abs(extract(epoch FROM near.event_date - "
        f"p.event_date)::float8) / (3600 * CAST(:hours AS float8))) FROM ({before} UNION ALL {after}) AS near) AS l "
        f"JOIN memory_units ON memory_units.id = l.child "
        f"WHERE memory_units.bank_id = :bank_id AND memory_units.fact_type = f.kind AND {ctx.filter.sql} "
        f"AND embedding IS NOT NULL AND 1 - {DISTANCE} >= :floor "
        f"AND NOT (memory_units.id = ANY(CAST(:visited AS uuid[]))) "
        f"ORDER BY l.weight DESC, memory_units.id LIMIT :per_node) AS n"
    )


@hookimpl
def register_retrievers(register: Any) -> None:
    register(TemporalRetriever)
