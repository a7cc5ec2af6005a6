"""pgvector's type is set up once per connection, and retains make no new classes (they are never freed)."""

from __future__ import annotations

import gc

import numpy as np
import psycopg
import pytest
from hindsight_recall import Engine
from hindsight_recall.errors import DatabaseError
from hindsight_recall.store.driver import driver_connection
from hindsight_recall.store.vector_types import MAX_OIDS, dumpers, register_vector
from pgvector.psycopg.vector import VectorDumper
from psycopg.adapt import PyFormat
from psycopg.types import TypeInfo
from sqlalchemy.engine import make_url


def _live_subclasses(cls: type) -> int:
    gc.collect()
    found, todo = 0, list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        found += 1
        todo.extend(sub.__subclasses__())
    return found


async def test_retains_make_no_new_dumper_classes(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": "first", "text": "Mira keeps bees on the roof."}])
    before = _live_subclasses(VectorDumper)
    for i in range(12):  # an existing bank: the links read its vectors back, on the same pool
        await engine.retain(bank, [{"id": f"m{i}-{j}", "text": f"Note {i}.{j} about the garden shed."}
                                   for j in range(1 + i % 3)])
    assert _live_subclasses(VectorDumper) == before
    assert len(await engine.list_banks()) >= 1 and (await engine.bank_stats(bank) or {})["memories"] == 1 + 24


async def test_a_connection_is_set_up_once_and_round_trips_vectors(engine: Engine) -> None:
    async with engine.db.connect() as conn:
        raw = await driver_connection(conn)
        await register_vector(raw)
        dumper = raw.adapters.get_dumper(np.ndarray, PyFormat.BINARY)
        await register_vector(raw)
        assert raw.adapters.get_dumper(np.ndarray, PyFormat.BINARY) is dumper
        assert dumper in dumpers(dumper.oid)
        cursor = raw.cursor(binary=True)
        await cursor.execute("SELECT %b", (np.array([1.5, -2.0, 0.25], dtype=np.float32),))
        row = await cursor.fetchone()
        assert row is not None and np.allclose(row[0].to_numpy(), [1.5, -2.0, 0.25])
        await conn.rollback()


def test_dumper_classes_are_bounded_by_oid() -> None:
    first = dumpers(910_001)
    assert dumpers(910_001) == first and first[0].oid == first[1].oid == 910_001
    for oid in range(920_000, 920_000 + MAX_OIDS + 5):
        dumpers(oid)
    assert dumpers.cache_info().currsize == MAX_OIDS


async def test_a_database_without_pgvector_is_a_clear_error(engine: Engine) -> None:
    # the maintenance database of the server: the extension is installed in the engine's own only
    target = make_url(engine.db.url).set(drivername="postgresql", database="postgres")
    async with await psycopg.AsyncConnection.connect(target.render_as_string(hide_password=False)) as raw:
        if await TypeInfo.fetch(raw, "vector") is not None:
            pytest.skip("the server's maintenance database has pgvector too")
        with pytest.raises(DatabaseError, match="pgvector extension"):
            await register_vector(raw)
