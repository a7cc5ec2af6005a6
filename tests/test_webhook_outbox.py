"""The webhook outbox: an event is written in the transaction of its retain, and queued for delivery once,
however many workers take events out at the same time."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from hindsight_recall import Engine
from hindsight_recall.engine.operations import chained
from hindsight_recall.engine.webhooks import RETAIN_COMPLETED, Retained
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

HOOK = {"url": "https://hooks.example/in", "secret": None, "event_types": [RETAIN_COMPLETED], "enabled": True,
        "http_config": {}}


async def _count(engine: Engine, sql: str, bank: str) -> int:
    async with engine.db.connect() as conn:
        return int(await conn.scalar(text(sql), {"b": bank}) or 0)


async def _outbox(engine: Engine, bank: str) -> int:
    return await _count(engine, "SELECT count(*) FROM webhook_outbox WHERE bank_id = :b", bank)


async def _deliveries(engine: Engine, bank: str) -> list[dict[str, Any]]:
    async with engine.db.connect() as conn:
        rows = await conn.execute(text(
            "SELECT operation_id, payload FROM operations WHERE bank_id = :b AND operation_type = 'webhook_delivery' "
            "ORDER BY created_at"), {"b": bank})
        return [{"id": r[0], **json.loads(r[1])} for r in rows]


class Boom(Exception):
    pass


async def _fail(conn: AsyncConnection) -> None:
    raise Boom()


async def test_an_event_commits_with_its_retain_or_not_at_all(engine: Engine, bank: str) -> None:
    await engine.webhooks.create(bank, HOOK)
    memory = [{"id": "a", "text": "Alice runs.", "document_id": "d"}]
    events = Retained(bank, [("d", ["x"])])
    with pytest.raises(Boom):  # the retain's transaction fails after the event was written in it
        await engine.retain(bank, memory, within=chained(events, _fail))
    assert events.recorded == 1
    assert await _count(engine, "SELECT count(*) FROM memory_units WHERE bank_id = :b", bank) == 0
    assert await _outbox(engine, bank) == 0
    events = Retained(bank, [("d", ["x"])], "op-1")
    await engine.retain(bank, memory, within=events)
    assert events.recorded == 1 and await _outbox(engine, bank) == 1
    async with engine.db.connect() as conn:
        body = json.loads(await conn.scalar(text("SELECT body FROM webhook_outbox WHERE bank_id = :b"), {"b": bank}))
    assert body["event_id"] == str(events.event_ids[0]) and body["operation_id"] == "op-1"
    assert body["data"] == {"document_id": "d", "tags": ["x"], "memory_unit_count": 1}


async def test_nothing_is_written_for_a_bank_without_a_webhook_that_takes_the_event(engine: Engine, bank: str) -> None:
    await engine.webhooks.create(bank, {**HOOK, "event_types": ["consolidation.completed"]})
    await engine.webhooks.create(bank, {**HOOK, "enabled": False})
    events = Retained(bank, [(None, [])])
    await engine.retain(bank, [{"id": "a", "text": "Alice runs."}], within=events)
    assert events.recorded == 0 and await _outbox(engine, bank) == 0


async def test_each_event_is_queued_once_per_webhook_by_concurrent_dispatchers(engine: Engine, bank: str) -> None:
    hooks = [await engine.webhooks.create(bank, HOOK) for _ in range(2)]
    events = Retained(bank, [(None, []) for _ in range(30)])
    await engine.retain(bank, [{"id": f"m{i}", "text": f"Fact {i}."} for i in range(30)], within=events)
    await asyncio.gather(*(engine.webhooks.dispatch(limit=7) for _ in range(6)))
    while await engine.webhooks.dispatch(limit=7):
        pass
    queued = await _deliveries(engine, bank)
    assert await _outbox(engine, bank) == 0
    assert sorted((d["event_id"], d["webhook_id"]) for d in queued) == sorted(
        (str(e), h["id"]) for e in events.event_ids for h in hooks)
    assert [d["event_id"] for d in queued[::2]] == [str(e) for e in events.event_ids]  # in the order of the events
    # the same event written again (a retain retried after a commit it did not hear of) is not queued again
    async with engine.db.connect() as conn:
        await Retained(bank, [(None, [])], event_ids=events.event_ids[:1])(conn)
    assert await engine.webhooks.dispatch() == 1
    assert len(await _deliveries(engine, bank)) == 60


async def test_a_queued_retain_names_the_same_event_ids_in_every_run() -> None:
    from hindsight_recall.service.async_retain import event_id

    op = uuid.uuid4()
    assert event_id(op, 3) == event_id(op, 3) != event_id(op, 4)
    assert event_id(op, 3) != event_id(uuid.uuid4(), 3)
