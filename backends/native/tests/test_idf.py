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


WALKS = [{"id": f"m{i}", "text": f"Alice walked to step {i}."} for i in range(40)]
WALKS_AND_POTTERY = [*WALKS, {"id": "rare", "text": "Alice took the pottery class."}]


def test_terms_are_chosen_by_the_banks_own_counts(tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]) -> None:
    """Terms in more than BM25_MAX_TERM_FREQUENCY of the bank's memories are dropped, counted in this
    bank (another bank full of "pottery" changes nothing), stemmed with the configured language."""
    settings = load_settings(database_url=None, embedded_data_dir=tmp_path / "data", text_search_extension="native",
                             reranker_provider="rrf", bm25_max_term_frequency=0.5)

    async def run() -> tuple[list[str], list[str], list[str]]:
        async with Engine(settings) as engine:
            await engine.retain("stats", WALKS_AND_POTTERY)
            await engine.retain("noisy", NOISY)
            # "walking" meets "walked" only through the english stemmer; "the" is a stopword
            chosen = ids(await keyword_hits(engine, "stats", "alice walking the pottery"))
            common = ids(await keyword_hits(engine, "stats", "alice walking"))
            noisy = ids(await keyword_hits(engine, "noisy", "pottery lesson 3"))
            return chosen, common, noisy

    chosen, common, noisy = hr_run(run())
    assert chosen == ["rare"]  # alice (41 of 41) and walk (40 of 41) are dropped
    assert len(common) == 41  # only common terms: they are kept
    assert noisy[0] == "pot-3"  # "pottery" is in all 30 and dropped there, never here


def test_the_cap_keeps_the_rarest_terms(tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]) -> None:
    settings = load_settings(database_url=None, embedded_data_dir=tmp_path / "data", text_search_extension="native",
                             reranker_provider="rrf", bm25_max_query_terms=1)
    plain = settings.model_copy(update={"bm25_selective_terms": False})

    async def run() -> tuple[list[str], list[str]]:
        async with Engine(settings) as engine:
            await engine.retain("cap", WALKS_AND_POTTERY)
            rarest = ids(await keyword_hits(engine, "cap", "alice pottery"))
        async with Engine(plain) as engine:
            first = ids(await keyword_hits(engine, "cap", "alice pottery"))
        return rarest, first

    rarest, first = hr_run(run())
    assert rarest == ["rare"]
    assert len(first) == 41  # not selective: the first term, "alice", is in every memory


def test_at_most_max_rows_matches_are_scored_and_the_rare_terms_ones_always(
    tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]
) -> None:
    async def run(max_rows: int) -> tuple[list[str], list[str]]:
        async with Engine(_settings(tmp_path, max_rows=max_rows)) as engine:
            if max_rows == 5:
                await engine.retain("rows", WALKS_AND_POTTERY)
            both = ids(await keyword_hits(engine, "rows", "alice pottery"))
            common = ids(await keyword_hits(engine, "rows", "alice"))
            return both, common

    both, common = hr_run(run(5))
    assert len(both) == 5 and both[0] == "rare"  # pottery's memory is scored first, then 4 of the rest
    assert len(common) == 5
    both, common = hr_run(run(0))  # 0: no cap
    assert len(both) == 41 and both[0] == "rare" and len(common) == 41


def test_bad_queries_are_safe(tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]) -> None:
    async def run() -> list[list[str]]:
        async with Engine(_settings(tmp_path)) as engine:
            await engine.retain("bad", WALKS_AND_POTTERY)
            queries = ["&|!():*<>'\\ pottery", "pot\x00tery alice", "' OR 1=1 --", "the of and",
                       " ".join(f"w{i}" for i in range(400)) + " pottery", "陶芸 pottery"]
            return [ids(await keyword_hits(engine, "bad", q)) for q in queries]

    syntax, nul, injection, stopwords, huge, cjk = hr_run(run())
    assert syntax[0] == "rare" and cjk == ["rare"]
    assert huge == []  # the 16 rarest terms kept are words the bank has never seen (as before: unknown = rarest)
    assert injection == ["m1"] and stopwords == []  # "1" is a word (step 1), never SQL
    assert "rare" in nul or nul == []


# The world facts are many, the observations few: a term found once in each weighs the same.
MIXED = [
    {"id": "kiln-world", "text": "The kiln reached its top temperature.", "type": "world"},
    *({"id": f"world-{i}", "text": f"Bob walked to the station, step {i}.", "type": "world"} for i in range(40)),
    {"id": "glaze-obs", "text": "Her glaze recipe: a celadon glaze.", "type": "observation", "sources": ["world-0"]},
    {"id": "note-obs", "text": "Bob walks a lot.", "type": "observation", "sources": ["world-1"]},
]


def test_document_frequency_is_counted_over_the_fact_types_searched_together(
    tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]
) -> None:
    async def run() -> list[Any]:
        async with Engine(_settings(tmp_path)) as engine:
            await engine.retain("idf-mixed", MIXED)
            return await keyword_hits(engine, "idf-mixed", "kiln glaze", types=["world", "observation"])

    hits = {h.id: h.score for h in hr_run(run())}
    # each term is in one memory of the 42 visible: the same weight, so the memory holding its
    # term twice ranks higher, whichever fact type it is (counted per type, the 2 observations
    # gave "glaze" a weight of 0.69 against 3.9 for "kiln" among the world facts)
    assert set(hits) == {"kiln-world", "glaze-obs"}
    assert hits["glaze-obs"] > hits["kiln-world"]


def test_cover_density_ranking_runs_with_and_without_idf(
    tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]
) -> None:
    async def run(idf: bool, load: bool) -> list[str]:
        async with Engine(_settings(tmp_path, rank="ts_rank_cd", idf=idf, max_rows=5)) as engine:
            if load:
                await engine.retain("cd", WALKS_AND_POTTERY)
            return ids(await keyword_hits(engine, "cd", "alice pottery"))

    weighted, plain = hr_run(run(True, True)), hr_run(run(False, False))
    assert weighted[0] == "rare" and len(weighted) == 5
    assert "rare" in plain and len(plain) == 5  # the cap holds without IDF too
