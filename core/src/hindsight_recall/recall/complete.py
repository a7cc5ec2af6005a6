"""Completing rows: arms read only what ranking needs; the rows a recall shows are read whole, once.

An arm returns up to ``B`` rows per fact type, and most of them never reach the answer; reading
their text, tags and metadata cost more than the ranking itself. The rows that are shown (packed
results, source facts, and everything when the trace is on) or scored by a reranker are filled in
here, with one statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, MutableMapping, MutableSequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import text

from ..store.driver import fetch
from ..store.schema import ROW_COLUMNS
from ..types import Candidate, Hit, MemoryRow
from .arms._rows import row_reader

#: the entities of the rows in ``:entities_of`` as (entity id, canonical name) pairs, ordered by
#: name; grouped in one pass, not per row (a lateral subquery per row scanned the bank's entities
#: once per row: 3.7 ms of server CPU for 68 rows of a 10k bank)
_ENTITIES = (
    "LEFT JOIN (SELECT ue.unit_id, array_agg(e.id ORDER BY e.canonical_name) AS entity_ids, "
    "array_agg(e.canonical_name ORDER BY e.canonical_name) AS entity_names "
    "FROM unit_entities ue JOIN entities e ON e.id = ue.entity_id "
    "WHERE e.bank_id = :bank AND ue.bank_id = :bank AND ue.unit_id = ANY(:entities_of) "
    "GROUP BY ue.unit_id) ents ON ents.unit_id = memory_units.id"
)

Entities = dict[uuid.UUID, list[tuple[uuid.UUID, str]]]


@dataclass
class Shown:
    """What an answer shows that the arms did not read: whole rows, their entities and the chunks."""

    #: whole rows by internal id (the shown rows left incomplete, and the sources of observations)
    rows: dict[uuid.UUID, MemoryRow] = field(default_factory=dict)
    #: (entity id, canonical name) pairs per memory, for the memories whose entities were asked for
    entities: Entities = field(default_factory=dict)
    #: chunk id -> (text, index in its document)
    chunks: dict[str, tuple[str, int]] = field(default_factory=dict)


async def read_shown(db: Any, bank_id: str, ids: Collection[uuid.UUID], entities_of: Collection[uuid.UUID],
                     chunk_ids: Collection[str]) -> Shown:
    """Everything an answer shows beyond the arms' rows, on one connection: the rows and their entities in
    one statement, the chunks in a second (only when asked for).

    :param db: hands out the recall's connections.
    :param bank_id: the bank; nothing of other banks is read.
    :param ids: memories to read whole.
    :param entities_of: memories whose entities are wanted (read whole as well).
    :param chunk_ids: chunks to read.
    """
    shown = Shown()
    if not (ids or entities_of or chunk_ids):
        return shown
    async with db.connect() as conn:
        if ids or entities_of:
            shown.rows, shown.entities = await fetch_rows_and_entities(conn, bank_id, ids, entities_of)
        if chunk_ids:
            found = await conn.execute(
                text("SELECT chunk_id, chunk_text, chunk_index FROM chunks WHERE bank_id = :bank "
                     "AND chunk_id = ANY(:ids)"), {"bank": bank_id, "ids": list(chunk_ids)})
            shown.chunks = {r.chunk_id: (r.chunk_text, r.chunk_index) for r in found}
    return shown


async def fetch_rows(conn: Any, bank_id: str, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, MemoryRow]:
    """Whole rows of the bank by internal id, in one statement.

    :param conn: an open connection.
    :param bank_id: the bank; rows of other banks are never read.
    :param ids: the memories wanted.
    """
    return (await fetch_rows_and_entities(conn, bank_id, ids, ()))[0]


async def fetch_rows_and_entities(
    conn: Any, bank_id: str, ids: Iterable[uuid.UUID], entities_of: Collection[uuid.UUID]
) -> tuple[dict[uuid.UUID, MemoryRow], Entities]:
    """Whole rows of the bank by internal id and the entities of some of them, in one statement
    (the answer's rows and its entities cost one round trip, not two).

    :param conn: an open connection.
    :param bank_id: the bank; rows of other banks are never read.
    :param ids: the memories wanted.
    :param entities_of: memories whose entities are wanted too (read whole as well).
    """
    wanted = list(dict.fromkeys([*ids, *entities_of]))
    if not wanted:
        return {}, {}
    joined = _ENTITIES if entities_of else ""
    extra = ", ents.entity_ids, ents.entity_names" if entities_of else ""
    keys, fetched = await fetch(
        conn, f"SELECT {ROW_COLUMNS}{extra} FROM memory_units {joined} "
              "WHERE memory_units.bank_id = :bank AND memory_units.id = ANY(:ids)",
        {"bank": bank_id, "ids": wanted, **({"entities_of": list(entities_of)} if entities_of else {})},
    )
    read = row_reader(keys)
    rows: dict[uuid.UUID, MemoryRow] = {}
    entities: Entities = {}
    for values in fetched:
        row = rows[values[0]] = read(values)  # id is the first of ROW_COLUMNS
        if entities_of and values[-2]:  # entity_ids, entity_names: the last two columns
            entities[row.id] = list(zip(values[-2], values[-1], strict=True))
    return rows, entities


def incomplete(candidates: Iterable[Candidate]) -> list[uuid.UUID]:
    """Ids of the candidates whose rows an arm read in part."""
    return [c.row.id for c in candidates if not c.row.complete]


def fill(
    rows: MutableMapping[uuid.UUID, MemoryRow], candidates: Iterable[Candidate],
    lists: Mapping[str, MutableSequence[Hit]] | None = None,
) -> None:
    """Put fetched rows in place of the incomplete ones of candidates (and of arm lists' hits).

    :param rows: whole rows by id, as :func:`fetch_rows` returns them.
    :param candidates: candidates to update in place.
    :param lists: each arm's hits, updated in place (the trace shows them).
    """
    for c in candidates:
        if not c.row.complete and c.row.id in rows:
            c.row = rows[c.row.id]
    for hits in (lists or {}).values():
        for i, h in enumerate(hits):
            if not h.row.complete and h.row.id in rows:
                hits[i] = replace(h, row=rows[h.row.id])


async def complete(conn: Any, bank_id: str, candidates: list[Candidate]) -> None:
    """Fill in the incomplete rows among ``candidates`` with one statement.

    :param conn: an open connection.
    :param bank_id: the bank of the recall.
    :param candidates: updated in place.
    """
    ids = incomplete(candidates)
    if ids:
        fill(await fetch_rows(conn, bank_id, ids), candidates)
