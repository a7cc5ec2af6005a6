"""The memory graph of a bank: a page of its memories, the stored links among them and their entities."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .filters import tag_filter

#: at most this many stored links are read for one graph (upstream's cap)
MAX_EDGES = 10_000

_COLUMNS = (
    "u.id, u.external_id, u.text, u.context, u.fact_type, u.occurred_start, u.occurred_end, u.mentioned_at, "
    "u.event_date, u.document_id, u.chunk_id, u.tags, u.created_at, u.proof_count, u.source_memory_ids"
)


@dataclass(frozen=True)
class GraphPage:
    """What one graph render reads: the memories, how many match in all, their links and entity names."""

    units: list[Any]
    total: int
    #: (from uuid, to uuid, link type, weight), strongest first
    links: list[Any]
    #: memory uuid -> its entities' names (for the page's memories and their sources)
    entities: dict[Any, list[str]]


def _via_sources(column: str) -> str:
    """An observation whose sources carry ``:{column}`` (observations have no document or chunk of their own)."""
    return (f"(u.fact_type = 'observation' AND EXISTS (SELECT 1 FROM observation_sources os JOIN memory_units s "
            f"ON s.bank_id = os.bank_id AND s.id = os.source_id WHERE os.bank_id = u.bank_id "
            f"AND os.observation_id = u.id AND s.{column} = :{column}))")


async def graph_page(
    conn: AsyncConnection, bank_id: str, *, fact_type: str | None = None, search: str | None = None,
    tags: Sequence[str] | None = None, tags_match: str = "all_strict", document_id: str | None = None,
    chunk_id: str | None = None, limit: int = 1000,
) -> GraphPage:
    """The newest ``limit`` memories matching the filters, with the stored links among them (and their
    sources) and the entity names they mention.

    :param search: a case-insensitive substring of the text or the context (no pattern syntax).
    """
    wanted = tag_filter(tags, tags_match)
    where = ["u.bank_id = :bank", wanted.sql]  # its bare `tags` is u's: the only table in the FROM
    params: dict[str, Any] = {"bank": bank_id, **wanted.params}
    if fact_type:
        where.append("u.fact_type = :fact_type")
        params["fact_type"] = fact_type
    for column, value in (("document_id", document_id), ("chunk_id", chunk_id)):
        if value:
            where.append(f"(u.{column} = :{column} OR {_via_sources(column)})")
            params[column] = value
    if search:
        where.append("(strpos(lower(u.text), lower(:q)) > 0 OR strpos(lower(coalesce(u.context, '')), lower(:q)) > 0)")
        params["q"] = search
    condition = " AND ".join(where)
    total = int(await conn.scalar(text(f"SELECT count(*) FROM memory_units u WHERE {condition}"), params) or 0)
    units = list(await conn.execute(text(
        f"SELECT {_COLUMNS} FROM memory_units u WHERE {condition} "
        "ORDER BY u.mentioned_at DESC NULLS LAST, u.event_date DESC NULLS LAST, u.external_id LIMIT :limit"
    ), {**params, "limit": limit}))
    ids = [u.id for u in units]
    reach = sorted({*ids, *(s for u in units for s in (u.source_memory_ids or ()))})
    if not reach:
        return GraphPage(units, total, [], {})
    links = list(await conn.execute(text(
        "SELECT from_unit_id, to_unit_id, link_type, weight FROM memory_links WHERE bank_id = :bank "
        "AND from_unit_id = ANY(:ids) AND to_unit_id = ANY(:ids) ORDER BY weight DESC, from_unit_id, to_unit_id "
        "LIMIT :cap"
    ), {"bank": bank_id, "ids": reach, "cap": MAX_EDGES}))
    entities: dict[Any, list[str]] = {}
    for row in await conn.execute(text(
        "SELECT ue.unit_id, e.canonical_name FROM unit_entities ue JOIN entities e ON e.bank_id = ue.bank_id "
        "AND e.id = ue.entity_id WHERE ue.bank_id = :bank AND ue.unit_id = ANY(:ids) "
        "ORDER BY ue.unit_id, e.canonical_name"
    ), {"bank": bank_id, "ids": reach}):
        entities.setdefault(row.unit_id, []).append(row.canonical_name)
    return GraphPage(units, total, links, entities)
