"""Ranking where the planner scans memory_units sequentially (as on a small or never-analysed table).

Server: HINDSIGHT_TEST_DATABASE_URL_PGROONGA, else one the test kit builds (HINDSIGHT_TEST_EXTENSION_SERVERS);
skips without either. The test builds the engine's tables in a new schema, dropped afterwards.
"""

from __future__ import annotations

from typing import Any

from hindsight_recall.engine import Engine
from hindsight_recall.settings import load_settings
from hindsight_recall.testing.suite import RANKING, Run, ids, keyword_hits
from hindsight_recall_pgroonga import DOCUMENT
from sqlalchemy import text


async def rank_on_fresh_table(url: str, schema: str) -> tuple[list[Any], str]:
    settings = load_settings(database_url=url, database_schema=schema, text_search_extension="pgroonga",
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


class TestFreshTable:
    backend_name = "pgroonga"

    def test_scores_do_not_depend_on_the_plan(self, hr_database_url: str, hr_fresh_schema: str, hr_run: Run) -> None:
        hits, plan = hr_run(rank_on_fresh_table(hr_database_url, hr_fresh_schema))
        # The situation under test: the planner scans this table sequentially.
        assert "Seq Scan" in plan, plan
        assert ids(hits) == ["strong", "weak"], hits
        assert hits[0].score > hits[1].score > 0, hits
