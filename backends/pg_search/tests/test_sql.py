"""Golden SQL, tokenizer-setting and query-text tests for the pg_search (ParadeDB) backend."""

from __future__ import annotations

from importlib import metadata
from typing import Any, cast

import hindsight_recall_pg_search as pg_search
import pytest
from hindsight_recall.errors import ConfigError
from hindsight_recall.protocols import TextSearchBackend
from hindsight_recall.settings import Settings
from hindsight_recall.testing.golden import DOCUMENTS, Golden, run_golden
from hindsight_recall.testing.sqlcheck import parse_statement
from hindsight_recall_pg_search import STEMMER_VARIABLE, PgSearchBackend, PgSearchSettings, parse_tokenizer
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection

VARIABLE = "HINDSIGHT_API_TEXT_SEARCH_EXTENSION_PG_SEARCH_TOKENIZER"
#: This backend never reads statistics, so prepare_query gets no connection.
NO_CONNECTION = cast(AsyncConnection, None)
COLUMNS = "id, text, fact_type"
WHERE = (
    "bank_id = :bank_id AND fact_type = 'world' AND "
    "((tags IS NULL OR tags = '{}') OR tags && CAST(:filter_tags AS varchar[]))"
)
MATCH = (
    "id @@@ paradedb.boolean(should => ARRAY[paradedb.match('text', :query_text), "
    "paradedb.match('context', :query_text), paradedb.match('text_signals', :query_text)])"
)
ARM = (
    "(SELECT * FROM (SELECT id, text, fact_type, paradedb.score(id) AS bm25_score FROM memory_units "
    f"WHERE {WHERE} AND {MATCH} ORDER BY bm25_score DESC, id LIMIT :limit) AS pg_search_hits "
    "WHERE bm25_score >= CAST(:min_score AS real) ORDER BY bm25_score DESC, id LIMIT :limit)"
)


def backend(tokenizer: str = "", **settings: Any) -> PgSearchBackend:
    return PgSearchBackend(Settings(**settings), PgSearchSettings(tokenizer=tokenizer))


def golden(b: PgSearchBackend) -> Golden:
    return Golden.of(b, COLUMNS, WHERE)


def statements(b: PgSearchBackend) -> list[str]:
    """Every statement the backend contributes, embedded the way core runs it."""
    return golden(b).statements


def test_satisfies_protocol_and_entry_point() -> None:
    assert isinstance(PgSearchBackend, TextSearchBackend)
    assert isinstance(backend(), TextSearchBackend)
    (ep,) = [ep for ep in metadata.entry_points(group="hindsight_recall") if ep.name == PgSearchBackend.name]
    assert ep.value == "hindsight_recall_pg_search"
    registered: list[Any] = []
    pg_search.register_text_search_backends(registered.append)
    assert registered == [PgSearchBackend]
    assert PgSearchBackend.citus_compatible is True


def test_golden_statements() -> None:
    b = backend()
    assert b.install_statements() == ("CREATE EXTENSION IF NOT EXISTS pg_search",)
    assert b.session_statements() == ()
    assert b.column_type() == "text"
    assert b.index_statements() == (
        "CREATE INDEX IF NOT EXISTS idx_memory_units_text_search ON memory_units "
        "USING bm25 (id, (bank_id::pdb.literal), (fact_type::pdb.literal), "
        "(text::pdb.\"unicode_words\"('stemmer=english')), "
        "(context::pdb.\"unicode_words\"('stemmer=english')), "
        "(text_signals::pdb.\"unicode_words\"('stemmer=english'))) WITH (key_field = 'id')",
    )
    assert b.write_expression("document") == "NULL::text"
    assert b.arm_sql(columns=COLUMNS, where=WHERE) == ARM


def test_a_tokenizer_is_checked_before_the_index_needs_it() -> None:
    create, check = backend("edge_ngram(1,3)").install_statements()
    assert create == "CREATE EXTENSION IF NOT EXISTS pg_search"
    assert "IF to_regtype('pdb.edge_ngram') IS NULL THEN" in check
    assert f"RAISE EXCEPTION '{VARIABLE}=edge_ngram(1,3): pg_search % has no tokenizer pdb.edge_ngram'" in check


