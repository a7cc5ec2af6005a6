"""Schema upgrades of a populated database: online, resumable, and refused when the schema is newer."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hindsight_recall import ConfigError, Engine
from hindsight_recall.bench import upgrade as upgrade_bench
from hindsight_recall.settings import Settings
from hindsight_recall.store import length_stats, schema, term_stats
from hindsight_recall.store.db import Database
from sqlalchemy import text

ROWS = 12_000  # one bank over ANN_MIN_ROWS: every row is flagged and goes into the HNSW indexes


@contextlib.asynccontextmanager
async def _schema_7_store(settings: Settings) -> AsyncIterator[str]:
    """A populated store as schema 7 left it (built without the statement timeout); yields its URL.

    Its connection stays open for the block, so the embedded server keeps running between engines.
    """
    db = Database(settings.model_copy(update={"db_statement_timeout": 0}))
    await db.open()
    try:
        await upgrade_bench.build(db, ROWS, ROWS)
        yield db.url
    finally:
        await db.close()


async def _banks(engine: Engine) -> int:
    async with engine.db.connect() as conn:
        return int(await conn.scalar(text("SELECT count(*) FROM banks")) or 0)


def _probe(url: str, schema_name: str, stop: threading.Event, out: dict[str, Any]) -> None:
    """Read a memory every 20 ms; a read that waits for a lock more than 2 s fails and is recorded."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{schema_name}", public')
        conn.execute("SET lock_timeout = '2s'")
        while not stop.is_set():
            try:
                conn.execute("SELECT text FROM memory_units WHERE bank_id = 'bank-0' AND external_id = 'D7:3'")
                out["reads"] = out.get("reads", 0) + 1
            except psycopg.Error as exc:
                out.setdefault("failures", []).append(str(exc).splitlines()[0])
            time.sleep(0.02)


async def test_an_upgrade_from_schema_7_runs_beside_readers_without_the_statement_timeout(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"v7_{uuid.uuid4().hex[:8]}"
    # a statement timeout far below what the upgrade takes: its row rewrites and index builds are not
    # bound by it (before, they failed it, and the upgrade failed on every start)
    settings = make_settings(database_schema=name, db_statement_timeout=0.2)
    monkeypatch.setattr(schema, "BACKFILL_BATCH_ROWS", 1_000)
    stop, seen = threading.Event(), {}
    async with _schema_7_store(settings) as url:
        reader = threading.Thread(target=_probe, args=(url, name, stop, seen))
        reader.start()
        try:
            await asyncio.sleep(0.2)
            async with Engine(settings) as engine:
                async with engine.db.connect() as conn:
                    await conn.execute(text("SET LOCAL statement_timeout = 0"))
                    counts = (await conn.execute(text(
                        "SELECT count(*) FILTER (WHERE ann), count(*) FILTER (WHERE position IS NOT NULL), "
                        "(SELECT count(*) FROM hindsight_migrations WHERE version IN (8, 9)) FROM memory_units"
                    ))).one()
                    indexes = dict((await conn.execute(text(
                        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                        "WHERE c.relnamespace = CAST(:s AS regnamespace) AND c.relname LIKE 'idx_mu_%'"
                    ), {"s": name})).all())
                    work_table = await conn.scalar(text("SELECT to_regclass('hindsight_upgrade_positions')"))
                    # migration 10: every bank's term statistics, from the stored search vectors
                    drift = await term_stats.drift(conn)
                    kept = await conn.scalar(text("SELECT count(DISTINCT bank_id) FROM term_stats WHERE df > 0"))
                    # migration 21: every bank's length statistics, from the same vectors
                    length_drift = await length_stats.drift(conn)
                    measured = await conn.scalar(text("SELECT count(DISTINCT bank_id) FROM length_stats "
                                                      "WHERE memories > 0 AND length_sum > 0"))
                    place = await conn.scalar(text(
                        "SELECT position FROM memory_units WHERE bank_id = 'bank-0' AND external_id = 'D7:3'"))
                    # migration 22: the webhook outbox, empty
                    outbox = await conn.scalar(text("SELECT count(*) FROM webhook_outbox"))
                assert tuple(counts) == (ROWS, ROWS, 2)
                assert place == 3  # its place in its document, from the number in its id
                wanted = {"idx_mu_bank_type", "idx_mu_document_position", "idx_mu_occurred_range",
                          *(f"idx_mu_ann_{t}" for t in ("world", "experience", "observation"))}
                assert wanted <= set(indexes) and all(indexes.values())
                assert work_table is None
                assert drift == [] and kept == await _banks(engine)
                assert length_drift == [] and measured == kept
                assert outbox == 0
        finally:
            stop.set()
            reader.join()
    # the reader never waited on the upgrade's locks for long
    assert seen.get("reads", 0) > 0 and not seen.get("failures"), seen.get("failures")


async def test_an_interrupted_upgrade_resumes_and_rebuilds_an_invalid_index(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"v7_{uuid.uuid4().hex[:8]}"
    settings = make_settings(database_schema=name)
    async with _schema_7_store(settings):
        await _resume(settings, name, monkeypatch)


async def _resume(settings: Settings, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = schema.Upgrade.build_indexes

    class Stopped(Exception):
        pass

    async def stop_before_the_indexes(self: schema.Upgrade) -> None:
        raise Stopped  # the process stops after the row rewrites

    monkeypatch.setattr(schema.Upgrade, "build_indexes", stop_before_the_indexes)
    with pytest.raises(Stopped):
        async with Engine(settings):
            pass
    monkeypatch.setattr(schema.Upgrade, "build_indexes", real)
    db = Database(settings)
    await db.open()
    try:
        async with db.connect() as conn:
            assert not await conn.scalar(text("SELECT count(*) FROM hindsight_migrations WHERE version IN (8, 9)"))
            # what a concurrent build that was cancelled leaves: an index marked invalid
            await conn.execute(text("CREATE INDEX idx_mu_ann_world ON memory_units (id)"))
            await conn.execute(text(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = CAST(:i AS regclass)"
            ), {"i": f'"{name}".idx_mu_ann_world'})
    finally:
        await db.close()
    async with Engine(settings) as engine:
        async with engine.db.connect() as conn:
            method = await conn.scalar(text(
                "SELECT a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam JOIN pg_index i "
                "ON i.indexrelid = c.oid WHERE c.oid = CAST(:i AS regclass) AND i.indisvalid"
            ), {"i": f'"{name}".idx_mu_ann_world'})
            done = await conn.scalar(text("SELECT count(*) FROM hindsight_migrations WHERE version IN (8, 9)"))
            drift = await term_stats.drift(conn)
            length_drift = await length_stats.drift(conn)
        assert method == "hnsw" and done == 2
        assert drift == []  # the statistics were filled again from the start, never counted twice
        assert length_drift == []
        assert (await engine.recall("bank-0", "memory about topic 7"))["results"]


async def test_a_schema_newer_than_the_code_is_refused(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(database_schema=f"newer_{uuid.uuid4().hex[:8]}")
    async with Engine(settings) as engine, engine.db.connect() as conn:
        await conn.execute(text("INSERT INTO hindsight_migrations (version) VALUES (:v)"),
                           {"v": max(schema.MIGRATIONS) + 1})
    with pytest.raises(ConfigError, match=rf"schema is at version {max(schema.MIGRATIONS) + 1}.*newer "
                                          r"hindsight-recall.*pip install -U hindsight-recall"):
        async with Engine(settings):
            pass
