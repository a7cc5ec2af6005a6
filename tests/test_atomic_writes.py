"""Every write is whole or leaves no trace: a failure at its last step rolls all of it back, and a
refused request changes nothing (compared table by table with :mod:`hindsight_recall.testing.snapshot`)."""

from __future__ import annotations

from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.service.items import build_memories
from hindsight_recall.service.schemas import RetainBody
from hindsight_recall.store import banks as bank_store
from hindsight_recall.testing.snapshot import bank_rows, differences, orphans


class Injected(Exception):
    """The failure a test makes happen inside a write."""


async def rows(engine: Engine, *bank_ids: str) -> Any:
    async with engine.db.connect() as conn:
        return await bank_rows(conn, bank_ids)


async def whole(engine: Engine, *bank_ids: str) -> None:
    async with engine.db.connect() as conn:
        assert await orphans(conn, bank_ids) == []


def document(bank: str, texts: list[str], document_id: str = "rep") -> tuple[list[Any], list[str]]:
    body = RetainBody(items=[{"content": t, "document_id": document_id} for t in texts])
    return build_memories(bank, body, {})


def failing(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
    """Make ``module.name`` raise :class:`Injected` when called."""

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise Injected(name)

    monkeypatch.setattr(module, name, boom)


async def test_a_replace_that_fails_at_its_last_step_leaves_the_document_all_old(
    engine: Engine, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = [f"Old line {i} about the lighthouse." for i in range(30)]
    memories, replaced = document(bank, old)
    await engine.retain(bank, memories, replace_documents=replaced)
    before = await rows(engine, bank)
    failing(monkeypatch, bank_store, "forget")  # the stale memories go last, in the same transaction
    memories, replaced = document(bank, ["One new line about the lighthouse."])
    with pytest.raises(Injected):
        await engine.retain(bank, memories, replace_documents=replaced)
    assert differences(before, await rows(engine, bank)) == []
    monkeypatch.undo()
    await engine.retain(bank, memories, replace_documents=replaced)
    listed, total = await engine.list_memories(bank)
    assert total == 1 and listed[0]["text"] == "One new line about the lighthouse."
    await whole(engine, bank)


async def test_a_replaced_document_reads_in_its_new_order(engine: Engine, bank: str) -> None:
    from hindsight_recall.store import documents

    memories, replaced = document(bank, ["A first.", "B second.", "C third."])
    await engine.retain(bank, memories, replace_documents=replaced)
    memories, replaced = document(bank, ["A first.", "X new.", "C third."])
    await engine.retain(bank, memories, replace_documents=replaced)
    async with engine.db.connect() as conn:
        found = await documents.get_document(conn, bank, "rep")
    assert found is not None and found["original_text"] == "A first.\nX new.\nC third."
    await whole(engine, bank)