@pytest.mark.parametrize(
    ("tokenizer", "stemmer", "fields"),
    [
        ("jieba", "", '(text::pdb."jieba"), (context::pdb."jieba"), (text_signals::pdb."jieba")'),
        (
            "lindera(japanese)", "",
            '(text::pdb."lindera"("japanese")), (context::pdb."lindera"("japanese")), '
            '(text_signals::pdb."lindera"("japanese"))',
        ),
        ("ngram(2,3)", "",
         '(text::pdb."ngram"(2,3)), (context::pdb."ngram"(2,3)), (text_signals::pdb."ngram"(2,3))'),
        ("ngram(2,3)", "german", '(text::pdb."ngram"(2,3,\'stemmer=german\')), '
         '(context::pdb."ngram"(2,3,\'stemmer=german\')), (text_signals::pdb."ngram"(2,3,\'stemmer=german\'))'),
        ("simple", "english", '(text::pdb."simple"(\'stemmer=english\')), '
         '(context::pdb."simple"(\'stemmer=english\')), (text_signals::pdb."simple"(\'stemmer=english\'))'),
        # nothing to stem in a whole field
        ("literal", "english", '(text::pdb."literal"), (context::pdb."literal"), (text_signals::pdb."literal")'),
        ("", "", "text, context, text_signals"),
    ],
)
def test_index_casts_every_text_field_to_the_tokenizer(tokenizer: str, stemmer: str, fields: str) -> None:
    b = PgSearchBackend(Settings(), PgSearchSettings(tokenizer=tokenizer, stemmer=stemmer))
    assert b.index_statements() == (
        "CREATE INDEX IF NOT EXISTS idx_memory_units_text_search ON memory_units "
        f"USING bm25 (id, (bank_id::pdb.literal), (fact_type::pdb.literal), {fields}) WITH (key_field = 'id')",
    )


@pytest.mark.parametrize(
    "tokenizer",
    ["", "unicode_words", "simple", "whitespace", "literal", "literal_normalized", "chinese_compatible",
     "icu", "jieba", "source_code", "lindera(chinese)", "lindera(japanese)", "lindera(korean)",
     "ngram(1,1)", "ngram(2,3)", "edge_ngram(1,999)"],
)
def test_every_statement_parses(tokenizer: str) -> None:
    for sql in statements(backend(tokenizer)):
        parse_statement(sql)


@pytest.mark.parametrize(("value", "canonical"), [("", ""), (" English ", "english"), ("TURKISH", "turkish")])
def test_stemmer_setting(value: str, canonical: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STEMMER_VARIABLE, value)
    assert PgSearchBackend(Settings()).stemmer == canonical


@pytest.mark.parametrize("value", ["klingon", "en", "english; DROP TABLE memory_units", "stemmer=english"])
def test_invalid_stemmer_is_rejected_naming_the_variable(value: str) -> None:
    with pytest.raises(ValidationError, match=STEMMER_VARIABLE):
        PgSearchSettings(stemmer=value)
    with pytest.raises(ConfigError, match=STEMMER_VARIABLE):
        PgSearchBackend(Settings(plugins={"text_search": {"pg_search": {"stemmer": value}}}))


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        ("unicode_words", "unicode_words"),
        ("  Jieba ", "jieba"),
        ("LITERAL_NORMALIZED", "literal_normalized"),
        ("Source_Code", "source_code"),
        ("lindera(Chinese)", "lindera(chinese)"),
        ("lindera ( korean )", "lindera(korean)"),
        ("japanese_lindera", "lindera(japanese)"),
        ("CHINESE_LINDERA", "lindera(chinese)"),
        ("lindera_korean", "lindera(korean)"),
        ("ngram(1,1)", "ngram(1,1)"),
        (" NGRAM( 2 , 3 ) ", "ngram(2,3)"),
        ("ngram(002,3)", "ngram(2,3)"),
        ("edge_ngram(1,999)", "edge_ngram(1,999)"),
        ("Edge_Ngram(5,5)", "edge_ngram(5,5)"),
    ],
)
def test_tokenizer_setting_is_normalised(value: str, canonical: str) -> None:
    assert parse_tokenizer(value) == canonical
    assert PgSearchSettings(tokenizer=value).tokenizer == canonical


@pytest.mark.parametrize(
    "value",
    ["default", "english", "lindera", "lindera()", "lindera(french)", "thai_lindera", "lindera_", "ngram",
     "ngram(0,3)", "ngram(3,2)", "ngram(1,1000)", "edge_ngram(0,0)", "ngram(-1,2)", "ngram(1.5,2)",
     "ngram(1,2,3)", "ngram(a,b)", "ngram(1,2); DROP TABLE memory_units", "simple)", "jieba jieba",
     "pdb.simple", "ngram(١,٢)"],
)
def test_invalid_tokenizer_is_rejected_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match=VARIABLE):
        parse_tokenizer(value)
    with pytest.raises(ValidationError, match=VARIABLE):
        PgSearchSettings(tokenizer=value)


def test_invalid_tokenizer_is_a_startup_error() -> None:
    settings = Settings(plugins={"text_search": {"pg_search": {"tokenizer": "ngram(3,2)"}}})
    with pytest.raises(ConfigError, match=rf"{VARIABLE}: Value error, {VARIABLE}='ngram\(3,2\)' is not a ParadeDB"):
        PgSearchBackend(settings)


def test_tokenizer_is_read_from_settings_in_code() -> None:
    settings = Settings(plugins={"text_search": {"pg_search": {"tokenizer": " Japanese_Lindera "}}})
    assert PgSearchBackend(settings).tokenizer == "lindera(japanese)"


