"""Migration 7's data step: new ids for rows whose names could collide under the old joined ids.

Ids were hashes of names joined by ``\\x1f``, so a bank or memory id holding that character could
share an id with another bank's row. Such rows get the length-prefixed ids of
:func:`~hindsight_recall.store.ids.id_name`, and every reference to them follows; entity pairs that
point at another bank's entity move to an entity of their own bank. Other rows keep their ids.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .ids import entity_id, unit_id

#: a regular expression for the separators, bound as a value
_SEPARATOR_CLASS = "[\x1e\x1f]"


async def reid_ambiguous(conn: AsyncConnection) -> None:
    """Re-id memories and entities whose names hold a separator; repoint every reference."""
    rows = await conn.execute(text(
        "SELECT id, bank_id, external_id FROM memory_units WHERE bank_id ~ :sep OR external_id ~ :sep"
    ), {"sep": _SEPARATOR_CLASS})
    units = [(r.id, unit_id(r.bank_id, r.external_id)) for r in rows]
    units = [(old, new) for old, new in units if old != new]
    if units:
        await _reid_units(conn, units)
    pairs = await conn.execute(text(
        "SELECT DISTINCT u.bank_id, e.id, e.canonical_name FROM unit_entities ue "
        "JOIN memory_units u ON u.id = ue.unit_id JOIN entities e ON e.id = ue.entity_id "
        "WHERE u.bank_id <> e.bank_id OR u.bank_id ~ :sep OR e.canonical_name ~ :sep"
    ), {"sep": _SEPARATOR_CLASS})
    entities = [(p.bank_id, p.id, entity_id(p.bank_id, p.canonical_name), p.canonical_name) for p in pairs]
    entities = [e for e in entities if e[1] != e[2]]
    if entities:
        await _reid_entities(conn, entities)


async def _reid_units(conn: AsyncConnection, mapping: list[tuple[Any, Any]]) -> None:
    await conn.execute(text("CREATE TEMP TABLE reid_units (old uuid PRIMARY KEY, new uuid NOT NULL) ON COMMIT DROP"))
    await conn.execute(text(
        "INSERT INTO reid_units SELECT * FROM unnest(CAST(:old AS uuid[]), CAST(:new AS uuid[]))"
    ), {"old": [m[0] for m in mapping], "new": [m[1] for m in mapping]})
    # unit_entities references memory_units without ON UPDATE: move the pairs out and back (whole rows:
    # a store keyed by bank has one more column than the version-7 store this first ran on)
    for statement in (
        "CREATE TEMP TABLE reid_pairs ON COMMIT DROP AS SELECT ue.* "
        "FROM unit_entities ue JOIN reid_units m ON ue.unit_id = m.old",
        "UPDATE reid_pairs p SET unit_id = m.new FROM reid_units m WHERE p.unit_id = m.old",
        "DELETE FROM unit_entities ue USING reid_units m WHERE ue.unit_id = m.old",
        "UPDATE memory_units u SET id = m.new FROM reid_units m WHERE u.id = m.old",
        "INSERT INTO unit_entities SELECT * FROM reid_pairs",
        "UPDATE memory_links l SET from_unit_id = m.new FROM reid_units m WHERE l.from_unit_id = m.old",
        "UPDATE memory_links l SET to_unit_id = m.new FROM reid_units m WHERE l.to_unit_id = m.old",
        "UPDATE observation_sources o SET source_id = m.new FROM reid_units m WHERE o.source_id = m.old",
        "UPDATE observation_sources o SET observation_id = m.new FROM reid_units m WHERE o.observation_id = m.old",
        "UPDATE memory_units u SET source_memory_ids = ARRAY("
        "SELECT coalesce(m.new, s.id) FROM unnest(u.source_memory_ids) WITH ORDINALITY AS s(id, n) "
        "LEFT JOIN reid_units m ON m.old = s.id ORDER BY s.n) "
        "WHERE u.source_memory_ids && (SELECT array_agg(old) FROM reid_units)",
    ):
        await conn.execute(text(statement))


async def _reid_entities(conn: AsyncConnection, mapping: list[tuple[str, Any, Any, str]]) -> None:
    await conn.execute(text(
        "CREATE TEMP TABLE reid_entities (bank_id text, old uuid, new uuid, name text) ON COMMIT DROP"
    ))
    await conn.execute(text(
        "INSERT INTO reid_entities SELECT * FROM unnest(CAST(:banks AS text[]), CAST(:old AS uuid[]), "
        "CAST(:new AS uuid[]), CAST(:names AS text[]))"
    ), {"banks": [m[0] for m in mapping], "old": [m[1] for m in mapping], "new": [m[2] for m in mapping],
        "names": [m[3] for m in mapping]})
    for statement in (
        "INSERT INTO entities (id, bank_id, canonical_name) SELECT DISTINCT ON (new) new, bank_id, name "
        "FROM reid_entities ORDER BY new, name ON CONFLICT (id) DO NOTHING",
        "CREATE TEMP TABLE reid_moved ON COMMIT DROP AS SELECT ue.*, r.new AS new_entity "
        "FROM unit_entities ue JOIN memory_units u ON u.id = ue.unit_id "
        "JOIN reid_entities r ON r.old = ue.entity_id AND r.bank_id = u.bank_id",
        "UPDATE reid_moved SET entity_id = new_entity",
        "ALTER TABLE reid_moved DROP COLUMN new_entity",
        "INSERT INTO unit_entities SELECT * FROM reid_moved ON CONFLICT DO NOTHING",
        "DELETE FROM unit_entities ue USING memory_units u, reid_entities r "
        "WHERE u.id = ue.unit_id AND r.old = ue.entity_id AND r.bank_id = u.bank_id",
        "DELETE FROM entities e WHERE e.id IN (SELECT old FROM reid_entities) "
        "AND NOT EXISTS (SELECT 1 FROM unit_entities ue WHERE ue.entity_id = e.id)",
    ):
        await conn.execute(text(statement))
