"""Tests of the SQL parse helper the backend golden tests rely on."""

from __future__ import annotations

import pytest
from hindsight_recall.testing.sqlcheck import bind_to_positional, parse_statement


@pytest.mark.parametrize(
    ("sql", "positional"),
    [
        ("SELECT :a, :b, :a", "SELECT $1, $2, $1"),
        ("SELECT :a::text, x::int", "SELECT $1::text, x::int"),
        ("SELECT ':a', E'\\' :b', 'it''s :c'", "SELECT ':a', E'\\' :b', 'it''s :c'"),
        ('SELECT "x:y" FROM t', 'SELECT "x:y" FROM t'),
        ("SELECT $$ :a $$, $q$ :b $q$", "SELECT $$ :a $$, $q$ :b $q$"),
        ("SELECT 1 -- :a\n, :b", "SELECT 1 -- :a\n, $1"),
        ("SELECT /* :a /* :b */ */ :c", "SELECT /* :a /* :b */ */ $1"),
        ("SELECT x[1:2], :name_2", "SELECT x[1:2], $1"),
    ],
)
def test_bind_to_positional(sql: str, positional: str) -> None:
    assert bind_to_positional(sql) == positional


def test_accepts_valid_statements() -> None:
    parse_statement("(SELECT id FROM t WHERE tags = '{}' AND a = CAST(:a AS text[]) LIMIT :limit)")
    parse_statement("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM t) THEN PERFORM f($c$ x $c$); END IF; END $$")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELEC 1", "cannot parse this statement"),
        ("SELECT 1; SELECT 2", "expected one statement"),
        ("DO $$ BEGIN SELEC 1; END $$", "PL/pgSQL body"),
        ("SELECT 'open", "unterminated"),
    ],
)
def test_rejects_invalid_statements(sql: str, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        parse_statement(sql)
