"""Golden SQL and query-text tests for the vchord (VectorChord-BM25) backend; no database needed."""

from __future__ import annotations

from importlib import metadata
from typing import Any, cast

import hindsight_recall_vchord as vchord
import pytest
from hindsight_recall.protocols import TextSearchBackend
from hindsight_recall.settings import Settings
from hindsight_recall.testing.sqlcheck import parse_statement
from hindsight_recall_vchord import VchordBackend
from sqlalchemy.ext.asyncio import AsyncConnection

#: This backend never reads statistics, so prepare_query gets no connection.
NO_CONNECTION = cast(AsyncConnection, None)
COLUMNS = "id, text, fact_type"
WHERE = (
    "bank_id = :bank_id AND fact_type = 'world' AND "
    "((tags IS NULL OR tags = '{}') OR tags && CAST(:filter_tags AS varchar[]))"
)
SCORE = (
    "-(search_vector OPERATOR(bm25_catalog.<&>) bm25_catalog.to_bm25query('idx_memory_units_text_search', "
    "tokenizer_catalog.tokenize(:query_text, 'llmlingua2')))"
)
ARM = (
    f"(SELECT id, text, fact_type, {SCORE} AS bm25_score FROM memory_units "
    f"WHERE {WHERE} AND {SCORE} > :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
)
CREATE_TOKENIZER = """DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tokenizer_catalog.tokenizer WHERE name = 'llmlingua2') THEN
        PERFORM tokenizer_catalog.create_tokenizer('llmlingua2', $config$model = "llmlingua2"$config$);
    END IF;
END
$$"""


def statements(b: VchordBackend) -> list[str]:
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
    assert isinstance(VchordBackend, TextSearchBackend)
    assert isinstance(VchordBackend(Settings()), TextSearchBackend)
    (ep,) = [ep for ep in metadata.entry_points(group="hindsight_recall") if ep.name == VchordBackend.name]
    assert ep.value == "hindsight_recall_vchord"
    registered: list[Any] = []
    vchord.register_text_search_backends(registered.append)
    assert registered == [VchordBackend]
    assert (VchordBackend.citus_compatible, VchordBackend.supports_cjk) == (False, True)


def test_golden_statements() -> None:
    b = VchordBackend(Settings(database_schema="public"))
    assert b.install_statements() == (
        "CREATE EXTENSION IF NOT EXISTS pg_tokenizer CASCADE",
        "CREATE EXTENSION IF NOT EXISTS vchord_bm25 CASCADE",
        CREATE_TOKENIZER,
    )
    assert b.session_statements() == ('SET search_path TO "$user", public, bm25_catalog, tokenizer_catalog',)
    assert b.column_type() == "bm25_catalog.bm25vector"
    assert b.index_statements() == (
        "CREATE INDEX IF NOT EXISTS idx_memory_units_text_search "
        "ON memory_units USING bm25 (search_vector bm25_catalog.bm25_ops)",
    )
    expected = "tokenizer_catalog.tokenize(document, 'llmlingua2')::bm25_catalog.bm25vector"
    assert b.write_expression("document") == expected
    assert b.score_sql() == SCORE
    assert b.arm_sql(columns=COLUMNS, where=WHERE) == ARM


def test_search_path_keeps_the_engine_schema() -> None:
    b = VchordBackend(Settings(database_schema="memories"))
    assert b.session_statements() == (
        'SET search_path TO "$user", memories, public, bm25_catalog, tokenizer_catalog',
    )


@pytest.mark.parametrize("schema", ["public", "memories"])
def test_every_statement_parses(schema: str) -> None:
    for sql in statements(VchordBackend(Settings(database_schema=schema))):
        parse_statement(sql)


def test_arm_binds_only_parameters() -> None:
    arm = VchordBackend(Settings()).arm_sql(columns=COLUMNS, where=WHERE)
    assert arm.startswith("(") and arm.endswith("LIMIT :limit)")
    assert arm.count(":query_text") == 2 and ":min_score" in arm


def test_prepare_document_keeps_the_text() -> None:
    assert VchordBackend(Settings()).prepare_document("東京タワー & cats") == "東京タワー & cats"


HOSTILE = "what & | ! ( ) : * < > ' \\ did alice say"


@pytest.mark.parametrize(
    ("query", "tokens", "expected"),
    [
        ("What did Alice adopt?", ["what", "did", "alice", "adopt"], "What did Alice adopt?"),
        (HOSTILE, ["what", "did", "alice", "say"], HOSTILE),
        ("cat\x00dog\x00", ["cat", "dog"], "cat dog"),
        ("  东京塔在哪里  ", ["东京塔在哪里"], "东京塔在哪里"),
        ("서울에서 만났어요", ["서울에서", "만났어요"], "서울에서 만났어요"),
    ],
)
async def test_prepare_query_passes_the_raw_query(query: str, tokens: list[str], expected: str) -> None:
    prepared = await VchordBackend(Settings()).prepare_query(query, tokens, NO_CONNECTION)
    assert prepared is not None and prepared.text == expected  # raw: pg_tokenizer splits it


@pytest.mark.parametrize(("query", "tokens"), [("", []), ("?!", []), ("  ", ["  "]), ("\x00", ["x"])])
async def test_prepare_query_without_words_skips_the_arm(query: str, tokens: list[str]) -> None:
    assert await VchordBackend(Settings()).prepare_query(query, tokens, NO_CONNECTION) is None
