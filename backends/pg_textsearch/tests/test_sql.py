"""Golden SQL and query-text tests for the pg_textsearch (Timescale BM25) backend; no database needed."""

from __future__ import annotations

from importlib import metadata
from typing import Any, cast

import hindsight_recall_pg_textsearch as pg_textsearch
import pytest
from hindsight_recall.protocols import TextSearchBackend
from hindsight_recall.settings import Settings
from hindsight_recall.testing.sqlcheck import parse_statement
from hindsight_recall_pg_textsearch import PgTextsearchBackend
from sqlalchemy.ext.asyncio import AsyncConnection

#: This backend never reads statistics, so prepare_query gets no connection.
NO_CONNECTION = cast(AsyncConnection, None)
COLUMNS = "id, text, fact_type"
WHERE = (
    "bank_id = :bank_id AND fact_type = 'world' AND "
    "((tags IS NULL OR tags = '{}') OR tags && CAST(:filter_tags AS varchar[]))"
)
DISTANCE = "text <@> to_bm25query(:query_text, 'idx_memory_units_text_search')"
ARM = (
    f"(SELECT * FROM (SELECT id, text, fact_type, -({DISTANCE}) AS bm25_score FROM memory_units "
    f"WHERE {WHERE} ORDER BY {DISTANCE} LIMIT :limit) AS pg_textsearch_hits "
    "WHERE bm25_score > :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
)


def statements(b: PgTextsearchBackend) -> list[str]:
    """Every statement the backend contributes, embedded the way core runs it."""
    return [
        *b.install_statements(),
        *b.session_statements(),
        f"ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS search_vector {b.column_type()}",
        *b.index_statements(),
        f"INSERT INTO memory_units (id, search_vector) "
        f"SELECT id, {b.write_expression('document')} FROM stage_units",
        b.arm_sql(columns=COLUMNS, where=WHERE),
        " UNION ALL ".join(
            b.arm_sql(columns=COLUMNS, where=WHERE.replace("world", ft)) for ft in ("world", "experience")
        ),
    ]


def test_satisfies_protocol_and_entry_point() -> None:
    assert isinstance(PgTextsearchBackend, TextSearchBackend)
    assert isinstance(PgTextsearchBackend(Settings()), TextSearchBackend)
    eps = metadata.entry_points(group="hindsight_recall")
    (ep,) = [ep for ep in eps if ep.name == PgTextsearchBackend.name]
    assert ep.value == "hindsight_recall_pg_textsearch"
    registered: list[Any] = []
    pg_textsearch.register_text_search_backends(registered.append)
    assert registered == [PgTextsearchBackend]
    assert (PgTextsearchBackend.citus_compatible, PgTextsearchBackend.supports_cjk) == (False, False)


def test_golden_statements() -> None:
    b = PgTextsearchBackend(Settings())
    assert b.install_statements() == ("CREATE EXTENSION IF NOT EXISTS pg_textsearch",)
    assert b.session_statements() == ()
    assert b.column_type() == "text"
    assert b.index_statements() == (
        "CREATE INDEX IF NOT EXISTS idx_memory_units_text_search "
        "ON memory_units USING bm25 (text) WITH (text_config = 'english')",
    )
    assert b.write_expression("document") == "NULL::text"
    assert b.arm_sql(columns=COLUMNS, where=WHERE) == ARM


def test_every_statement_parses() -> None:
    for sql in statements(PgTextsearchBackend(Settings())):
        parse_statement(sql)


def test_gate_sits_outside_the_ordered_limit() -> None:
    arm = PgTextsearchBackend(Settings()).arm_sql(columns=COLUMNS, where=WHERE)
    inner, outer = arm.split(") AS pg_textsearch_hits ")
    assert ":min_score" not in inner and inner.endswith(f"ORDER BY {DISTANCE} LIMIT :limit")
    assert outer == "WHERE bm25_score > :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
    # The score is the negated distance, never a constant computed from the query alone.
    assert f"-({DISTANCE}) AS bm25_score" in inner


def test_prepare_document_keeps_the_text() -> None:
    assert PgTextsearchBackend(Settings()).prepare_document("a & b") == "a & b"


HOSTILE = "what & | ! ( ) : * < > ' \\ did alice say"


@pytest.mark.parametrize(
    ("query", "tokens", "expected"),
    [
        ("What did Alice adopt?", ["what", "did", "alice", "adopt"], "what did alice adopt"),
        (HOSTILE, ["what", "did", "alice", "say"], "what did alice say"),
        ("idx_other:cats", ["idx_other", "cats"], "idx_other cats"),
        ("cat\x00dog", ["cat", "dog"], "cat dog"),
        ("東京タワー", ["東京タワー"], "東京タワー"),
        # A repeated word is sent once: to_bm25query would count every occurrence.
        ("solar Solar SOLAR panel solar", ["solar", "solar", "solar", "panel", "solar"], "solar panel"),
        ("a&b a", ["a&b", "a"], "a b"),
    ],
)
async def test_prepare_query_sends_each_word_once(query: str, tokens: list[str], expected: str) -> None:
    prepared = await PgTextsearchBackend(Settings()).prepare_query(query, tokens, NO_CONNECTION)
    assert prepared is not None and prepared.text == expected and prepared.terms == tuple(expected.split())


@pytest.mark.parametrize(
    ("query", "tokens"), [("", []), ("?!", []), ("\x00 \x00", ["\x00"]), ("&", ["&", ""])]
)
async def test_prepare_query_without_words_skips_the_arm(query: str, tokens: list[str]) -> None:
    assert await PgTextsearchBackend(Settings()).prepare_query(query, tokens, NO_CONNECTION) is None
