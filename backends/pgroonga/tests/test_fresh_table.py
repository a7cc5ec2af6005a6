"""Ranking where the planner scans memory_units sequentially (as on a small or never-analysed table).

Server: HINDSIGHT_TEST_DATABASE_URL_PGROONGA; skips without it. Each test builds the engine's tables
in a new schema of that database and drops the schema afterwards.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hindsight_recall.engine import Engine
from hindsight_recall.settings import load_settings
from hindsight_recall.testing.suite import RANKING, ids, keyword_hits
from hindsight_recall_pgroonga import DOCUMENT
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

URL = os.environ.get("HINDSIGHT_TEST_DATABASE_URL_PGROONGA", "").strip()

pytestmark = pytest.mark.skipif(
    not URL, reason="set HINDSIGHT_TEST_DATABASE_URL_PGROONGA to a PGroonga server"
)


@pytest.fixture
def fresh_schema() -> Iterator[str]:
    """A new, empty schema; dropped with everything in it after the test."""
    schema = f"hr_fresh_{uuid.uuid4().hex[:12]}"
    admin = create_engine(make_url(URL).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield schema
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


async def rank_on_fresh_table(schema: str) -> tuple[list[Any], str]:
    settings = load_settings(database_url=URL, database_schema=schema, text_search_extension="pgroonga",
                             reranker_provider="rrf")
    engine = Engine(settings)
    # every connection of the engine plans sequential scans, whatever the statistics say
    engine.db.session_statements += ["SET enable_indexscan = off", "SET enable_bitmapscan = off"]
    async with engine:
        await engine.retain("fresh", RANKING)
        async with engine.db.connect() as conn:
            plan = "\n".join((await conn.execute(text(
                f"EXPLAIN SELECT id FROM memory_units WHERE ({DOCUMENT}) &@~ 'solar OR panel'"
            ))).scalars())
        return await keyword_hits(engine, "fresh", "solar panel installation"), plan


def test_scores_do_not_depend_on_the_plan(fresh_schema: str) -> None:
    hits, plan = asyncio.run(rank_on_fresh_table(fresh_schema))
    # The situation under test: the planner scans this table sequentially.
    assert "Seq Scan" in plan, plan
    assert ids(hits) == ["strong", "weak"], hits
    assert hits[0].score > hits[1].score > 0, hits
