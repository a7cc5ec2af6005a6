"""Golden SQL and query-text tests for the PGroonga backend; no database needed."""

from __future__ import annotations

from importlib import metadata
from typing import Any, cast

import hindsight_recall_pgroonga as pgroonga
import pytest
from hindsight_recall.protocols import TextSearchBackend
from hindsight_recall.settings import Settings
from hindsight_recall.testing.sqlcheck import parse_statement
from hindsight_recall_pgroonga import PgroongaBackend
from sqlalchemy.ext.asyncio import AsyncConnection

#: This backend never reads statistics, so prepare_query gets no connection.
NO_CONNECTION = cast(AsyncConnection, None)
COLUMNS = "id, text, fact_type"
WHERE = (
    "bank_id = :bank_id AND fact_type = 'world' AND "
    "((tags IS NULL OR tags = '{}') OR tags && CAST(:filter_tags AS varchar[]))"
)
DOCUMENT = "COALESCE(text, '') || ' ' || COALESCE(context, '') || ' ' || COALESCE(text_signals, '')"
INDEX = (
    f"CREATE INDEX IF NOT EXISTS idx_memory_units_text_search ON memory_units USING pgroonga (({DOCUMENT})) "
    "WITH (tokenizer = 'TokenBigram', normalizer = 'NormalizerNFKC150')"
)
HITS = (
    "CREATE OR REPLACE FUNCTION hindsight_pgroonga_hits(text, text) "
    "RETURNS TABLE (hit_id uuid, hit_score double precision) "
    "LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = on SET enable_bitmapscan = on "
    "AS $hits$ "
    "SELECT id, score FROM (SELECT id, bank_id, pgroonga_score(tableoid, ctid) AS score FROM memory_units "
    f"WHERE ({DOCUMENT}) &@~ pgroonga_condition($1, scorers => ARRAY['scorer_tf_idf($index)'], "
    "index_name => 'idx_memory_units_text_search') "
    "OFFSET 0) AS matched WHERE bank_id = $2 $hits$"
)
ARM = (
    "(SELECT id, text, fact_type, hits.hit_score AS bm25_score "
    "FROM hindsight_pgroonga_hits(pgroonga_query_escape(:query_text), :bank_id) AS hits "
    "JOIN memory_units ON memory_units.id = hits.hit_id "
    f"WHERE {WHERE} AND hits.hit_score >= :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
)


def statements(b: PgroongaBackend) -> list[str]:
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
    assert isinstance(PgroongaBackend, TextSearchBackend)
    assert isinstance(PgroongaBackend(Settings()), TextSearchBackend)
    (ep,) = [ep for ep in metadata.entry_points(group="hindsight_recall") if ep.name == PgroongaBackend.name]
    assert ep.value == "hindsight_recall_pgroonga"
    registered: list[Any] = []
    pgroonga.register_text_search_backends(registered.append)
    assert registered == [PgroongaBackend]
    assert (PgroongaBackend.citus_compatible, PgroongaBackend.supports_cjk) == (False, True)


def test_golden_statements() -> None:
    b = PgroongaBackend(Settings())
    assert b.install_statements() == ("CREATE EXTENSION IF NOT EXISTS pgroonga", HITS)
    assert b.session_statements() == ()
    assert b.column_type() == "text"
    assert b.index_statements() == (INDEX,)
    assert b.write_expression("document") == "NULL::text"
    assert b.arm_sql(columns=COLUMNS, where=WHERE) == ARM


def test_match_uses_the_indexed_expression_verbatim() -> None:
    b = PgroongaBackend(Settings())
    (index,) = b.index_statements()
    indexed = index.split("USING pgroonga ((", 1)[1].split(")) WITH", 1)[0]
    assert indexed == pgroonga.DOCUMENT == DOCUMENT
    assert f"WHERE ({indexed}) &@~ pgroonga_condition($1, " in pgroonga.HITS_DDL


