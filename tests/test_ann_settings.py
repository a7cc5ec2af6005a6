"""HNSW settings: one statement once accepted; a setting the server rejects is dropped, not fatal."""

from __future__ import annotations

import logging

import pytest
from hindsight_recall import Engine
from hindsight_recall.recall.arms._ann import AnnSettings, set_local
from sqlalchemy import event, text


async def test_rejected_settings_are_remembered_and_accepted_ones_batched(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    ann = AnnSettings()
    wanted = {"hnsw.ef_search": "77", "hnsw.no_such_setting": "1"}
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    async with engine.db.connect() as conn:
        await conn.execute(text("SELECT '[1]'::vector"))  # loads pgvector, which reserves hnsw.*
        with caplog.at_level(logging.WARNING):
            await ann.apply(conn, wanted)
        assert "hnsw.no_such_setting" in caplog.text and ann.unsupported == {"hnsw.no_such_setting"}
        assert await conn.scalar(text("SELECT current_setting('hnsw.ef_search')")) == "77"  # still usable
    event.listen(engine.db.engine.sync_engine, "before_cursor_execute", record)
    try:
        async with engine.db.connect() as conn:
            await ann.apply(conn, {**wanted, "hnsw.ef_search": "91"})
            assert await conn.scalar(text("SELECT current_setting('hnsw.ef_search')")) == "91"
    finally:
        event.remove(engine.db.engine.sync_engine, "before_cursor_execute", record)
    sent = [s for s in statements if s.startswith("SET LOCAL")]  # one round trip, however many settings
    assert len(sent) == 1 and not any("SAVEPOINT" in s for s in statements)


def test_set_local_inlines_only_plain_names_and_values() -> None:
    assert set_local({"hnsw.ef_search": "40", "hnsw.iterative_scan": "strict_order"}) == (
        "SET LOCAL hnsw.ef_search = '40'; SET LOCAL hnsw.iterative_scan = 'strict_order'")
    for bad in ({"hnsw.ef_search": "1'; DROP TABLE banks; --"}, {"hnsw ef": "1"}, {"hnsw.ef_search": ""}):
        with pytest.raises(ValueError, match="not a plain setting"):
            set_local(bad)
