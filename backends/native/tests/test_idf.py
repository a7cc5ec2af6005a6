"""IDF-weighted ranking of the native backend, live: rare terms lead, counted within the bank only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hindsight_recall.engine import Engine
from hindsight_recall.settings import load_settings
from hindsight_recall.testing.suite import ids, keyword_hits

# "alice" is in every memory and "today" in most, so neither tells memories apart; "pottery" does.
BANK = [
    {"id": "common", "text": "Alice said today was fine."},
    {"id": "rare", "text": "The pottery class was full."},
    *({"id": f"filler-{i}", "text": f"Alice walked today, step {i}."} for i in range(5)),
    *({"id": f"other-{i}", "text": f"Alice read book {i}."} for i in range(3)),
]
# Another bank where the rare word is everywhere: it must not change the first bank's weights.
NOISY = [{"id": f"pot-{i}", "text": f"pottery pottery lesson {i}"} for i in range(30)]
QUERY = "alice today pottery"


def _settings(tmp_path: Path, **native: Any) -> Any:
    return load_settings(database_url=None, embedded_data_dir=tmp_path / "data", text_search_extension="native",
                         reranker_provider="rrf", plugins={"text_search": {"native": native}})


def test_rare_terms_lead_and_document_frequency_stays_in_the_bank(
    tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]
) -> None:
    async def run(settings: Any, load: bool) -> list[str]:
        async with Engine(settings) as engine:
            if load:
                await engine.retain("idf-a", BANK)
                await engine.retain("idf-b", NOISY)
            return ids(await keyword_hits(engine, "idf-a", QUERY))

    weighted = hr_run(run(_settings(tmp_path), load=True))
    # ts_rank alone: two matched terms beat one, whatever the terms
    plain = hr_run(run(_settings(tmp_path, idf=False), load=False))
    assert weighted[0] == "rare"
    assert plain[0] != "rare" and plain.index("rare") > plain.index("common")
    assert set(weighted) == set(plain)  # weighting reorders; it never adds or drops matches
    assert not any(i.startswith("pot-") for i in weighted)


def test_term_statistics_are_read_from_the_table(tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]) -> None:
    """The frequency query reads pg_stats of search_vector, stemmed with the configured language."""
    settings = load_settings(database_url=None, embedded_data_dir=tmp_path / "data", text_search_extension="native",
                             reranker_provider="rrf", bm25_max_term_frequency=0.5)

    async def run() -> Any:
        async with Engine(settings) as engine:
            await engine.retain("stats", [{"id": f"m{i}", "text": f"Alice walked to step {i}."} for i in range(40)]
                                + [{"id": "rare", "text": "The pottery class was full."}])
            async with engine.db.connect() as conn:
                from sqlalchemy import text

                await conn.execute(text("ANALYZE memory_units"))
                # "walking" meets "walked" only through the english stemmer; "the" is a stopword
                return await engine.text_search.prepare_query("", ["alice", "walking", "the", "pottery"], conn)

    query = hr_run(run())
    assert query is not None and query.terms == ("pottery",)
