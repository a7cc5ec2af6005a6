"""Documents as the store keeps them: dated at retain (any retain, not only HTTP's), read back from
their chunks and memories, gone with their last memory, and filled in for older databases."""

from __future__ import annotations

from hindsight_recall import Engine
from hindsight_recall.store import documents, schema
from hindsight_recall.types import Memory
from sqlalchemy import text


async def _document_rows(engine: Engine, bank: str) -> dict[str, tuple[object, object]]:
    async with engine.db.connect() as conn:
        rows = await conn.execute(text("SELECT document_id, created_at, updated_at FROM documents WHERE bank_id = :b"),
                                  {"b": bank})
        return {r.document_id: (r.created_at, r.updated_at) for r in rows}


async def test_facts_with_a_source_chunk_read_back_as_that_chunk(engine: Engine, bank: str) -> None:
    session = "Alice: I moved to Lisbon. Bob: nice, I stay in Porto."
    await engine.retain(bank, [
        Memory(id="f1", text="Alice moved to Lisbon.", document_id="s1", chunk=session, tags=("a",)),
        Memory(id="f2", text="Bob stays in Porto.", document_id="s1", chunk=session, tags=("b",)),
        Memory(id="f3", text="A fact with no chunk.", document_id="s2"),
        Memory(id="loose", text="No document at all."),
    ], progress=False)
    assert set(await _document_rows(engine, bank)) == {"s1", "s2"}
    async with engine.db.connect() as conn:
        s1 = await documents.get_document(conn, bank, "s1")
        s2 = await documents.get_document(conn, bank, "s2")
        listed = await documents.list_documents(conn, bank)
    assert s1 is not None and s2 is not None
    assert s1["original_text"] == session and s1["memory_unit_count"] == 2 and s1["tags"] == ["a", "b"]
    assert s2["original_text"] == "A fact with no chunk."
    assert listed["total"] == 2


async def test_forgetting_the_last_memory_removes_the_document(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [Memory(id="m1", text="one", document_id="d"),
                               Memory(id="m2", text="two", document_id="d")], progress=False)
    await engine.forget(bank, ["m1"])
    assert set(await _document_rows(engine, bank)) == {"d"}
    await engine.forget(bank, ["m2"])
    assert await _document_rows(engine, bank) == {}


async def test_a_changed_chunk_leaves_no_orphan(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [Memory(id="m", text="fact", document_id="d", chunk="old source")], progress=False)
    await engine.retain(bank, [Memory(id="m", text="fact", document_id="d", chunk="new source")], progress=False)
    async with engine.db.connect() as conn:
        chunks = list((await conn.execute(text("SELECT chunk_text FROM chunks WHERE bank_id = :b"),
                                          {"b": bank})).scalars())
    assert chunks == ["new source"]


async def test_the_upgrade_dates_the_documents_of_existing_memories(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [Memory(id="m1", text="one", document_id="d1"),
                               Memory(id="m2", text="two", document_id="d2"),
                               Memory(id="m3", text="three")], progress=False)
    before = await _document_rows(engine, bank)
    async with engine.db.connect() as conn:
        await conn.execute(text("DELETE FROM documents WHERE bank_id = :b"), {"b": bank})
        await schema._v14_rows(schema.Upgrade(conn, online=False))
        await schema._v14_rows(schema.Upgrade(conn, online=False))  # idempotent
        dates = {r.document_id: (r.created_at, r.updated_at) for r in await conn.execute(text(
            "SELECT d.document_id, min(u.created_at) AS created_at, max(u.updated_at) AS updated_at "
            "FROM documents d JOIN memory_units u ON u.bank_id = d.bank_id AND u.document_id = d.document_id "
            "WHERE d.bank_id = :b GROUP BY d.document_id"), {"b": bank})}
    after = await _document_rows(engine, bank)
    assert set(after) == set(before) == {"d1", "d2"} and after == dates
