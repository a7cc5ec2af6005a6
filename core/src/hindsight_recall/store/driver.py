"""psycopg under SQLAlchemy: its connection (for COPY and binary reads), and the reads a recall makes at
every question sent to it directly."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from psycopg import AsyncRawCursor
from sqlalchemy.ext.asyncio import AsyncConnection

from .shards import rewrite


async def driver_connection(conn: Any) -> Any:
    """The psycopg connection under a SQLAlchemy ``AsyncConnection``, for COPY and binary reads."""
    return (await conn.get_raw_connection()).driver_connection


#: SQLAlchemy's bind parameters as ``text()`` reads them: ``:name``, not a ``::type`` cast
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")


@functools.lru_cache(maxsize=512)
def driver_sql(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with SQLAlchemy's ``:name`` binds as PostgreSQL's ``$n`` (numbered in order of first use)
    and ``\\:`` unescaped, as ``text()`` reads it; and the names in ``$n`` order."""
    names: dict[str, int] = {}

    def number(bind: re.Match[str]) -> str:
        return f"${names.setdefault(bind.group(1), len(names) + 1)}"

    return _BIND.sub(number, sql).replace("\\:", ":"), tuple(names)


async def fetch(conn: AsyncConnection, sql: str, params: Mapping[str, Any]) -> tuple[tuple[str, ...], list[Any]]:
    """Run one statement of ``:name`` binds on the connection's psycopg connection; its column names
    and its rows as tuples.

    Recall reads thousands of rows: through SQLAlchemy's result they cost about twice the CPU of
    psycopg's own (2,000 arm rows: 12 ms against 6 ms), and nothing here needs its rows. Even one
    short row costs less this way: SQLAlchemy's handling of a ``text()`` statement is most of such a
    read. The statement runs in the connection's transaction, with its settings; SQLAlchemy's cursor
    events do not see it.

    The statement goes with ``$n`` placeholders, converted once per statement (psycopg converts its
    own placeholders at every run of a statement over 4 kB, as the arms' are), and the rows come in
    PostgreSQL's binary format, which psycopg loads without parsing text (uuids, timestamps and arrays
    are most of an arm row). A ``real`` arrives as the exact double of its float4 value rather than as
    its shortest decimal, which keeps its order.
    """
    driver = await driver_connection(conn)
    placement = conn.info.get("shards")
    query, names = driver_sql(rewrite(sql, placement) if placement is not None else sql)
    async with AsyncRawCursor(driver) as cursor:
        await cursor.execute(query, [params[name] for name in names], binary=True)
        keys = tuple(column.name for column in cursor.description or ())
        return keys, await cursor.fetchall()