def test_scores_come_from_a_scan_of_the_index_only() -> None:
    """The scored scan has no other predicate, and the function disables sequential scans."""
    body = pgroonga.HITS_DDL.split("$hits$ ", 1)[1].removesuffix(" $hits$")
    inner = body.split("FROM (", 1)[1].split(" OFFSET 0)", 1)[0]
    assert "bank_id =" not in inner and inner.count(" WHERE ") == 1
    assert "SET enable_seqscan = off" in pgroonga.HITS_DDL
    assert "pgroonga_score(tableoid, ctid)" in inner and "'scorer_tf_idf($index)'" in inner
    # The arm gates and orders by the function's score, never by pgroonga_score of its own scan.
    assert "pgroonga_score" not in PgroongaBackend(Settings()).arm_sql(columns=COLUMNS, where=WHERE)


def test_every_statement_parses() -> None:
    for sql in statements(PgroongaBackend(Settings())):
        parse_statement(sql)
    # The function body too: the DDL parse sees it as a string.
    parse_statement(pgroonga.HITS_DDL.split("$hits$ ", 1)[1].removesuffix(" $hits$"))


def test_prepare_document_keeps_the_text() -> None:
    assert PgroongaBackend(Settings()).prepare_document("東京 & cats") == "東京 & cats"


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["alice", "cat"], "alice OR cat"),
        # Stop words are dropped, unless the query has nothing else.
        (["what", "did", "alice", "adopt", "in", "the", "spring"], "alice OR adopt OR spring"),
        (["who", "are", "they"], "who OR are OR they"),
        (["the", "東京"], "東京"),
        (["cat", "cat"], "cat"),
        (["東京タワー"], "東京 OR 京タ OR タワ OR ワー"),
        (["我喜欢吃苹果"], "我喜 OR 喜欢 OR 欢吃 OR 吃苹 OR 苹果"),
        (["서울에서"], "서울 OR 울에 OR 에서"),
        (["中"], "中"),
        (["iphone手机", "ok"], "iphone OR 手机 OR ok"),
        # Lower case keeps a user's "or" from becoming the OR operator.
        (["OR", "and"], "or OR and"),
        (["cats", "OR", "dogs"], "cats OR dogs"),
        # Query syntax never survives: only letters, marks, digits and underscores do ("a" and "i"
        # are stop words).
        (["a&b", "c|d", "!e", "(f)", "g:*", "<h>", "i'j", "k\\l", "m\x00n", '"o"', "+p", "-q", "~r"],
         "b OR c OR d OR e OR f OR g OR h OR j OR k OR l OR m OR n OR o OR p OR q OR r"),
    ],
)
async def test_prepare_query(tokens: list[str], expected: str) -> None:
    b = PgroongaBackend(Settings())
    query = await b.prepare_query(" ".join(tokens), tokens, NO_CONNECTION)
    assert query is not None and query.text == expected and query.terms == tuple(expected.split(" OR "))


@pytest.mark.parametrize("tokens", [[], [""], ["&", "()", "\x00"]])
async def test_prepare_query_without_terms_skips_the_arm(tokens: list[str]) -> None:
    assert await PgroongaBackend(Settings()).prepare_query("& ()", tokens, NO_CONNECTION) is None


class RecordingConnection:
    """A database that PGroonga already set up: records what a start runs on it."""

    def __init__(self) -> None:
        self.executed: list[str] = []

    async def scalar(self, statement: Any, params: Any = None) -> Any:
        assert "text_search_extension" in str(statement)
        return PgroongaBackend.name

    async def execute(self, statement: Any, params: Any = None) -> None:
        self.executed.append(str(statement))


async def test_a_start_on_an_existing_database_replaces_the_hits_function() -> None:
    """An upgraded HITS_DDL reaches a database a previous release set up: each start runs it again."""
    import pglast
    from hindsight_recall.store.schema import _install_text_search

    (raw,) = pglast.parse_sql(pgroonga.HITS_DDL)
    function = raw.stmt
    assert type(function).__name__ == "CreateFunctionStmt" and function.replace  # in place, same signature
    conn = RecordingConnection()
    await _install_text_search(cast(AsyncConnection, conn), PgroongaBackend(Settings()))
    assert conn.executed == list(PgroongaBackend(Settings()).install_statements())
    assert pgroonga.HITS_DDL in conn.executed  # and nothing else: the column and index stay as they are
