"""Recall end to end on the embedded PostgreSQL server."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hindsight_recall import Engine, InvalidRequest
from hindsight_recall.errors import BankNotFound
from hindsight_recall.recall.fusion import ARM_ORDER
from hindsight_recall.recall.trace import DIAGNOSTIC_PREFIXES
from hindsight_recall.store import banks
from hindsight_recall.testing.suite import keyword_hits

PHASES = ["backend_acquisition", "similarity_floors", "temporal_extraction", "generate_query_embedding",
          "parallel_retrieval", "rrf_merge", "context", "rerank_prefilter", "reranking", "combined_scoring",
          "prefer_observations_dedup", "token_filtering", "source_fact_fetch", "chunk_fetch", "entity_build"]


def ids(body: dict) -> list[str]:
    return [r["id"] for r in body["results"]]


async def test_finds_the_employment_fact(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Where does Alice work?")
    assert "job" in ids(body)[:2]
    top = body["results"][ids(body).index("job")]
    assert top["scores"]["semantic"] > 0.3 and top["scores"]["keyword"] is not None
    assert top["type"] == "world" and top["tags"] == ["work"]
    assert top["occurred_start"].startswith("2023-08-01")
    assert set(top["entities"]) == {"Alice", "Helios Robotics"}
    assert body["entities"]["Alice"]["canonical_name"] == "Alice"


async def test_observation_lists_its_sources_by_caller_id(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Alice changed jobs", types=["observation"])
    assert ids(body) == ["summary"]
    assert body["results"][0]["source_fact_ids"] == ["job", "left"]
    assert set(body["results"][0]["entities"]) >= {"Alice", "Helios Robotics", "Northwind Labs"}


async def test_trace_names_every_phase_and_accounts_for_the_whole_recall(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Alice marathon", trace=True, include_chunks=100)
    trace = body["trace"]
    names = [p["phase_name"] for p in trace["summary"]["phase_metrics"]]
    assert [n for n in names if not n.startswith(DIAGNOSTIC_PREFIXES)] == PHASES
    assert {"retrieval_semantic", "retrieval_keyword", "semaphore_wait", "connection_wait"} <= set(names)
    retrieval = next(p for p in trace["summary"]["phase_metrics"] if p["phase_name"] == "parallel_retrieval")
    assert retrieval["details"]["semantic"] > 0 and retrieval["details"]["keyword"] > 0
    prefilter = next(p for p in trace["summary"]["phase_metrics"] if p["phase_name"] == "rerank_prefilter")
    assert prefilter["details"]["dropped"] == 0 and prefilter["details"]["max_candidates"] == 300
    assert trace["query"]["budget"] == 300 and trace["query"]["temporal_constraint"] is None
    assert trace["rrf_merged"][0]["final_rrf_rank"] == 1
    assert trace["reranked"][0]["score_components"]["combined_score"] == body["results"][0]["scores"]["final"]
    additive = sum(p["duration_seconds"] for p in trace["summary"]["phase_metrics"]
                   if not p["phase_name"].startswith(DIAGNOSTIC_PREFIXES))
    total = trace["summary"]["total_duration_seconds"]
    assert 0.9 * total <= additive <= total + 1e-3  # the phases account for the whole recall
    assert set(ARM_ORDER) >= {m["method_name"] for m in trace["retrieval_results"]}


async def test_types_filter_in_sql(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Bob pasta dinner", types=["experience"])
    assert ids(body) == ["pasta"]
    assert (await engine.recall(alice, "Bob pasta", types=["opinion"]))["results"] == []


@pytest.mark.parametrize(
    ("tags", "match", "expected"),
    [
        (["work"], "any", {"job", "old-job", "reorg", "left", "summary", "untagged", "pasta"}),
        (["work"], "any_strict", {"job", "old-job", "reorg"}),
        (["work", "personal"], "all", {"left", "summary", "untagged", "pasta"}),
        (["work", "personal"], "all_strict", set()),
        (["personal"], "exact", {"marathon"}),
        ([], "exact", {"left", "summary", "untagged", "pasta"}),
        (None, "any", {"job", "old-job", "marathon", "pasta", "reorg", "left", "summary", "untagged"}),
    ],
)
async def test_tag_modes(engine: Engine, alice: str, tags: list[str] | None, match: str, expected: set[str]) -> None:
    body = await engine.recall(alice, "Alice Bob work marathon tea pasta jobs", tags=tags, tags_match=match,
                               min_scores={"semantic": 0.0}, budget="high")
    assert set(ids(body)) == expected


async def test_tag_filter_applies_before_limit(engine: Engine, bank: str) -> None:
    noise = [{"id": f"n{i}", "text": f"Alice note number {i} about the weather", "tags": ["noise"]} for i in range(30)]
    await engine.retain(bank, [*noise, {"id": "target", "text": "Alice note about the garden", "tags": ["garden"]}])
    from hindsight_recall.store import banks

    async with engine.db.connect() as conn:  # B = 5: thirty better-matching rows must not eat the limit
        await banks.set_bank_config(conn, bank, {"recall_budget_fixed_low": 5})
    body = await engine.recall(bank, "Alice note", tags=["garden"], tags_match="any_strict", budget="low")
    assert ids(body) == ["target"]


async def test_banks_are_isolated(engine: Engine, bank: str) -> None:
    other = bank + "-other"
    await engine.retain(bank, [{"id": "a", "text": "The secret code word is pineapple."}])
    await engine.retain(other, [{"id": "a", "text": "The secret code word is mango."}])
    assert [r["text"] for r in (await engine.recall(bank, "secret code word"))["results"]] == [
        "The secret code word is pineapple."
    ]
    assert [r["text"] for r in (await engine.recall(other, "secret code word"))["results"]] == [
        "The secret code word is mango."
    ]


async def test_unknown_bank_is_an_error(engine: Engine) -> None:
    with pytest.raises(BankNotFound, match="does not exist"):
        await engine.recall("no-such-bank-anywhere", "anything", trace=True)


@pytest.mark.parametrize(("query", "words"), [
    ("& | ! ( ) : * < > ' \\", None), ("Alice's job & <work>!", "Alice s job work"), ("a:b*c|d", "a b c d"),
    ("Alice\x00work", "Alice work"), ("'; DROP TABLE memory_units; --", "DROP TABLE memory_units"),
    ("Alice \ud800 work", "Alice work"), ("🙂 Alice", "Alice"),
])
async def test_hostile_queries_are_read_as_their_words(
    engine: Engine, alice: str, query: str, words: str | None
) -> None:
    """Query syntax and SQL in a query are data: the keyword arm sees only the words, and nothing is dropped."""
    before = ids(await engine.recall(alice, "Where does Alice work?"))
    if words is None:  # nothing but syntax: a clear error, not a search for nothing
        with pytest.raises(InvalidRequest) as error:
            await engine.recall(alice, query)
        assert error.value.field == "query"
        return
    hits = await keyword_hits(engine, alice, query)
    assert [h.id for h in hits] == [h.id for h in await keyword_hits(engine, alice, words)]
    assert hits or "Alice" not in words  # the words found what they find on their own
    assert ids(await engine.recall(alice, "Where does Alice work?")) == before  # the table survived


@pytest.mark.parametrize(
    ("options", "field", "status"),
    [
        ({"budget": "huge"}, "budget", 422),
        ({"tags_match": "some"}, "tags_match", 422),
        ({"types": ["fact"]}, "types", 422),
        ({"max_tokens": -1}, "max_tokens", 422),
        ({"query_timestamp": "yesterday-ish"}, "query_timestamp", 400),
        ({"min_scores": {"vibes": 1}}, "min_scores.vibes", 422),
        ({"temporal_window": ("2024-02-01", "2024-01-01")}, "temporal_window", 422),
        ({"reranking": "magic"}, "reranking", 422),
    ],
)
async def test_bad_options_name_the_field(engine: Engine, alice: str, options: dict, field: str, status: int) -> None:
    with pytest.raises(InvalidRequest) as err:
        await engine.recall(alice, "Alice", **options)
    assert err.value.field == field and err.value.status == status and field.split(".")[0] in str(err.value)


@pytest.mark.parametrize("query", ["", "   ", "?!?", "\x00"])
async def test_empty_queries_are_rejected(engine: Engine, alice: str, query: str) -> None:
    with pytest.raises(InvalidRequest, match="query"):
        await engine.recall(alice, query)


async def test_bad_bank_ids(engine: Engine) -> None:
    for bad in ["", "a\x00b", "x" * 300]:
        with pytest.raises(InvalidRequest, match="bank_id"):
            await engine.recall(bad, "Alice")


async def test_max_tokens_budget(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Alice", max_tokens=12)
    assert len(body["results"]) >= 1 and body["results_truncated"] is True


async def test_huge_query_is_cut_with_a_warning(engine: Engine, alice: str, caplog: pytest.LogCaptureFixture) -> None:
    query = "Where does Alice work? " + "filler " * 5000
    with caplog.at_level(logging.WARNING):
        body = await engine.recall(alice, query, trace=True)
    assert "only the first 500" in caplog.text
    assert len(body["trace"]["query"]["query_text"]) < len(query)


async def test_min_scores(engine: Engine, alice: str) -> None:
    assert (await engine.recall(alice, "Alice marathon", min_scores={"final": 2.0}))["results"] == []
    strict = await engine.recall(alice, "Alice marathon", min_scores={"semantic": 0.99, "keyword": 1e9})
    assert strict["results"] == []


async def test_query_timestamp_anchors_recency(engine: Engine, alice: str) -> None:
    body = await engine.recall(alice, "Alice", query_timestamp="2023-08-02T00:00:00Z", trace=True)
    job = next(r for r in body["trace"]["reranked"] if r["node_id"] == "job")
    assert job["score_components"]["recency"] == pytest.approx(1 - 1 / 365, abs=1e-3)
    assert body["trace"]["query"]["timestamp"].startswith("2023-08-02")


async def test_chunks_are_budgeted_and_cut(engine: Engine, bank: str) -> None:
    chunk = "Alice: I started at Helios. " * 40
    await engine.retain(
        bank,
        [
            {"id": "a", "text": "Alice works at Helios.", "chunk": chunk, "document_id": "chat-1"},
            {"id": "b", "text": "Alice likes Helios.", "chunk": "short chunk", "document_id": "chat-1"},
        ],
    )
    body = await engine.recall(bank, "Alice Helios", include_chunks=50)
    chunks = list(body["chunks"].values())
    assert chunks and all(c["id"].startswith(f"{bank}_chat-1_") for c in chunks)
    assert any(c["truncated"] for c in chunks) or sum(len(c["text"]) for c in chunks) < len(chunk)


async def test_bank_config_overrides_budget(engine: Engine, alice: str) -> None:
    from hindsight_recall.store import banks

    async with engine.db.connect() as conn:
        stored = await banks.set_bank_config(conn, alice, {"recall_budget_fixed_mid": 2})
    assert stored == {"recall_budget_fixed_mid": 2}
    body = await engine.recall(alice, "Alice", trace=True)
    assert body["trace"]["query"]["budget"] == 2 and len(body["results"]) <= 4
    async with engine.db.connect() as conn:
        with pytest.raises(InvalidRequest):
            await banks.set_bank_config(conn, alice, {"database_url": "x"})


async def test_reranking_off_is_passthrough(engine: Engine, alice: str, make_settings) -> None:
    body = await engine.recall(alice, "Alice", reranking="rrf", trace=True)
    phase = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")
    assert phase["details"]["reranker_type"] == "rrf" and body["results"][0]["scores"]["reranker"] is None


async def test_keyword_one_pass_equals_one_statement_per_fact_type(
    engine: Engine, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds = ("world", "experience", "observation")
    await engine.retain(bank, [
        {"id": f"m{i}", "type": kinds[i % 3], "text": f"Alice {'hiked ' * (1 + i % 4)}near the lake {i}.",
         "tags": ["trip"] if i % 2 else []}
        for i in range(40)
    ])
    async with engine.db.connect() as conn:  # five per type: the cut falls among tied scores
        await banks.set_bank_config(conn, bank, {"recall_budget_fixed_low": 5})
    # with IDF the one pass counts its statistics over every fact type searched, as it ranks them
    # in one list (backends/native/tests/test_idf.py); statements per type can only count their own
    if getattr(engine.text_search, "config", None) is not None and hasattr(engine.text_search.config, "idf"):
        monkeypatch.setattr(engine.text_search.config, "idf", False)

    async def keyword_lists(**request: Any) -> dict[str, list[tuple[str, float]]]:
        body = await engine.recall(bank, "Alice hiked lake", trace=True, budget="low", **request)
        return {r["fact_type"]: [(x["node_id"], x["score"]) for x in r["results"]]
                for r in body["trace"]["retrieval_results"] if r["method_name"] == "keyword"}

    # a floor between the scores, whatever their scale
    scores = sorted({score for hits in (await keyword_lists()).values() for _, score in hits})
    floor = scores[len(scores) // 2]
    for request in ({}, {"tags": ["trip"], "tags_match": "any_strict"}, {"min_scores": {"keyword": floor}}):
        one_pass = await keyword_lists(**request)
        with monkeypatch.context() as patch:
            patch.setattr(engine.text_search, "ranks_every_match", False)
            per_type = await keyword_lists(**request)
        assert one_pass == per_type and one_pass, request
        assert all(len(hits) <= 5 for hits in one_pass.values())


async def test_entities_come_with_the_rows_in_one_statement(engine: Engine, bank: str) -> None:
    from sqlalchemy import event

    await engine.retain(bank, [
        {"id": "trip", "text": "Zoe and alice hiked the Larkspur ridge in June.", "entities": ["alice", "Zoe"]},
        {"id": "gear", "text": "Zoe bought new hiking boots.", "entities": ["Zoe", "Boots & Co"]},
        {"id": "obs", "type": "observation", "text": "Zoe loves mountain hikes.", "sources": ["trip", "gear"]},
    ])
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    import hindsight_recall.recall.complete as complete

    read = complete.fetch

    async def fetch(conn: Any, sql: str, params: Any) -> Any:  # rows read through psycopg directly
        statements.append(sql)
        return await read(conn, sql, params)

    event.listen(engine.db.engine.sync_engine, "before_cursor_execute", seen)
    complete.fetch = fetch  # type: ignore[assignment]
    try:
        body = await engine.recall(bank, "Who hikes in the mountains?", types=["world", "observation"])
    finally:
        complete.fetch = read  # type: ignore[assignment]
        event.remove(engine.db.engine.sync_engine, "before_cursor_execute", seen)
    by_id = {r["id"]: r for r in body["results"]}
    # an observation carries its sources' entities; names sort by code point on every server
    assert by_id["obs"]["entities"] == ["Boots & Co", "Zoe", "alice"]
    assert by_id["trip"]["entities"] == ["Zoe", "alice"]
    assert set(body["entities"]) == {"Boots & Co", "Zoe", "alice"}
    assert body["entities"]["Zoe"]["canonical_name"] == "Zoe"
    assert sum("canonical_name" in s for s in statements) == 1
