"""Golden SQL and query-text tests for the native (tsvector) backend; no database needed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from types import SimpleNamespace
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
TSQUERY = f"to_tsquery({LANGUAGE}, :query_text)"
ARM = (
    f"(SELECT id, text, fact_type, ts_rank(search_vector, {TSQUERY}) AS bm25_score FROM memory_units "
    f"WHERE {WHERE} AND search_vector @@ {TSQUERY} AND ts_rank(search_vector, {TSQUERY}) >= :min_score "
    "ORDER BY bm25_score DESC, id LIMIT :limit)"
)
IDF_ARM = (
    "(WITH hits AS MATERIALIZED (SELECT id, text, fact_type, search_vector AS hit_vector, fact_type AS hit_type "
    f"FROM memory_units WHERE {WHERE} AND search_vector @@ {TSQUERY}), "
    "terms AS MATERIALIZED (SELECT DISTINCT q FROM unnest(CAST(:query_terms AS text[])) AS t(term) "
    f"CROSS JOIN LATERAL to_tsquery({LANGUAGE}, quote_literal(t.term)) AS q WHERE numnode(q) > 0), "
    f"visible AS MATERIALIZED (SELECT fact_type AS hit_type, count(*) AS n FROM memory_units WHERE {WHERE} "
    "GROUP BY fact_type), "
    "weights AS MATERIALIZED (SELECT visible.hit_type, terms.q, "
    "CAST(ln(1 + (visible.n - d.df + 0.5) / (d.df + 0.5)) AS float8) AS w "
    "FROM terms CROSS JOIN visible CROSS JOIN LATERAL (SELECT count(*) AS df FROM hits "
    "WHERE hits.hit_type = visible.hit_type AND hits.hit_vector @@ terms.q) AS d), "
    "scored AS MATERIALIZED (SELECT hits.*, (SELECT sum(w * ts_rank(hits.hit_vector, q)) / count(*) "
    "FROM weights WHERE weights.hit_type = hits.hit_type) AS bm25_score FROM hits) "
    "SELECT id, text, fact_type, bm25_score FROM scored WHERE bm25_score >= :min_score "
    "ORDER BY bm25_score DESC, id LIMIT :limit)"
)
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
        native._TERM_FREQUENCIES,
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
    assert b.parameters() == {"native_language": "english"}
    assert b.arm_sql(columns=COLUMNS, where=WHERE) == IDF_ARM
    assert NativeBackend(Settings(), NativeSettings(idf=False)).arm_sql(columns=COLUMNS, where=WHERE) == ARM


def test_language_is_a_bound_parameter_never_sql_text() -> None:
    b = NativeBackend(Settings(), NativeSettings(language="simple"))
    assert b.parameters() == {"native_language": "simple"}
    for sql in (b.write_expression("d"), b.arm_sql(columns=COLUMNS, where=WHERE), native._TERM_FREQUENCIES):
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
    assert await query_text(b, tokens, FakeConnection(), " ".join(tokens)) == expected


async def query_text(b: NativeBackend, tokens: list[str], conn: Any, query: str = "") -> str | None:
    """The bound query text; checks that the bound terms are the same terms, in order."""
    prepared = await b.prepare_query(query, tokens, conn)
    if prepared is None:
        return None
    assert prepared.text == " | ".join(f"'{t}'" for t in prepared.terms)
    return prepared.text


@pytest.mark.parametrize("tokens", [[], [""], ["&", "|", "'", "\x00"], ["   "]])
async def test_prepare_query_without_terms_skips_the_arm(tokens: list[str]) -> None:
    assert await backend().prepare_query("& | ' \x00", tokens, FakeConnection()) is None


def _lexeme(token: str) -> str | None:
    return None if token in {"the", "of"} else token  # two stopwords are enough here


class FakeConnection:
    """Answers the term-frequency query with scripted rows, or fails."""

    def __init__(self, frequencies: dict[str, float] | None = None, fail: bool = False) -> None:
        self.frequencies = frequencies or {}
        self.fail = fail
        self.executed: list[tuple[str, dict[str, Any]]] = []

    @asynccontextmanager
    async def begin_nested(self) -> AsyncIterator[None]:
        yield

    async def execute(self, statement: Any, params: dict[str, Any]) -> Any:
        self.executed.append((str(statement), params))
        if self.fail:
            raise RuntimeError("no statistics")
        rows = [
            SimpleNamespace(ord=i, token=t, lexeme=_lexeme(t), freq=self.frequencies.get(t, 0))
            for i, t in enumerate(params["tokens"], start=1)
        ]
        return SimpleNamespace(all=lambda: rows)


async def test_cap_keeps_the_rarest_terms_in_query_order() -> None:
    conn = FakeConnection({"alice": 0.5, "cat": 0.01, "the": 0.9, "went": 0.3, "home": 0.02})
    b = backend(bm25_max_query_terms=2)
    tokens = ["the", "alice", "cat", "went", "home"]
    assert await query_text(b, tokens, conn) == "'cat' | 'home'"
    ((sql, params),) = conn.executed
    assert sql == native._TERM_FREQUENCIES
    assert params == {"native_language": "english", "tokens": tokens}


async def test_cap_drops_stopwords_and_breaks_ties_by_position() -> None:
    b = backend(bm25_max_query_terms=2)
    assert await query_text(b, ["the", "red", "of", "fox", "dog"], FakeConnection()) == "'red' | 'fox'"


async def test_cap_falls_back_to_the_first_terms() -> None:
    tokens = ["a", "b", "c", "d"]
    b = backend(bm25_max_query_terms=2)
    assert await query_text(b, tokens, FakeConnection(fail=True)) == "'a' | 'b'"
    conn = FakeConnection({"a": 0.9})
    b = backend(bm25_max_query_terms=2, bm25_selective_terms=False, bm25_max_term_frequency=1.0)
    assert await query_text(b, tokens, conn) == "'a' | 'b'"
    assert conn.executed == []


async def test_terms_in_too_many_rows_are_dropped() -> None:
    conn = FakeConnection({"alice": 0.5, "april": 0.37, "2024": 0.37, "hike": 0.02, "the": 0.9})
    b = backend(bm25_max_term_frequency=0.1)
    assert await query_text(b, ["the", "alice", "hike", "april", "2024"], conn) == "'hike'"
    b = backend(bm25_max_term_frequency=0.4)
    assert await query_text(b, ["alice", "hike", "april", "2024"], conn) == "'hike' | 'april' | '2024'"


async def test_a_query_of_common_terms_only_keeps_them() -> None:
    conn = FakeConnection({"alice": 0.5, "april": 0.37})
    assert await query_text(backend(bm25_max_term_frequency=0.1), ["alice", "april"], conn) == "'alice' | 'april'"


async def test_frequency_pruning_needs_two_terms_and_survives_missing_statistics() -> None:
    conn = FakeConnection({"alice": 0.5})
    assert await query_text(backend(), ["alice"], conn) == "'alice'"
    assert conn.executed == []  # one term: nothing to choose between, no statistics query
    assert await query_text(backend(), ["alice", "hike"], FakeConnection(fail=True)) == "'alice' | 'hike'"
    off = FakeConnection({"alice": 0.5})
    assert await query_text(backend(bm25_max_term_frequency=1.0), ["alice", "hike"], off) == "'alice' | 'hike'"
    assert off.executed == []


async def test_cap_counts_cjk_bigrams() -> None:
    conn = FakeConnection({"東京": 0.5})
    assert await query_text(backend(bm25_max_query_terms=2), ["東京タワー"], conn) == "'京タ' | 'タワ'"


async def test_zero_cap_is_unlimited() -> None:
    tokens = [f"t{i}" for i in range(40)]
    query = await backend(bm25_max_query_terms=0).prepare_query("", tokens, FakeConnection(fail=True))
    assert query is not None and len(query.terms) == 40


def test_reference_ranking_function_is_available() -> None:
    b = NativeBackend(None, NativeSettings(rank="ts_rank_cd", idf=False))
    assert b.arm_sql(columns=COLUMNS, where=WHERE) == ARM.replace("ts_rank(", "ts_rank_cd(")
    parse_statement(b.arm_sql(columns=COLUMNS, where=WHERE))
    weighted = NativeBackend(None, NativeSettings(rank="ts_rank_cd")).arm_sql(columns=COLUMNS, where=WHERE)
    assert weighted == IDF_ARM.replace("ts_rank(", "ts_rank_cd(")
    parse_statement(weighted)


def test_idf_weighting_is_on_by_default_and_binds_only_the_query_text() -> None:
    assert NativeSettings().idf is True
    sql = backend().arm_sql(columns=COLUMNS, where=WHERE)
    # the terms come from the bound query text; nothing of the query is inlined
    assert ":query_text" in sql and "'alice'" not in sql
    assert sql.count(f"WHERE {WHERE}") == 2  # matches and the count N see the same bank, type and filter
    with pytest.raises(ValidationError):
        NativeSettings(rank="bm25")
