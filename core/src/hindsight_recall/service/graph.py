"""The bank's memory graph (upstream's ``get_graph``): memories as nodes, their links as edges, and a
table of the same memories, in the Cytoscape shape upstream's console draws."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine.graph import MAX_EDGES, GraphPage
from ..recall.arms.temporal import NEIGHBOUR_HOURS, NEIGHBOURS_PER_SIDE, neighbour_weight
from ..types import FACT_TYPES
from ._params import bounded_int, tags_match_query, tags_query
from .base import bank_of, choice_query, endpoint, engine_of, text_query
from .wire import answer

#: the most memories one graph holds
MAX_NODES = 100_000
#: an entity links each memory to this many of the next memories that mention it (not all pairs)
ENTITY_NEIGHBOURS = 10
#: link type -> (colour, line style)
STYLES = {"temporal": ("#00bcd4", "dashed"), "semantic": ("#ff69b4", "solid"), "entity": ("#ffd700", "solid")}

#: (from, to, link type, weight, entity name)
Edge = tuple[Any, Any, str, float, str]


def _observers(page: GraphPage) -> dict[Any, list[Any]]:
    """source memory -> the page's observations built on it."""
    out: dict[Any, list[Any]] = {}
    for unit in page.units:
        for source in unit.source_memory_ids or ():
            out.setdefault(source, []).append(unit.id)
    return out


def _entity_names(page: GraphPage) -> dict[Any, list[str]]:
    """memory -> the entities it mentions; an observation without its own borrows its sources'."""
    names = {u.id: list(page.entities.get(u.id, ())) for u in page.units}
    for unit in page.units:
        if unit.source_memory_ids and not names[unit.id]:
            borrowed = (n for s in unit.source_memory_ids for n in page.entities.get(s, ()))
            names[unit.id] = list(dict.fromkeys(borrowed))
    return names


def _stored(page: GraphPage, visible: set[Any], observers: dict[Any, list[Any]]) -> Iterator[Edge]:
    """The stored links among the page's memories, then those its observations take from their sources."""
    for a, b, kind, weight in page.links:
        if a in visible and b in visible:
            yield a, b, kind, weight, ""
    for a, b, kind, weight in page.links:
        from_obs, to_obs = observers.get(a, []), observers.get(b, [])
        if from_obs and (b in visible or to_obs):
            target = to_obs[0] if to_obs and b not in visible else b
            yield from ((o, target, kind, weight, "") for o in from_obs if target in visible and o != target)
        if to_obs and a in visible:
            yield from ((a, o, kind, weight, "") for o in to_obs if o != a)


def _nearby(page: GraphPage) -> Iterator[Edge]:
    """Memories within a day of each other, as the temporal arm reads them from the dates (nothing is
    stored): each memory to its nearest later ones, weight ``max(0.3, 1 − Δh/24)``."""
    dated = sorted((u for u in page.units if u.event_date is not None), key=lambda u: u.event_date)
    for i, earlier in enumerate(dated):
        for later in dated[i + 1 : i + 1 + NEIGHBOURS_PER_SIDE]:
            hours = (later.event_date - earlier.event_date).total_seconds() / 3600
            if hours > NEIGHBOUR_HOURS:
                break
            yield later.id, earlier.id, "temporal", neighbour_weight(hours), ""


def _inferred(page: GraphPage, names: dict[Any, list[str]]) -> Iterator[Edge]:
    """Observations sharing a source, then memories sharing an entity (rarest entity first), each pair once."""
    shared: dict[Any, list[Any]] = {}
    for unit in page.units:
        if unit.fact_type == "observation":
            for source in unit.source_memory_ids or ():
                shared.setdefault(source, []).append(unit.id)
    pairs = ((a, b, "semantic", 1.0, "") for ids in shared.values() for a, b in itertools.combinations(ids, 2))
    by_entity: dict[str, list[Any]] = {}
    for unit in page.units:
        for name in names[unit.id]:
            by_entity.setdefault(name, []).append(unit.id)
    mentions = (
        (ids[i], ids[j], "entity", 1.0, name)
        for name, ids in sorted(by_entity.items(), key=lambda kv: len(kv[1]))
        for i in range(len(ids)) for j in range(i + 1, min(i + 1 + ENTITY_NEIGHBOURS, len(ids)))
    )
    seen: set[tuple[str, str, str, str]] = set()
    for edge in itertools.chain(pairs, mentions):
        a, b = sorted((str(edge[0]), str(edge[1])))
        key = (a, b, edge[2], edge[4])
        if key not in seen:
            seen.add(key)
            yield edge


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def assemble(page: GraphPage, limit: int) -> dict[str, Any]:
    """Nodes, edges (stored and inferred, each up to :data:`MAX_EDGES`) and table rows of one page."""
    external = {u.id: u.external_id for u in page.units}
    observers, names = _observers(page), _entity_names(page)
    edges: list[dict[str, Any]] = []
    seen: set[tuple[Any, Any, str, str]] = set()

    def add(rows: Iterable[Edge]) -> None:
        added = 0
        for a, b, kind, weight, entity in rows:
            if added >= MAX_EDGES:
                return
            if (a, b, kind, entity) in seen:
                continue
            seen.add((a, b, kind, entity))
            added += 1
            colour, line = STYLES.get(kind, ("#999999", "solid"))
            source, target = external[a], external[b]
            edges.append({"data": {"id": f"{source}-{target}-{kind}", "source": source, "target": target,
                                   "linkType": kind, "weight": float(weight), "entityName": entity,
                                   "color": colour, "lineStyle": line}})

    add(_stored(page, set(external), observers))
    add(_nearby(page))
    add(_inferred(page, names))
    nodes, rows = [], []
    for u in page.units:
        mentioned = ", ".join(names[u.id]) or "None"
        count = len(names[u.id])
        nodes.append({"data": {
            "id": u.external_id, "label": f"{u.text[:30]}..." if len(u.text) > 30 else u.text, "text": u.text,
            "date": _iso(u.event_date) or "", "context": u.context or "", "entities": mentioned,
            "color": "#e0e0e0" if count == 0 else "#90caf9" if count == 1 else "#42a5f5",
        }})
        rows.append({
            "id": u.external_id, "text": u.text, "context": u.context or "N/A",
            "occurred_start": _iso(u.occurred_start), "occurred_end": _iso(u.occurred_end),
            "mentioned_at": _iso(u.mentioned_at),
            "date": u.event_date.strftime("%Y-%m-%d %H:%M") if u.event_date else "N/A",
            "entities": mentioned, "document_id": u.document_id, "chunk_id": u.chunk_id or None,
            "fact_type": u.fact_type, "tags": list(u.tags or ()), "created_at": _iso(u.created_at),
            "proof_count": u.proof_count or None,
        })
    return {"nodes": nodes, "edges": edges, "table_rows": rows, "total_units": page.total, "limit": limit}


@endpoint
async def get_graph(request: Request) -> Response:
    bank_id = bank_of(request)
    options: dict[str, Any] = dict(
        fact_type=choice_query(request, "type", tuple(FACT_TYPES)), search=text_query(request, "q"),
        tags=tags_query(request), tags_match=tags_match_query(request, "all_strict"),
        document_id=text_query(request, "document_id"), chunk_id=text_query(request, "chunk_id"),
        limit=bounded_int(request, "limit", 1000, maximum=MAX_NODES),
    )
    page = await engine_of(request).graph.page(bank_id, **options)
    return answer(request, "GraphDataResponse", assemble(page, options["limit"]))


def routes(banks_path: str) -> list[Route]:
    return [Route(f"{banks_path}/graph", get_graph, methods=["GET"])]
