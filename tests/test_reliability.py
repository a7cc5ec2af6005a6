"""Bank isolation under adversarial names: no bank sees or changes another's memories, chunks or entities.

Bank, memory and document ids are drawn at random, including pairs whose joined forms collide
(bank ``u`` + document ``1_notes`` and bank ``u_1`` + document ``notes``; ``\\x1f`` inside names),
and every bank of an example must see exactly its own rows. Deleting one bank must leave the others
byte-identical.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hindsight_recall import Engine
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

#: fragments that build colliding names when joined by "_" or "\x1f"
TRICKY = ["u", "u_1", "1_notes", "notes", "_", "a\x1fb", "b\x1fc", "c", "a", "entity", "x\x1fentity\x1fy",
          "chunk-0", "Ünïcødé", "名前", "a_b_0", "0"]
NAME = st.one_of(
    st.sampled_from(TRICKY),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=8)
    .filter(lambda s: s.strip() == s != ""),  # ids and names are stored stripped
)
#: one example's banks: (bank suffix, memory id, document id, entity name), bank suffixes distinct
BANKS = st.lists(st.tuples(NAME, NAME, NAME, NAME), min_size=2, max_size=3, unique_by=lambda b: b[0])

_examples = itertools.count()

#: every row a bank owns, as text, in a fixed order: the "byte-identical" comparison
DUMP = [
    "SELECT b::text FROM banks b WHERE bank_id = ANY(:banks) ORDER BY bank_id",
    "SELECT u::text FROM memory_units u WHERE bank_id = ANY(:banks) ORDER BY id",
    "SELECT c::text FROM chunks c WHERE bank_id = ANY(:banks) ORDER BY bank_id, chunk_id",
    "SELECT e::text FROM entities e WHERE bank_id = ANY(:banks) ORDER BY id",
    "SELECT ue::text FROM unit_entities ue JOIN memory_units u ON u.id = ue.unit_id AND u.bank_id = ue.bank_id "
    "WHERE u.bank_id = ANY(:banks) ORDER BY ue.unit_id, ue.entity_id",
    "SELECT l::text FROM memory_links l WHERE EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = ANY(:banks) "
    "AND u.bank_id = l.bank_id AND u.id IN (l.from_unit_id, l.to_unit_id)) "
    "ORDER BY l.from_unit_id, l.to_unit_id, l.link_type",
    "SELECT o::text FROM observation_sources o "
    "JOIN memory_units u ON u.id = o.observation_id AND u.bank_id = o.bank_id "
    "WHERE u.bank_id = ANY(:banks) ORDER BY o.source_id, o.observation_id",
]


async def dump(engine: Engine, banks: list[str]) -> list[list[str]]:
    async with engine.db.connect() as conn:
        return [list((await conn.execute(text(q), {"banks": banks})).scalars()) for q in DUMP]


def memories(i: int, memory_id: str, document: str, entity: str) -> list[dict[str, Any]]:
    """Two memories per bank, one an observation of the other, with text only this bank has."""
    return [
        {"id": memory_id, "text": f"Marker{i} fact about {entity}.", "document_id": document,
         "chunk": f"Chunk text of bank number {i}.", "entities": [entity], "type": "world"},
        {"id": memory_id + "/obs", "text": f"Marker{i} observation.", "type": "observation",
         "sources": [memory_id], "entities": [entity], "document_id": document,
         "chunk": f"Second chunk of bank number {i}."},
    ]


@pytest.mark.slow
# no shrinking: a failure prints its example, and a database round trip per step makes shrinking slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(drawn=BANKS)
@example(drawn=[("u", "m", "1_notes", "Alice"), ("u_1", "m", "notes", "Bob")])
@example(drawn=[("a\x1fb", "c", "d", "E"), ("a", "b\x1fc", "d", "e")])
@example(drawn=[("a\x1fentity\x1fb", "m", "d", "c"), ("a", "n", "d", "b\x1fentity\x1fc")])
async def test_no_bank_sees_or_touches_another(engine: Engine, drawn: list[tuple[str, str, str, str]]) -> None:
    prefix = f"iso{next(_examples)}-{uuid.uuid4().hex[:6]}-"  # fresh even on a reused database
    banks = [prefix + b for b, *_ in drawn]
    for i, (bank, (_, memory_id, document, entity)) in enumerate(zip(banks, drawn, strict=True)):
        await engine.retain(bank, memories(i, memory_id, document, entity))
    try:
        for i, (bank, (_, memory_id, _, entity)) in enumerate(zip(banks, drawn, strict=True)):
            body = await engine.recall(bank, f"Marker{i} fact", include_chunks=10_000, include_entities=10_000)
            assert {r["id"] for r in body["results"]} == {memory_id, memory_id + "/obs"}
            assert all(f"Marker{i} " in r["text"] for r in body["results"])
            assert {c["text"] for c in body["chunks"].values()} == {f"Chunk text of bank number {i}.",
                                                                   f"Second chunk of bank number {i}."}
            assert set(body["entities"]) == {entity}
            assert all(r["entities"] == [entity] for r in body["results"])
            async with engine.db.connect() as conn:
                owned = (await conn.execute(text(
                    "SELECT (SELECT count(*) FROM memory_units WHERE bank_id = :b), "
                    "(SELECT array_agg(chunk_text ORDER BY chunk_text) FROM chunks WHERE bank_id = :b), "
                    # pairs of the bank whose memory or entity is not the bank's own
                    "(SELECT count(*) FROM unit_entities ue WHERE ue.bank_id = :b AND ("
                    "NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = :b AND u.id = ue.unit_id) OR "
                    "NOT EXISTS (SELECT 1 FROM entities e WHERE e.bank_id = :b AND e.id = ue.entity_id)))"
                ), {"b": bank})).one()
            assert tuple(owned) == (2, [f"Chunk text of bank number {i}.", f"Second chunk of bank number {i}."], 0)
        others = banks[1:]
        before = await dump(engine, others)
        assert await engine.delete_bank(banks[0])
        assert await dump(engine, others) == before
        assert await engine.bank_stats(banks[0]) is None
    finally:
        for bank in banks:
            await engine.delete_bank(bank)
