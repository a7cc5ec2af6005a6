"""Documents: a bank's memories grouped by their document id, read back as upstream Hindsight shows them.

A document is its memories: its text is its chunks in order (else its memories' texts in place order),
its tags are the union of its memories' tags, its counts are theirs. Only when it arrived and when it
last changed are stored (the ``documents`` table, written at retain), so a document never disagrees
with what its memories say after a re-retain, a forget or a tag change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..protocols import TextSearchBackend
from . import banks
from .filters import tag_filter
from .schema import of_document

#: the time axes a document listing filters and orders by
TIME_FIELDS = ("created_at", "updated_at")

#: the memories of document ``d`` of the bank ``:bank`` (the expression index on the document key serves it;
#: the bank named as a value keeps each statement on the bank's shard under Citus)
_OF_DOC = f"m.bank_id = :bank AND {of_document('m', 'd.document_id')}"
#: the union of the document's memories' tags, sorted
_TAGS = (
    "(SELECT coalesce(array_agg(DISTINCT t ORDER BY t), CAST('{}' AS varchar[])) FROM memory_units m "
    f"CROSS JOIN LATERAL unnest(m.tags) AS t WHERE {_OF_DOC})"
)
#: whether the search text ``:q`` is in the document's text (a memory's or a chunk's), case-insensitively
_TEXT_MATCH = (
    f"(EXISTS (SELECT 1 FROM memory_units m WHERE {_OF_DOC} AND strpos(lower(m.text), lower(:q)) > 0) "
    "OR EXISTS (SELECT 1 FROM chunks c WHERE c.bank_id = :bank AND c.document_id = d.document_id "
    "AND strpos(lower(c.chunk_text), lower(:q)) > 0))"
)
_ID_MATCH = "strpos(lower(d.document_id), lower(:q)) > 0"


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else ""


#: the memories of the documents ``:ids`` of the bank ``:bank``, in place order
_OF_IDS = f"m.bank_id = :bank AND {of_document('m', 'ANY(:ids)')}"
_PLACE = "m.position NULLS LAST, m.created_at, m.external_id"
#: per document of ``:ids``, one aggregate each (no correlated subquery: Citus plans them on the bank's shard)
_PER_DOCUMENT = {
    # the text: its chunks in order, else its memories' texts in place order
    "c": "SELECT c.bank_id, c.document_id, string_agg(c.chunk_text, E'\\n' ORDER BY c.chunk_index) AS body "
         "FROM chunks c WHERE c.bank_id = :bank AND c.document_id = ANY(:ids) GROUP BY c.bank_id, c.document_id",
    "n": f"SELECT m.bank_id, m.document_id, string_agg(m.text, E'\\n' ORDER BY {_PLACE}) AS body, count(*) AS units, "
         "count(*) FILTER (WHERE m.fact_type = 'world') AS world, "
         "count(*) FILTER (WHERE m.fact_type = 'experience') AS experience "
         f"FROM memory_units m WHERE {_OF_IDS} GROUP BY m.bank_id, m.document_id",
    # the union of its memories' tags, sorted
    "g": "SELECT t.bank_id, t.document_id, array_agg(DISTINCT t.tag ORDER BY t.tag) AS tags FROM "
         f"(SELECT m.bank_id, m.document_id, unnest(m.tags) AS tag FROM memory_units m WHERE {_OF_IDS}) t "
         "GROUP BY t.bank_id, t.document_id",
    "o": "SELECT m.bank_id, m.document_id, count(DISTINCT os.observation_id) AS observations FROM memory_units m "
         f"JOIN observation_sources os ON os.bank_id = m.bank_id AND os.source_id = m.id WHERE {_OF_IDS} "
         "GROUP BY m.bank_id, m.document_id",
    # its first memory
    "f": "SELECT DISTINCT ON (m.document_id) m.bank_id, m.document_id, m.context, m.metadata, m.occurred_start "
         f"FROM memory_units m WHERE {_OF_IDS} ORDER BY m.document_id, {_PLACE}",
}


async def _details(conn: AsyncConnection, bank_id: str, ids: Sequence[str], *, with_text: bool) -> dict[str, Any]:
    """document id -> its dates, text length and hash, tags, counts and first memory's fields."""
    joined = " ".join(f"LEFT JOIN ({sql}) {a} ON {a}.bank_id = d.bank_id AND {a}.document_id = d.document_id"
                      for a, sql in _PER_DOCUMENT.items())
    rows = await conn.execute(text(
        "SELECT x.document_id, x.created_at, x.updated_at, length(x.whole) AS text_length, "
        "encode(sha256(convert_to(x.whole, 'UTF8')), 'hex') AS content_hash, "
        f"{'x.whole' if with_text else 'NULL'} AS body, x.tags, x.units, x.world, x.experience, x.observations, "
        "x.context, x.metadata, x.occurred_start "
        "FROM (SELECT d.document_id, d.created_at, d.updated_at, coalesce(c.body, n.body, '') AS whole, "
        "coalesce(g.tags, CAST('{}' AS varchar[])) AS tags, coalesce(n.units, 0) AS units, "
        "coalesce(n.world, 0) AS world, coalesce(n.experience, 0) AS experience, "
        "coalesce(o.observations, 0) AS observations, f.context, f.metadata, f.occurred_start "
        f"FROM documents d {joined} WHERE d.bank_id = :bank AND d.document_id = ANY(:ids)) x"
    ), {"bank": bank_id, "ids": list(ids)})
    return {r.document_id: r for r in rows}


