"""Golden SQL, settings and query-text tests for the vchord (VectorChord-BM25) backend; no database needed.

test_live.py runs every statement pinned here on a server with the extensions.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, cast

import hindsight_recall_vchord as vchord
import pytest
from hindsight_recall.errors import ConfigError
from hindsight_recall.protocols import TextSearchBackend
from hindsight_recall.settings import Settings
from hindsight_recall.testing.golden import DOCUMENTS, Golden, run_golden
from hindsight_recall.testing.sqlcheck import parse_statement
from hindsight_recall_vchord import VARIABLE, VchordBackend, VchordSettings
from sqlalchemy.ext.asyncio import AsyncConnection

#: This backend never reads statistics, so prepare_query gets no connection.
NO_CONNECTION = cast(AsyncConnection, None)
COLUMNS = "id, text, fact_type"
WHERE = (
    "bank_id = :bank_id AND fact_type = 'world' AND "
    "((tags IS NULL OR tags = '{}') OR tags && CAST(:filter_tags AS varchar[]))"
)
SCORE = (
    "-(search_vector OPERATOR(pg_catalog.<&>) bm25_catalog.to_bm25query('idx_memory_units_text_search', "
    "tokenizer_catalog.tokenize(:query_text, 'wiki_tocken')))"
)
ARM = (
    f"(SELECT id, text, fact_type, {SCORE} AS bm25_score FROM memory_units "
    f"WHERE {WHERE} AND {SCORE} > :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
)
CREATE_TOKENIZER = """DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tokenizer_catalog.tokenizer WHERE name = 'wiki_tocken') THEN
        PERFORM tokenizer_catalog.create_tokenizer('wiki_tocken', $config$model = "wiki_tocken"$config$);
    END IF;
END
$$"""


def golden(b: VchordBackend) -> Golden:
    return Golden.of(b, COLUMNS, WHERE)


def statements(b: VchordBackend) -> list[str]:
    """Every statement the backend contributes, embedded the way core runs it."""
    return golden(b).statements


def test_satisfies_protocol_and_entry_point() -> None:
    assert isinstance(VchordBackend, TextSearchBackend)
    assert isinstance(VchordBackend(Settings()), TextSearchBackend)
    (ep,) = [ep for ep in metadata.entry_points(group="hindsight_recall") if ep.name == VchordBackend.name]
    assert ep.value == "hindsight_recall_vchord"
    registered: list[Any] = []
    vchord.register_text_search_backends(registered.append)
    assert registered == [VchordBackend]
    assert VchordBackend.citus_compatible is False
    assert VchordBackend(Settings()).supports_cjk is False  # wiki_tocken's vocabulary is English
    assert VchordBackend.extensions == ("pg_tokenizer", "vchord_bm25")


@pytest.mark.parametrize(("value", "model", "cjk"), [
    ("", "wiki_tocken", False),
    ("  BERT_BASE_UNCASED ", "bert_base_uncased", True),
    ("llmlingua2", "llmlingua2", True),
    ("my_hf_model2", "my_hf_model2", False),
])
def test_tokenizer_setting(value: str, model: str, cjk: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, value)
    backend = VchordBackend(Settings())
    assert (backend.tokenizer, backend.supports_cjk) == (model, cjk)
    assert f"tokenize(:query_text, '{model}')" in backend.score_sql()
    assert f"create_tokenizer('{model}', $config$model = \"{model}\"$config$)" in backend.install_statements()[-1]


@pytest.mark.parametrize("value", ["bert-base", "x'; DROP TABLE memory_units; --", "a b", "1abc", "é", "a" * 64])
def test_a_bad_tokenizer_names_the_variable(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, value)
    with pytest.raises(ConfigError, match=VARIABLE):
        VchordBackend(Settings())
    # the same value given in code (where a NUL byte can be)
    monkeypatch.delenv(VARIABLE)
    for bad in (value, "model\x00"):
        with pytest.raises(ConfigError, match=VARIABLE):
            VchordBackend(Settings(plugins={"text_search": {"vchord": {"tokenizer": bad}}}))


def test_tokenizer_from_code_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "bert_base_uncased")
    settings = Settings(plugins={"text_search": {"vchord": {"tokenizer": "wiki_tocken"}}})
    assert VchordBackend(settings).tokenizer == "wiki_tocken"
    assert VchordBackend(config=VchordSettings(tokenizer="bert_base_uncased")).tokenizer == "bert_base_uncased"


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
    expected = "tokenizer_catalog.tokenize(document, 'wiki_tocken')::bm25_catalog.bm25vector"
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


# ------------------------------------------------------------------------------------------------ live


class TestGoldenStatementsLive:
    """The statements pinned above, executed on a server with vchord_bm25 and pg_tokenizer."""

    backend_name = "vchord"

    def run(self, url: str, schema: str, query: str, **backend: str) -> list[list[tuple[Any, ...]]]:
        b = VchordBackend(Settings(database_schema=schema), config=VchordSettings(**backend))
        params = {"query_text": query, "bank_id": "b1", "filter_tags": [], "min_score": 0.0, "limit": 10}
        return run_golden(url, schema, golden(b), DOCUMENTS, params)

    def test_the_arm_ranks_the_bank_s_match_first(self, hr_database_url: str, hr_fresh_schema: str) -> None:
        one, both = self.run(hr_database_url, hr_fresh_schema, "What did Alice adopt?")
        assert [r[1] for r in one] == [DOCUMENTS[0][3]]  # the other bank's Alice never shows
        assert one[0][3] > 0
        assert [r[2] for r in both] == ["world", "experience"]
        assert {r[1] for r in both} == {DOCUMENTS[0][3], DOCUMENTS[2][3]}

    def test_hostile_query(self, hr_database_url: str, hr_fresh_schema: str) -> None:
        hostile, _ = self.run(hr_database_url, hr_fresh_schema, HOSTILE.replace("alice", "bicycle"))
        assert [r[1] for r in hostile] == [DOCUMENTS[1][3]]

    def test_cjk_query(self, hr_database_url: str, hr_fresh_schema: str) -> None:
        cjk, _ = self.run(hr_database_url, hr_fresh_schema, "东京塔", tokenizer="bert_base_uncased")
        assert [r[1] for r in cjk] == [DOCUMENTS[4][3]]

    def test_another_built_in_model(self, hr_database_url: str, hr_fresh_schema: str) -> None:
        one, _ = self.run(hr_database_url, hr_fresh_schema, "sailing boat", tokenizer="bert_base_uncased")
        assert [r[1] for r in one] == [DOCUMENTS[1][3]]
