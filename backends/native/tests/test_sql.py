"""Golden SQL and query-text tests for the native (tsvector) backend; no database needed."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import hindsight_recall_native as native
import pytest
from hindsight_recall.protocols import TextSearchBackend
from hindsight_recall.settings import Settings
from hindsight_recall.testing.sqlcheck import parse_statement
from hindsight_recall_native import NativeBackend, NativeSettings
from pydantic import ValidationError

COLUMNS = "id, text, fact_type"
WHERE = (
    "bank_id = :bank_id AND fact_type = 'world' AND "
    "((tags IS NULL OR tags = '{}') OR tags && CAST(:filter_tags AS varchar[]))"
)
LANGUAGE = "CAST(:native_language AS regconfig)"
def backend(**settings: Any) -> NativeBackend:
    return NativeBackend(Settings(**settings), NativeSettings())


def statements(b: NativeBackend) -> list[str]:
    """Every statement the backend contributes, embedded the way core runs it."""
    return [
        *b.install_statements(),
        *b.session_statements(),
        f"ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS search_vector {b.column_type()}",
        *b.index_statements(),
        f"INSERT INTO memory_units (id, search_vector) "
        f"SELECT id, {b.write_expression('document')} FROM stage_units",
        b.arm_sql(columns=COLUMNS, where=WHERE),
        NativeBackend(Settings(), NativeSettings(language=b.language, idf=not b.config.idf)).arm_sql(
            columns=COLUMNS, where=WHERE),
        " UNION ALL ".join(
            b.arm_sql(columns=COLUMNS, where=WHERE.replace("world", ft)) for ft in ("world", "experience")
        ),
    ]


def test_satisfies_protocol_and_entry_point() -> None:
    assert isinstance(NativeBackend, TextSearchBackend)
    assert isinstance(backend(), TextSearchBackend)
    (ep,) = [ep for ep in metadata.entry_points(group="hindsight_recall") if ep.name == NativeBackend.name]
    assert ep.value == "hindsight_recall_native"
    registered: list[Any] = []
    native.register_text_search_backends(registered.append)
    assert registered == [NativeBackend]
    assert (NativeBackend.citus_compatible, NativeBackend.supports_cjk) == (True, True)


def test_golden_statements() -> None:
    b = backend()
    assert b.install_statements() == ()
    assert b.session_statements() == ()
    assert b.column_type() == "tsvector"
    assert b.index_statements() == (
        "CREATE INDEX IF NOT EXISTS idx_memory_units_text_search ON memory_units USING gin (search_vector)",
    )
    assert b.write_expression("document") == f"to_tsvector({LANGUAGE}, document)"
    assert b.parameters() == {"native_language": "english", "native_max_terms": 16, "native_selective": True,
                              "native_max_frequency": 1.0, "native_max_rows": 2000, "native_normalization": 0}
    plain = NativeBackend(Settings(), NativeSettings(idf=False)).arm_sql(columns=COLUMNS, where=WHERE)
    assert "ts_rank(hits.hit_vector, (SELECT to_tsquery(" in plain and "kept.w" not in plain
    assert "CAST(:native_normalization AS int)" in plain


def test_language_is_a_bound_parameter_never_sql_text() -> None:
    b = NativeBackend(Settings(), NativeSettings(language="simple"))
    assert b.parameters()["native_language"] == "simple"
    for sql in (b.write_expression("d"), b.arm_sql(columns=COLUMNS, where=WHERE)):
        assert "simple" not in sql and ":native_language" in sql


@pytest.mark.parametrize("language", ["english'; DROP TABLE x; --", "en glish", "1english", ""])
def test_language_must_be_an_identifier(language: str) -> None:
    with pytest.raises(ValidationError, match="HINDSIGHT_API_TEXT_SEARCH_EXTENSION_NATIVE_LANGUAGE"):
        NativeSettings(language=language)


@pytest.mark.parametrize("language", ["english", "simple"])
def test_every_statement_parses(language: str) -> None:
    for sql in statements(NativeBackend(Settings(), NativeSettings(language=language))):
        parse_statement(sql)


@pytest.mark.parametrize(
    ("document", "prepared"),
    [
        ("Alice adopted a cat", "Alice adopted a cat"),
        ("我喜欢吃苹果", " 我喜 喜欢 欢吃 吃苹 苹果 "),
        ("東京タワーに行った", " 東京 京タ タワ ワー ーに に行 行っ った "),
        ("서울에서 만났어요", " 서울 울에 에서   만났 났어 어요 "),
        ("iphone手机 中 ok", "iphone 手机   中  ok"),
        ("", ""),
    ],
)
def test_prepare_document_bigrams_cjk(document: str, prepared: str) -> None:
    assert backend().prepare_document(document) == prepared


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["alice", "cat"], "'alice' | 'cat'"),
        (["cat", "cat", "dog"], "'cat' | 'dog'"),
        (["苹果"], "'苹果'"),
        (["東京タワー"], "'東京' | '京タ' | 'タワ' | 'ワー'"),
        (["中"], "'中'"),
        (["서울에서"], "'서울' | '울에' | '에서'"),
        (["iphone手机"], "'iphone' | '手机'"),
        # Callers are meant to pass word tokens; raw syntax must still never reach to_tsquery.
        (["a&b", "c|d", "!e", "(f)", "g:*", "<h>", "i'j", "k\\l", "m\x00n"],
         "'a' | 'b' | 'c' | 'd' | 'e' | 'f' | 'g' | 'h' | 'i' | 'j' | 'k' | 'l' | 'm' | 'n'"),
        (["Café", "NAÏVE"], "'café' | 'naïve'"),
        (["foo_bar", "2024"], "'foo_bar' | '2024'"),
    ],
)
async def test_prepare_query(tokens: list[str], expected: str) -> None:
    b = backend(bm25_max_query_terms=0)
    assert await query_text(b, tokens, None, " ".join(tokens)) == expected


async def query_text(b: NativeBackend, tokens: list[str], conn: Any, query: str = "") -> str | None:
    """The bound query text; checks that the bound terms are the same terms, in order."""
    prepared = await b.prepare_query(query, tokens, conn)
    if prepared is None:
        return None
    assert prepared.text == " | ".join(f"'{t}'" for t in prepared.terms)
    return prepared.text


@pytest.mark.parametrize("tokens", [[], [""], ["&", "|", "'", "\x00"], ["   "]])
async def test_prepare_query_without_terms_skips_the_arm(tokens: list[str]) -> None:
    assert await backend().prepare_query("& | ' \x00", tokens, None) is None


async def test_every_term_is_bound_and_the_statement_chooses() -> None:
    """Selection happens per bank inside the arm's statement: the query binds every term, in order,
    whatever the caps, and prepare_query never touches the connection."""
    tokens = [f"t{i}" for i in range(40)]
    for b in (backend(), backend(bm25_max_query_terms=2), backend(bm25_max_query_terms=0),
              backend(bm25_selective_terms=False, bm25_max_term_frequency=0.1)):
        query = await b.prepare_query("", tokens, None)  # type: ignore[arg-type]
        assert query is not None and query.terms == tuple(tokens)


def test_selection_options_are_bound_parameters() -> None:
    b = backend(bm25_max_query_terms=3, bm25_selective_terms=False, bm25_max_term_frequency=0.25)
    assert b.parameters() == {"native_language": "english", "native_max_terms": 3, "native_selective": False,
                              "native_max_frequency": 0.25, "native_max_rows": 2000, "native_normalization": 0}
    assert NativeBackend(Settings(), NativeSettings(max_rows=0)).parameters()["native_max_rows"] == 0
    with pytest.raises(ValidationError):
        NativeSettings(max_rows=-1)


@pytest.mark.parametrize("value", [0, 1, 16, 63])
def test_length_normalization_is_a_bound_bit_mask(value: int) -> None:
    b = NativeBackend(Settings(), NativeSettings(normalization=value))
    assert b.parameters()["native_normalization"] == value
    assert "kept.q, CAST(:native_normalization AS int))" in b.arm_sql(columns=COLUMNS, where=WHERE)


def test_the_length_prior_divides_the_score_unless_a_normalization_is_set() -> None:
    pivot = ("/ (1 - CAST(:length_b AS float8) + CAST(:length_b AS float8) * length(hits.hit_vector) "
             "/ CAST(:length_mean AS float8))")
    assert NativeSettings().normalization is None and NativeBackend.length_prior and backend().length_prior
    for idf in (True, False):
        sql = NativeBackend(Settings(), NativeSettings(idf=idf)).arm_sql(columns=COLUMNS, where=WHERE)
        assert sql.count(pivot) == 1 and "AS bm25_score FROM hits" in sql
        parse_statement(sql)
    for value in (0, 1):  # set, even to 0, it replaces the prior
        b = NativeBackend(Settings(), NativeSettings(normalization=value))
        assert not b.length_prior and ":length_b" not in b.arm_sql(columns=COLUMNS, where=WHERE)
    assert backend().parameters()["native_normalization"] == 0


@pytest.mark.parametrize("value", [-1, 64, "log"])
def test_length_normalization_out_of_range_is_refused(value: object) -> None:
    with pytest.raises(ValidationError):
        NativeSettings(normalization=value)


def test_reference_ranking_function_is_available() -> None:
    b = NativeBackend(None, NativeSettings(rank="ts_rank_cd", idf=False))
    plain = b.arm_sql(columns=COLUMNS, where=WHERE)
    assert "ts_rank_cd(hits.hit_vector" in plain and "ts_rank(" not in plain and "kept.w" not in plain
    parse_statement(plain)
    weighted = NativeBackend(None, NativeSettings(rank="ts_rank_cd")).arm_sql(columns=COLUMNS, where=WHERE)
    assert weighted == backend().arm_sql(columns=COLUMNS, where=WHERE).replace("ts_rank(", "ts_rank_cd(")
    parse_statement(weighted)


def test_idf_weighting_is_on_by_default_and_reads_the_kept_counts() -> None:
    assert NativeSettings().idf is True
    sql = backend().arm_sql(columns=COLUMNS, where=WHERE)
    # the terms come from the bound terms; nothing of the query is inlined
    assert ":query_terms" in sql and "'alice'" not in sql
    # N and df come from term_stats of the bank and the fact types searched; the bank is never counted
    assert "FROM term_stats s WHERE s.bank_id = :bank_id AND s.fact_type = ANY(CAST(:fact_types AS text[]))" in sql
    assert "count(*) AS n" not in sql and sql.count("FROM memory_units") == 3  # exact, every and any tiers
    assert sql.count(f"WHERE {WHERE}") == 3
    with pytest.raises(ValidationError):
        NativeSettings(rank="bm25")