def _retain_params(row: Any) -> dict[str, Any] | None:
    """What the document's first item was retained with, as far as its memory keeps it."""
    params: dict[str, Any] = {}
    if row.context:
        params["context"] = row.context
    params["event_date"] = row.occurred_start.isoformat() if row.occurred_start else None
    if row.metadata:
        params["metadata"] = dict(row.metadata)
    return params if row.units else None


def _item(bank_id: str, row: Any) -> dict[str, Any]:
    return {
        "id": row.document_id, "bank_id": bank_id, "content_hash": row.content_hash,
        "created_at": _iso(row.created_at), "updated_at": _iso(row.updated_at), "text_length": row.text_length,
        "memory_unit_count": row.units, "retain_params": _retain_params(row),
        "document_metadata": dict(row.metadata) if row.metadata else None, "tags": list(row.tags),
    }


async def list_documents(
    conn: AsyncConnection, bank_id: str, *, search: str | None = None, tags: Sequence[str] | None = None,
    tags_match: str = "any_strict", time_field: str | None = None, start: datetime | None = None,
    end: datetime | None = None, limit: int = 100, offset: int = 0,
) -> dict[str, Any]:
    """A page of the bank's documents, most recently written first (or by ``time_field``), with the total.

    :param search: a case-insensitive substring of the document id or its text (no pattern syntax).
    :param tags: tags the document's tags (its memories' union) must match, as ``tags_match`` says.
    :param time_field: ``created_at`` or ``updated_at`` (the default): the axis ordered and windowed.
    :param start: inclusive lower bound on ``time_field``.
    :param end: exclusive upper bound on ``time_field``.
    """
    axis = time_field or "updated_at"
    if axis not in TIME_FIELDS:
        raise ValueError(f"time_field must be one of {', '.join(TIME_FIELDS)}")
    where = ["d.bank_id = :bank"]
    params: dict[str, Any] = {"bank": bank_id}
    if search:
        where.append(f"({_ID_MATCH} OR {_TEXT_MATCH})")
        params["q"] = search
    if tags or tags_match == "exact":
        wanted = tag_filter(tags, tags_match)
        where.append(f"EXISTS (SELECT 1 FROM (SELECT {_TAGS} AS tags) AS dt WHERE {wanted.sql})")
        params.update(wanted.params)
    if start is not None:
        where.append(f"d.{axis} >= :start")
        params["start"] = start
    if end is not None:
        where.append(f"d.{axis} < :end")
        params["end"] = end
    condition = " AND ".join(where)
    total = int(await conn.scalar(text(f"SELECT count(*) FROM documents d WHERE {condition}"), params) or 0)
    matched = f"{_ID_MATCH} AS id_match, {_TEXT_MATCH} AS text_match" if search else \
        "false AS id_match, false AS text_match"
    page = (await conn.execute(text(
        f"SELECT d.document_id, {matched} FROM documents d WHERE {condition} "
        f"ORDER BY d.{axis} DESC, d.document_id LIMIT :limit OFFSET :offset"
    ), {**params, "limit": limit, "offset": offset})).all()
    details = await _details(conn, bank_id, [r.document_id for r in page], with_text=False)
    items = []
    for r in page:
        if r.document_id not in details:  # removed between the two reads
            continue
        fields = [f for f, hit in (("id", r.id_match), ("original_text", r.text_match)) if hit]
        items.append({**_item(bank_id, details[r.document_id]), "matched_fields": fields})
    return {"items": items, "total": total, "limit": limit, "offset": offset, "total_is_estimate": False}


