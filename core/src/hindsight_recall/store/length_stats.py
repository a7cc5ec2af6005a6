"""Per-bank length statistics, kept in step with the memories at every write.

The keyword arm's length prior (:mod:`hindsight_recall.recall.length_prior`) asks how the lengths of a
bank's memories spread. Reading every length per query would cost a scan of the bank; here they are
kept in ``length_stats`` instead, one row per ``(bank_id, fact_type)``: the memories, and the sum and
the sum of squares of their lengths, from which the mean and the spread follow. A length is
``length(search_vector)``, the distinct lexemes of the stored ``tsvector``, the same number the arm
reads of each row it scores. Integers, so counting in and out never drifts.

It is written on the paths :mod:`.term_stats` is, in the same transactions: retain (:func:`count_out`
before an upsert, :func:`count_in` after it), forget (:func:`count_out` before the delete) and
delete_bank. Each call comes before term_stats' own: a writer locks its fact types' rows here, in
``fact_type`` order, before any term row, so these rows order the writers into one bank and the term
rows behind them are never contended. Rows that reach zero stay.

Kept for backends that keep term statistics (``keeps_term_stats``: their ``search_vector`` is a
``tsvector``); for the others every call is a no-op.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from . import term_stats

TABLE = "length_stats"

#: the memories of ``memory_units u`` matching ``{where}``, per bank and fact type, times ``{sign}``
_COUNTED = (
    "SELECT u.bank_id, u.fact_type, {sign} * count(*) AS memories, {sign} * sum(l.n) AS length_sum, "
    "{sign} * sum(l.n * l.n) AS length_squares FROM memory_units u "
    "CROSS JOIN LATERAL (SELECT CAST(coalesce(length(u.search_vector), 0) AS bigint)) AS l(n) "
    "WHERE {where} GROUP BY u.bank_id, u.fact_type"
)
#: ordered upsert: every writer locks a bank's fact-type rows in the same order
_UPSERT = (
    "INSERT INTO length_stats (bank_id, fact_type, memories, length_sum, length_squares) {counted} "
    "ORDER BY 1, 2 ON CONFLICT (bank_id, fact_type) DO UPDATE SET "
    "memories = length_stats.memories + excluded.memories, "
    "length_sum = length_stats.length_sum + excluded.length_sum, "
    "length_squares = length_stats.length_squares + excluded.length_squares"
)


def table_statements() -> list[str]:
    """DDL of the table (migration 21); on Citus it is distributed by ``bank_id`` with the other bank tables."""
    return [
        """CREATE TABLE IF NOT EXISTS length_stats (
            bank_id text NOT NULL,
            fact_type text NOT NULL,
            memories bigint NOT NULL,
            length_sum bigint NOT NULL,
            length_squares bigint NOT NULL,
            PRIMARY KEY (bank_id, fact_type))""",
    ]


def counted(where: str, sign: int = 1) -> str:
    """The statistics of the ``memory_units u`` rows matching ``where``, as ``(bank_id, fact_type,
    memories, length_sum, length_squares)`` rows (each multiplied by ``sign``)."""
    return _COUNTED.format(sign=int(sign), where=where)


async def _apply(conn: AsyncConnection, bank_id: str, ids: Sequence[uuid.UUID] | None, sign: int) -> None:
    await term_stats.apply_delta(conn, _UPSERT, counted, bank_id, ids, sign)


async def count_in(conn: AsyncConnection, backend: Any, bank_id: str, ids: Sequence[uuid.UUID] | None) -> None:
    """Add memories just written (``ids``; ``None``: every row of a bank that was empty before).

    :param conn: the writing transaction, before :func:`.term_stats.count_in`.
    :param backend: the text-search backend (a no-op unless it keeps term statistics).
    """
    if term_stats.keeps(backend):
        await _apply(conn, bank_id, ids, 1)


async def count_out(conn: AsyncConnection, backend: Any, bank_id: str, ids: Sequence[uuid.UUID]) -> None:
    """Subtract memories about to be rewritten or deleted (those of ``ids`` that exist).

    :param conn: the writing transaction, before the rows change and before :func:`.term_stats.count_out`.
    :param backend: the text-search backend (a no-op unless it keeps term statistics).
    """
    if term_stats.keeps(backend):
        await _apply(conn, bank_id, ids, -1)


async def delete_bank(conn: AsyncConnection, bank_id: str) -> None:
    """Remove a bank's statistics (whatever the backend: no bank's rows outlive it)."""
    await conn.execute(text("DELETE FROM length_stats WHERE bank_id = :bank"), {"bank": bank_id})


async def backfill(upgrade: Any) -> None:
    """Fill the statistics of an existing database from its stored ``search_vector`` (migration 21).

    Emptied first and filled in batches of memories, so an upgrade stopped half-way starts over at the
    next start and never counts a memory twice. Databases without term statistics get none (see
    :func:`.term_stats.backfill`, which decides alike).

    :param upgrade: a :class:`~hindsight_recall.store.schema.Upgrade` (its ``backend`` decides).
    """
    if not await term_stats.counts_this_database(upgrade):
        return
    await upgrade.execute("DELETE FROM length_stats")
    await upgrade.in_batches(_UPSERT.format(counted=counted("u.id > :after AND u.id <= :upto")))


#: ``SELECT`` of a bank's rows as ``[fact_type, memories, length_sum, length_squares]`` JSON arrays
#: (``:bank``), for a read that holds other columns too
BANK_LENGTHS = (
    "(SELECT json_agg(json_build_array(s.fact_type, s.memories, s.length_sum, s.length_squares)) "
    "FROM length_stats s WHERE s.bank_id = :bank)"
)


def lengths_of(rows: Any) -> dict[str, tuple[int, int, int]]:
    """:data:`BANK_LENGTHS` read back: fact type -> ``(memories, length_sum, length_squares)``."""
    return {str(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows or ()}


async def drift(conn: AsyncConnection, bank_id: str | None = None) -> list[tuple[str, str, tuple[int, ...],
                                                                             tuple[int, ...]]]:
    """The kept statistics that differ from a fresh count of the memories (none, when all is well).

    Rows of zero count as absent. For checks and tests: it reads every memory of the bank (or of
    every bank when ``bank_id`` is ``None``).

    :return: ``(bank_id, fact_type, kept, fresh)`` tuples, each count a ``(memories, sum, squares)`` tuple.
    """
    if not await term_stats.vectors_are_tsvectors(conn):
        return []  # another kind of backend: no statistics are kept, so none can drift
    where = "true" if bank_id is None else "u.bank_id = :bank"
    scope = "" if bank_id is None else "WHERE bank_id = :bank"
    zero = "coalesce({t}.memories, 0), coalesce({t}.length_sum, 0), coalesce({t}.length_squares, 0)"
    rows = await conn.execute(text(
        f"WITH fresh AS ({counted(where)}), kept AS (SELECT * FROM length_stats {scope}) "
        f"SELECT bank_id, fact_type, {zero.format(t='kept')}, {zero.format(t='fresh')} "
        "FROM kept FULL JOIN fresh USING (bank_id, fact_type) "
        f"WHERE ({zero.format(t='kept')}) IS DISTINCT FROM ({zero.format(t='fresh')}) ORDER BY 1, 2"
    ), {"bank": bank_id})
    return [(r[0], r[1], tuple(r[2:5]), tuple(r[5:8])) for r in rows]