@pytest.mark.parametrize(
    ("tokenizer", "cjk"),
    [("", False), ("simple", False), ("unicode_words", False), ("whitespace", False), ("literal", False),
     ("source_code", False), ("chinese_compatible", True), ("icu", True), ("jieba", True),
     ("lindera(korean)", True), ("ngram(1,2)", True), ("ngram(2,2)", True), ("ngram(3,3)", False),
     ("edge_ngram(1,2)", False)],
)
def test_cjk_capability_follows_the_tokenizer(tokenizer: str, cjk: bool) -> None:
    assert backend(tokenizer).supports_cjk is cjk
    assert PgSearchBackend.supports_cjk is False


def test_prepare_document_keeps_the_text() -> None:
    assert backend().prepare_document("a & b") == "a & b"


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["what", "did", "alice", "adopt"], "what did alice adopt"),
        (["cat", "cat", "dog"], "cat dog"),
        (["東京タワー", "行った"], "東京タワー 行った"),
        (["a&b", "c|d", "!e", "(f)", "g:*", "<h>", "i'j", "k\\l", "m\x00n", " ", "."],
         "a b c d e f g h i j k l m n"),
    ],
)
async def test_prepare_query_keeps_word_terms(tokens: list[str], expected: str) -> None:
    b = backend(bm25_max_query_terms=0)
    query = await b.prepare_query(" ".join(tokens), tokens, NO_CONNECTION)
    assert query is not None and query.text == expected and query.terms == tuple(expected.split())


async def test_prepare_query_caps_the_terms() -> None:
    tokens = [f"t{i}" for i in range(20)]
    capped = await backend(bm25_max_query_terms=3).prepare_query("", tokens, NO_CONNECTION)
    assert capped is not None and (capped.text, capped.terms) == ("t0 t1 t2", ("t0", "t1", "t2"))
    unlimited = await backend(bm25_max_query_terms=0).prepare_query("", tokens, NO_CONNECTION)
    assert unlimited is not None and unlimited.terms == tuple(tokens)


@pytest.mark.parametrize("tokens", [[], [""], [" ", ".", "\x00", "&|!"]])
async def test_prepare_query_without_terms_skips_the_arm(tokens: list[str]) -> None:
    assert await backend().prepare_query(". &", tokens, NO_CONNECTION) is None


# ------------------------------------------------------------------------------------------------ live

#: The tokenizers pg_search 0.21 builds here: edge_ngram arrived in 0.23, icu needs the extension's
#: icu feature, and the lindera dictionaries are left out of the build (their build scripts download).
LIVE_TOKENIZERS = ["", "unicode_words", "simple", "whitespace", "literal_normalized", "chinese_compatible",
                   "jieba", "source_code", "ngram(2,3)"]


class TestGoldenStatementsLive:
    """The statements pinned above, executed on a server with pg_search."""

    backend_name = "pg_search"

    def run(self, url: str, schema: str, query: str, tokenizer: str = "") -> list[list[tuple[Any, ...]]]:
        b = PgSearchBackend(Settings(database_schema=schema), PgSearchSettings(tokenizer=tokenizer))
        params = {"query_text": query, "bank_id": "b1", "filter_tags": [], "min_score": 0.0, "limit": 10}
        return run_golden(url, schema, golden(b), DOCUMENTS, params)

    @pytest.mark.parametrize("tokenizer", LIVE_TOKENIZERS)
    def test_the_arm_ranks_the_bank_s_match_first(self, tokenizer: str, hr_database_url: str,
                                                   hr_fresh_schema: str) -> None:
        query = "Bob sailing boat" if tokenizer in ("whitespace", "literal_normalized") else "sailing boats"
        if tokenizer == "literal_normalized":  # one token per field: only the whole text matches
            query = DOCUMENTS[1][3]
        one, both = self.run(hr_database_url, hr_fresh_schema, query, tokenizer)
        assert [r[1] for r in one][:1] == [DOCUMENTS[1][3]], one
        assert one[0][3] > 0
        assert all(r[2] in ("world", "experience") for r in both)

    def test_both_fact_types_and_no_other_bank(self, hr_database_url: str, hr_fresh_schema: str) -> None:
        one, both = self.run(hr_database_url, hr_fresh_schema, "alice cat")
        assert [r[1] for r in one] == [DOCUMENTS[0][3]]
        assert sorted(r[2] for r in both) == ["experience", "world"]

    def test_cjk_query(self, hr_database_url: str, hr_fresh_schema: str) -> None:
        cjk, _ = self.run(hr_database_url, hr_fresh_schema, "东京塔", "jieba")
        assert [r[1] for r in cjk] == [DOCUMENTS[4][3]]

    @pytest.mark.parametrize("tokenizer", ["edge_ngram(1,3)", "icu"])
    def test_a_tokenizer_this_release_lacks_names_the_setting(self, tokenizer: str, hr_database_url: str,
                                                               hr_fresh_schema: str) -> None:
        import sqlalchemy.exc

        with pytest.raises(sqlalchemy.exc.DBAPIError, match=rf"{VARIABLE}=.*pg_search 0\.21\.16 has no tokenizer"):
            self.run(hr_database_url, hr_fresh_schema, "sailing", tokenizer)