async def get_document(conn: AsyncConnection, bank_id: str, document_id: str) -> dict[str, Any] | None:
    """One document with its text, tags, dates and memory counts by type, or ``None``."""
    row = (await _details(conn, bank_id, [document_id], with_text=True)).get(document_id)
    if row is None:
        return None
    item = _item(bank_id, row)
    del item["text_length"]
    return {**item, "original_text": row.body,
            "nodes_by_fact_type": {"world": row.world, "experience": row.experience, "observation": row.observations},
            "observation_scopes": None}


async def exists(conn: AsyncConnection, bank_id: str, document_id: str) -> bool:
    return bool(await conn.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM documents WHERE bank_id = :bank AND document_id = :doc)"
    ), {"bank": bank_id, "doc": document_id}))


async def set_tags(conn: AsyncConnection, bank_id: str, document_id: str, tags: Sequence[str]) -> bool:
    """Replace the tags of every memory of the document with ``tags`` (a document's tags are its
    memories'); the same set as now changes nothing but the document's time. False for no document."""
    stamped = await conn.scalar(text(
        "UPDATE documents SET updated_at = now() WHERE bank_id = :bank AND document_id = :doc RETURNING 1"
    ), {"bank": bank_id, "doc": document_id})
    if stamped is None:
        return False
    current = await conn.scalar(text(f"SELECT {_TAGS} FROM documents d WHERE d.bank_id = :bank "
                                     "AND d.document_id = :doc"), {"bank": bank_id, "doc": document_id})
    if set(current or ()) != set(tags):
        await conn.execute(text(
            f"UPDATE memory_units SET tags = CAST(:tags AS varchar[]), updated_at = now() "
            f"WHERE bank_id = :bank AND {of_document('memory_units', ':doc')}"
        ), {"bank": bank_id, "doc": document_id, "tags": list(tags)})
    return True


async def delete_document(conn: AsyncConnection, bank_id: str, document_id: str,
                          backend: TextSearchBackend | None = None) -> int | None:
    """Remove the document with its memories (their links, entity pairs and unused entities) and its
    chunks; how many memories went, or ``None`` when the bank has no such document."""
    if not await exists(conn, bank_id, document_id):
        return None
    ids = list((await conn.execute(text(
        f"SELECT external_id FROM memory_units u WHERE u.bank_id = :bank AND {of_document('u', ':doc')}"
    ), {"bank": bank_id, "doc": document_id})).scalars())
    removed = await banks.forget(conn, bank_id, ids, backend)
    for table in ("chunks", "documents"):
        await conn.execute(text(f"DELETE FROM {table} WHERE bank_id = :bank AND document_id = :doc"),
                           {"bank": bank_id, "doc": document_id})
    return removed
