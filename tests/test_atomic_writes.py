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
    from hindsight_recall.testing.snapshot import document_texts

    memories, replaced = document(bank, ["A first.", "B second.", "C third."])
    await engine.retain(bank, memories, replace_documents=replaced)
    memories, replaced = document(bank, ["A first.", "X new.", "C third."])
    await engine.retain(bank, memories, replace_documents=replaced)
    async with engine.db.connect() as conn:
        assert await document_texts(conn, bank) == {"rep": "A first.\nX new.\nC third."}
    await whole(engine, bank)



def replace(**changes: Any) -> Any:
    import dataclasses

    return lambda memory: dataclasses.replace(memory, **changes)


@pytest.mark.parametrize("step", ["drop_links_into", "take", "keep", "forget"])
async def test_an_edit_invalidation_or_restore_that_fails_at_its_last_step_changes_nothing(
    engine: Engine, alice: str, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    from hindsight_recall.store import invalidated, memory_edit

    if step == "take":  # a restore: the memory starts out invalidated
        assert await engine.update_memory(alice, "job", replace(), state="invalidated", reason="moved") == "invalidated"
    before = await rows(engine, alice)
    module = {"drop_links_into": memory_edit, "take": invalidated, "keep": invalidated, "forget": bank_store}[step]
    failing(monkeypatch, module, step)
    state = {"drop_links_into": None, "take": "valid", "keep": "invalidated", "forget": "invalidated"}[step]
    with pytest.raises(Injected):
        await engine.update_memory(alice, "job", replace(text="Alice now works at Orbital Dynamics in Bremen."),
                                   state=state, reason="stale")
    assert differences(before, await rows(engine, alice)) == []
    monkeypatch.undo()
    await whole(engine, alice)


async def test_an_invalidation_and_a_restore_each_move_the_memory_whole(engine: Engine, alice: str) -> None:
    assert await engine.update_memory(alice, "job", replace(), state="invalidated", reason="moved") == "invalidated"
    assert await engine.get_memory(alice, "job") is None
    await whole(engine, alice)
    edited = replace(text="Alice works at Helios Robotics in Munich, as a staff engineer.")
    assert await engine.update_memory(alice, "job", edited, state="valid") == "valid"
    found = await engine.get_memory(alice, "job")
    assert found is not None and found["text"].endswith("staff engineer.")
    await whole(engine, alice)


async def test_editing_what_is_not_there_or_an_observation_changes_nothing(engine: Engine, alice: str) -> None:
    from hindsight_recall.errors import InvalidRequest, MemoryNotFound

    before = await rows(engine, alice)
    with pytest.raises(MemoryNotFound):
        await engine.update_memory(alice, "nobody", replace(text="x"))
    with pytest.raises(InvalidRequest, match="observations"):
        await engine.update_memory(alice, "summary", replace(text="x"))
    with pytest.raises(MemoryNotFound):
        await engine.update_memory("no-such-bank-here", "job", replace(text="x"))
    assert differences(before, await rows(engine, alice)) == []


@pytest.mark.parametrize("call", ["clear_memories", "delete_document", "forget", "delete_bank"])
async def test_forgetting_that_fails_midway_changes_nothing(
    engine: Engine, bank: str, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    from hindsight_recall.store import term_stats

    memories, replaced = document(bank, [f"Line {i} of the log." for i in range(20)], "log")
    await engine.retain(bank, memories, replace_documents=replaced)
    before = await rows(engine, bank)
    # the last statements of a forget and of a bank deletion
    failing(monkeypatch, term_stats, "delete_bank" if call == "delete_bank" else "count_out")
    with pytest.raises(Injected):
        if call == "clear_memories":
            await engine.clear_memories(bank)
        elif call == "delete_document":
            await engine.delete_document(bank, "log")
        elif call == "forget":
            await engine.forget(bank, [m.id for m in memories[:5]])
        else:
            await engine.delete_bank(bank)
    assert differences(before, await rows(engine, bank)) == []


async def test_an_append_numbered_after_a_stale_end_writes_nothing(engine: Engine, bank: str) -> None:
    from hindsight_recall.errors import DocumentChanged

    memories, replaced = document(bank, ["One.", "Two."], "log")
    await engine.retain(bank, memories, replace_documents=replaced)
    before = await rows(engine, bank)
    later, _ = document(bank, ["Three."], "other")
    with pytest.raises(DocumentChanged, match="'log' held 2 memories, not the 1"):
        await engine.retain(bank, later, document_sizes={"log": 1})
    assert differences(before, await rows(engine, bank)) == []
    await engine.retain(bank, later, document_sizes={"log": 2})
