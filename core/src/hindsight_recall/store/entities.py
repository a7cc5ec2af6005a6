"""Entities read back: each with how often and when its bank's memories mention it, and which
entities the same memories mention together (the co-occurrence graph).

Counts and dates are read from the entity pairs at request time, not kept: a forget or a re-retain
can never leave them stale. With a tag filter they cover only the memories the tags match, and an
entity no such memory mentions is not there, as upstream Hindsight reads them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .filters import tag_filter

#: when a memory mentioned its entities: the date its retain stamps on them
_SEEN = "coalesce(u.occurred_start, u.mentioned_at, u.event_date)"


def _mentions(tags: Sequence[str] | None, tags_match: str) -> tuple[str, dict[str, Any], bool]:
    """SQL of ``(unit_id, entity_id, seen)`` rows for the bank ``:bank``'s memories the tags match,
    its parameters, and whether a tag filter applies."""
    wanted = tag_filter(tags, tags_match)
    sql = (f"SELECT ue.unit_id, ue.entity_id, {_SEEN} AS seen FROM unit_entities ue JOIN memory_units u "
           f"ON u.bank_id = ue.bank_id AND u.id = ue.unit_id WHERE ue.bank_id = :bank AND {wanted.sql}")
    return sql, dict(wanted.params), wanted.sql != "TRUE"


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _entity(row: Any) -> dict[str, Any]:
    return {"id": str(row.id), "canonical_name": row.canonical_name, "mention_count": int(row.mentions or 0),
            "first_seen": _iso(row.first_seen), "last_seen": _iso(row.last_seen), "metadata": {}}


def _stats(mentions: str, filtered: bool) -> str:
    """entities ``e`` of ``:bank`` with their mention count and first/last dates (``s``)."""
    join = "JOIN" if filtered else "LEFT JOIN"
    return (f"FROM entities e {join} (SELECT entity_id, count(*) AS mentions, min(seen) AS first_seen, "
            f"max(seen) AS last_seen FROM ({mentions}) AS m GROUP BY entity_id) AS s ON s.entity_id = e.id "
            "WHERE e.bank_id = :bank")


async def list_entities(
    conn: AsyncConnection, bank_id: str, *, search: str | None = None, tags: Sequence[str] | None = None,
    tags_match: str = "any", limit: int = 100, offset: int = 0,
) -> dict[str, Any]:
    """A page of the bank's entities, most mentioned first, with the total.

    :param search: a case-insensitive substring of the entity's name (no pattern syntax).
    :param tags: count only the memories these tags match (``tags_match`` says how).
    """
    mentions, params, filtered = _mentions(tags, tags_match)
    params["bank"] = bank_id
    source = _stats(mentions, filtered)
    if search:
        source += " AND strpos(lower(e.canonical_name), lower(:q)) > 0"
        params["q"] = search
    total = int(await conn.scalar(text(f"SELECT count(*) {source}"), params) or 0)
    rows = await conn.execute(text(
        f"SELECT e.id, e.canonical_name, s.mentions, s.first_seen, s.last_seen {source} "
        "ORDER BY coalesce(s.mentions, 0) DESC, s.last_seen DESC NULLS LAST, e.id LIMIT :limit OFFSET :offset"
    ), {**params, "limit": limit, "offset": offset})
    return {"items": [_entity(r) for r in rows], "total": total, "limit": limit, "offset": offset}


async def get_entity(
    conn: AsyncConnection, bank_id: str, entity_id: uuid.UUID, *, tags: Sequence[str] | None = None,
    tags_match: str = "any", memories: int = 100,
) -> dict[str, Any] | None:
    """One entity with its counts and the memories that mention it (most recent first, at most
    ``memories`` of them), or ``None`` when the bank has no such entity (or no matching memory names it)."""
    mentions, params, filtered = _mentions(tags, tags_match)
    params.update(bank=bank_id, entity=entity_id)
    row = (await conn.execute(text(
        f"SELECT e.id, e.canonical_name, s.mentions, s.first_seen, s.last_seen {_stats(mentions, filtered)} "
        "AND e.id = :entity"
    ), params)).first()
    if row is None:
        return None
    wanted = tag_filter(tags, tags_match)
    rows = await conn.execute(text(
        f"SELECT u.external_id, u.text, u.fact_type, u.context, u.occurred_start, u.occurred_end, u.mentioned_at, "
        f"u.document_id, u.tags FROM unit_entities ue JOIN memory_units u ON u.bank_id = ue.bank_id "
        f"AND u.id = ue.unit_id WHERE ue.bank_id = :bank AND ue.entity_id = :entity AND {wanted.sql} "
        f"ORDER BY {_SEEN} DESC NULLS LAST, u.external_id LIMIT :limit"
    ), {**wanted.params, "bank": bank_id, "entity": entity_id, "limit": memories})
    found = [{"id": r.external_id, "text": r.text, "type": r.fact_type, "context": r.context,
              "occurred_start": _iso(r.occurred_start), "occurred_end": _iso(r.occurred_end),
              "mentioned_at": _iso(r.mentioned_at), "document_id": r.document_id, "tags": list(r.tags or ())}
             for r in rows]
    return {**_entity(row), "observations": [], "memories": found}


async def entity_graph(
    conn: AsyncConnection, bank_id: str, *, limit: int = 1000, min_count: int = 1,
    tags: Sequence[str] | None = None, tags_match: str = "any",
) -> dict[str, Any]:
    """Entities mentioned together by the same memories: the ``limit`` strongest pairs of at least
    ``min_count`` shared memories, with their entities as nodes (upstream's Cytoscape shape)."""
    mentions, params, _ = _mentions(tags, tags_match)
    params.update(bank=bank_id, min_count=min_count, limit=limit)
    rows = await conn.execute(text(
        f"WITH m AS MATERIALIZED ({mentions}), "
        "counts AS (SELECT entity_id, count(*) AS n FROM m GROUP BY entity_id), "
        "pairs AS (SELECT a.entity_id AS e1, b.entity_id AS e2, count(*) AS n, max(a.seen) AS last "
        "FROM m a JOIN m b ON b.unit_id = a.unit_id AND a.entity_id < b.entity_id GROUP BY 1, 2 "
        "HAVING count(*) >= :min_count ORDER BY n DESC, last DESC NULLS LAST, e1, e2 LIMIT :limit) "
        "SELECT p.e1, p.e2, p.n, p.last, x.canonical_name AS name1, cx.n AS count1, "
        "y.canonical_name AS name2, cy.n AS count2 FROM pairs p "
        "JOIN entities x ON x.bank_id = :bank AND x.id = p.e1 JOIN entities y ON y.bank_id = :bank AND y.id = p.e2 "
        "JOIN counts cx ON cx.entity_id = p.e1 JOIN counts cy ON cy.entity_id = p.e2 "
        "ORDER BY p.n DESC, p.last DESC NULLS LAST, p.e1, p.e2"
    ), params)
    nodes: dict[str, dict[str, Any]] = {}
    edges = []
    for r in rows:
        for key, name, count in ((str(r.e1), r.name1, r.count1), (str(r.e2), r.name2, r.count2)):
            nodes.setdefault(key, {"data": {"id": key, "label": name, "mentionCount": int(count),
                                            "color": "#42a5f5" if count > 1 else "#90caf9"}})
        source, target = str(r.e1), str(r.e2)
        edges.append({"data": {"id": f"{source}-{target}", "source": source, "target": target,
                               "linkType": "cooccurrence", "weight": int(r.n), "color": "#ffd700",
                               "lineStyle": "solid", "lastCooccurred": _iso(r.last)}})
    return {"nodes": list(nodes.values()), "edges": edges, "total_entities": len(nodes),
            "total_edges": len(edges), "limit": limit}
