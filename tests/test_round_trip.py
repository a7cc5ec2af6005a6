"""Export -> import -> export is lossless: the bank's rows in every bank-keyed table come back the same,
and the second archive is the first, entry for entry and byte for byte (only the export time differs).
Runs on one node and on Citus (tests(citus))."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from hindsight_recall import Engine
from hindsight_recall.service.items import build_memories
from hindsight_recall.service.schemas import RetainBody
from hindsight_recall.store import banks as bank_store
from hindsight_recall.store import transfer as transfer_store
from hindsight_recall.testing.snapshot import bank_rows, differences, document_texts, orphans
from sqlalchemy import text

#: what a restore cannot and need not give back: the bank row's own identity and write times, the
#: memories' last write and HNSW slot (embeddings are compared apart, within a tolerance), chunks' write
#: times, and the records of the transfers themselves
NOT_CONTENT = {
    "banks": ["internal_id", "created_at", "updated_at", "ann_slot"],
    "memory_units": ["updated_at", "embedding", "ann_slot"],
    "chunks": ["created_at"],
    "bank_transfers": ["*"], "transfer_archive_parts": ["*"], "operations": ["*"],
}


def items(document: str, texts: list[str], **extra: Any) -> list[dict[str, Any]]:
    return [{"content": t, "document_id": document, **extra} for t in texts]


async def build(engine: Engine, bank: str) -> None:
    """A bank with what a round trip has to carry: long documents (more than ten chunks), a document
    replaced in a new order, chunk indexes with a gap, loose memories with causes, an observation, tags,
    metadata, dates, entities, an invalidated memory, a profile and settings."""
    long_doc = [f"Entry {i}: the harbour master logged the {i}th ship." for i in range(14)]
    for texts in (long_doc, [long_doc[0], "A new second entry.", *long_doc[2:]]):
        body = RetainBody(items=items("log", texts, tags=["harbour"], metadata={"source": "ledger"},
                                      timestamp="2024-03-01T10:00:00Z"))
        memories, replaced = build_memories(bank, body, {})
        await engine.retain(bank, memories, replace_documents=replaced)
    body = RetainBody(items=items("diary", [f"Day {i} at sea." for i in range(12)], context="voyage"))
    diary, replaced = build_memories(bank, body, {})
    await engine.retain(bank, diary, replace_documents=replaced)
    await engine.forget(bank, [diary[3].id])  # a gap in the diary's chunk indexes
    await engine.retain(bank, [
        {"id": "storm", "text": "A storm closed the harbour for two days.", "type": "world", "entities": ["Harbour"],
         "occurred_start": "2024-03-02T00:00:00Z", "occurred_end": "2024-03-04T00:00:00Z", "tags": ["weather"]},
        {"id": "delay", "text": "Ships waited outside the harbour.", "type": "experience", "causes": [],
         "entities": ["Harbour", "Ships"], "mentioned_at": "2024-03-03T08:00:00Z", "proof_count": 3,
         "metadata": {"k": "v"}},
        {"id": "cause", "text": "The storm delayed the ships.", "causes": ["delay"], "entities": ["Storm"]},
        {"id": "obs", "text": "Storms delay shipping.", "type": "observation", "sources": ["storm", "delay"]},
        {"id": "wrong", "text": "The harbour never closes.", "context": "rumour"},
    ])
    import dataclasses

    await engine.update_memory(bank, "wrong", lambda m: dataclasses.replace(m), state="invalidated",
                               reason="contradicted by the storm")
    async with engine.db.connect() as conn:
        await bank_store.set_bank_profile(conn, bank, {"name": "Harbour log", "mission": "Remember the ships.",
                                                       "disposition": {"empathy": 5}})
        await bank_store.set_bank_config(conn, bank, {"recall_budget_fixed_mid": 250, "recall_fusion": "rrf"})


async def export(engine: Engine, bank: str) -> bytes:
    transfer_id, _ = await engine.transfers.export(bank)
    async with engine.db.connect() as conn:
        return b"".join([part async for part in transfer_store.archive_parts(conn, bank, transfer_id)])


async def state(engine: Engine, bank: str) -> tuple[Any, dict[str, np.ndarray]]:
    async with engine.db.connect() as conn:
        rows = await bank_rows(conn, [bank], skip=NOT_CONTENT)
        # a lexeme counted down to nothing keeps its row at 0: the same counts, not content
        rows["term_stats"] = [r for r in rows["term_stats"] if dict(r)["df"] != 0]
        vectors = {r.external_id: np.asarray(r.embedding.to_numpy(), dtype=np.float32) for r in await conn.execute(text(
            "SELECT external_id, embedding FROM memory_units WHERE bank_id = :b"), {"b": bank})}
        assert await orphans(conn, [bank]) == []
    return rows, vectors


def entries(archive: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


async def test_export_import_export_gives_the_same_bank_and_the_same_archive(
    engine: Engine, bank: str, tmp_path: Path
) -> None:
    await build(engine, bank)
    before, vectors_before = await state(engine, bank)
    assert any(r for r in before["invalidated_memories"]) and before["memory_links"] and before["documents"]
    first = await export(engine, bank)
    assert await engine.delete_bank(bank)
    path = tmp_path / "bank.zip"
    path.write_bytes(first)
    await engine.transfers.restore(path, record_on=bank)  # the target is the archive's own bank
    after, vectors_after = await state(engine, bank)
    assert differences(before, after) == []
    assert vectors_after.keys() == vectors_before.keys()
    for memory_id, vector in vectors_before.items():
        assert np.allclose(vector, vectors_after[memory_id], atol=1e-4), memory_id
    second = entries(await export(engine, bank))
    first_entries = entries(first)
    assert second.keys() == first_entries.keys()
    for name, data in first_entries.items():
        if name == "manifest.json":
            a, b = json.loads(data), json.loads(second[name])
            assert {**a, "exported_at": None} == {**b, "exported_at": None}
        else:
            assert data == second[name], name


async def texts(engine: Engine, bank: str) -> dict[str, str]:
    async with engine.db.connect() as conn:
        return await document_texts(conn, bank)


async def test_chunks_travel_in_order_with_their_indexes(engine: Engine, bank: str, tmp_path: Path) -> None:
    await build(engine, bank)
    before = await texts(engine, bank)
    assert before["log"].split("\n")[1] == "A new second entry." and set(before) == {"log", "diary"}
    archive = await export(engine, bank)
    doc = json.loads(entries(archive)["documents/000001.json"])
    assert doc["id"] == "log" and [c["chunk_index"] for c in doc["chunks"]] == list(range(14))
    path = tmp_path / "bank.zip"
    path.write_bytes(archive)
    await engine.transfers.restore(path, record_on=bank, target=f"{bank}-copy")
    assert await texts(engine, f"{bank}-copy") == before
