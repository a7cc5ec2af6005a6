"""Parse generated SQL with the real PostgreSQL grammar (pglast), without a server.

Statements written for SQLAlchemy's ``text()`` bind ``:name`` parameters, which PostgreSQL does not
know; :func:`parse_statement` rewrites them to ``$n`` first. ``::`` casts and text inside string
literals, quoted identifiers, dollar quotes and comments are left alone. The bodies of ``DO`` blocks
are parsed as PL/pgSQL too, which also checks the SQL they embed.
"""

from __future__ import annotations

import re
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
_IDENTIFIER_CHAR = re.compile(r"[A-Za-z0-9_$]")


def bind_to_positional(sql: str) -> str:
    """Replace ``:name`` bind parameters with ``$1``, ``$2``, … (one number per distinct name).

    :param sql: a statement in SQLAlchemy ``text()`` style.
    """
    out: list[str] = []
    numbers: dict[str, int] = {}
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        end = _skip_quoted(sql, i)
        if end > i:
            out.append(sql[i:end])
            i = end
        elif sql.startswith("::", i):
            out.append("::")
            i += 2
        elif ch == ":" and (match := _NAME.match(sql, i + 1)):
            number = numbers.setdefault(match.group(), len(numbers) + 1)
            out.append(f"${number}")
            i = match.end()
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _skip_quoted(sql: str, i: int) -> int:
    """End of the literal, identifier, dollar quote or comment starting at ``i`` (``i`` if none)."""
    ch = sql[i]
    if ch == "'":
        backslashes = i > 0 and sql[i - 1] in "eE" and not (i > 1 and _IDENTIFIER_CHAR.match(sql[i - 2]))
        return _close_quote(sql, i, "'", backslashes)
    if ch == '"':
        return _close_quote(sql, i, '"', False)
    if sql.startswith("--", i):
        newline = sql.find("\n", i)
        return len(sql) if newline < 0 else newline + 1
    if sql.startswith("/*", i):
        return _close_block_comment(sql, i)
    if ch == "$" and not (i > 0 and _IDENTIFIER_CHAR.match(sql[i - 1])):
        tag = _DOLLAR_TAG.match(sql, i)
        if tag:
            close = sql.find(tag.group(), tag.end())
            if close < 0:
                raise AssertionError(f"unterminated dollar quote {tag.group()} in:\n{sql}")
            return close + len(tag.group())
    return i


def _close_quote(sql: str, i: int, quote: str, backslashes: bool) -> int:
    j = i + 1
    while j < len(sql):
        if backslashes and sql[j] == "\\":
            j += 2
            continue
        if sql[j] == quote:
            if sql.startswith(quote * 2, j):  # a doubled quote stays inside the literal
                j += 2
                continue
            return j + 1
        j += 1
    raise AssertionError(f"unterminated {quote} quote in:\n{sql}")


def _close_block_comment(sql: str, i: int) -> int:
    depth, j = 0, i
    while j < len(sql):
        if sql.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif sql.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    raise AssertionError(f"unterminated block comment in:\n{sql}")


def parse_statement(sql: str) -> None:
    """Assert that ``sql`` is exactly one statement PostgreSQL's grammar accepts.

    :param sql: the statement, with ``:name`` bind parameters allowed.
    :raises AssertionError: naming the statement and the parser's complaint.
    """
    import pglast  # late: keeps importing the testing package cheap

    positional = bind_to_positional(sql)
    try:
        statements = pglast.parse_sql(positional)
    except pglast.parser.ParseError as exc:
        raise AssertionError(f"PostgreSQL cannot parse this statement ({exc}):\n{sql}") from None
    if len(statements) != 1:
        raise AssertionError(f"expected one statement, found {len(statements)}:\n{sql}")
    body = _do_body(statements[0].stmt)
    if body is not None:
        _parse_plpgsql(body, sql)


def _do_body(node: Any) -> str | None:
    if type(node).__name__ != "DoStmt":
        return None
    options = {arg.defname: arg.arg.sval for arg in node.args}
    if options.get("language", "plpgsql").lower() != "plpgsql":
        return None
    body: str = options["as"]
    return body


def _parse_plpgsql(body: str, sql: str) -> None:
    import pglast

    tag = "$sqlcheck$"
    while tag in body:
        tag = tag[:-1] + "x$"
    wrapper = f"CREATE FUNCTION pg_temp.sqlcheck() RETURNS void LANGUAGE plpgsql AS {tag}{body}{tag}"
    try:
        pglast.parse_plpgsql(wrapper)
    except pglast.parser.ParseError as exc:
        raise AssertionError(f"PostgreSQL cannot parse the PL/pgSQL body ({exc}):\n{sql}") from None
