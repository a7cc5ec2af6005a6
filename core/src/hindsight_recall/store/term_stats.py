"""Per-bank term statistics, kept in step with the memories at every write.

A keyword arm that weighs terms by rarity (BM25's IDF) needs, for the bank and the fact types it
searches, the number of memories ``N`` and, per lexeme, the number of memories containing it
(``df``). Counting them per query costs a scan of every matching row; here they are kept in
``term_stats`` instead, one row per ``(bank_id, fact_type, lexeme)``, and the row whose lexeme is
:data:`MEMORIES` (``''``, never a lexeme) holds ``N``. The counts are read from the stored
``search_vector`` (a ``tsvector``), so they always agree with what the index matches.

Every write path calls this module in its own transaction: retain (:func:`count_out` before an
upsert, :func:`count_in` after it), forget (:func:`count_out` before the delete), and delete_bank
(:func:`delete_bank`). A document replaced is a retain followed by a forget. Deltas are upserted in
``(fact_type, lexeme)`` order, so concurrent writers into one bank take their row locks in the same
order and never deadlock. Counts that reach zero stay as rows of zero (a lexeme that comes back
reuses its row).

Only backends that declare ``keeps_term_stats`` pay for this: for the others every call is a no-op.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

#: the lexeme of the row that counts a fact type's memories (to_tsvector never yields an empty lexeme)
MEMORIES = ""
TABLE = "term_stats"

#: one row per memory (the MEMORIES lexeme) and per distinct lexeme of its search_vector
_COUNTED = (
    "SELECT u.bank_id, u.fact_type, l.lexeme, {sign} * count(*) AS df FROM memory_units u "
    "CROSS JOIN LATERAL unnest(array_prepend(CAST('' AS text), "
    "coalesce(tsvector_to_array(u.search_vector), CAST('{{}}' AS text[])))) AS l(lexeme) "
    "WHERE {where} GROUP BY u.bank_id, u.fact_type, l.lexeme"
)
#: ordered upsert: every writer locks (fact_type, lexeme) rows in the same order
_UPSERT = (
    "INSERT INTO term_stats (bank_id, fact_type, lexeme, df) {counted} ORDER BY 1, 2, 3 "
    "ON CONFLICT (bank_id, fact_type, lexeme) DO UPDATE SET df = term_stats.df + excluded.df"
)


def table_statements() -> list[str]:
    """DDL of the table (migration 10). Keyed by bank first: one bank's rows are one index range,
    and on Citus the table is distributed by ``bank_id`` with the other bank tables."""
    return [
        """CREATE TABLE IF NOT EXISTS term_stats (
            bank_id text NOT NULL,
            fact_type text NOT NULL,
            lexeme text NOT NULL,
            df bigint NOT NULL,
            PRIMARY KEY (bank_id, fact_type, lexeme))""",
    ]


def keeps(backend: Any) -> bool:
    """Whether ``backend`` reads the statistics (``keeps_term_stats``); only then are they written."""
    return bool(getattr(backend, "keeps_term_stats", False))


def counted(where: str, sign: int = 1) -> str:
    """The statistics of the ``memory_units u`` rows matching ``where``, as ``(bank_id, fact_type,
    lexeme, df)`` rows (``df`` multiplied by ``sign``)."""
    return _COUNTED.format(sign=int(sign), where=where)


async def apply_delta(conn: AsyncConnection, upsert: str, counted_rows: Callable[[str, int], str], bank_id: str,
                      ids: Sequence[uuid.UUID] | None, sign: int) -> None:
    """Upsert the counts of a bank's rows (``ids``; ``None``: all of them), times ``sign``: ``upsert`` has a
    ``{counted}`` slot that ``counted_rows(where, sign)`` fills. Shared with :mod:`.length_stats`."""
    where = "u.bank_id = :bank" + ("" if ids is None else " AND u.id = ANY(:ids)")
    params: dict[str, Any] = {"bank": bank_id}
    if ids is not None:
        if not ids:
            return
        params["ids"] = list(ids)
    await conn.execute(text(upsert.format(counted=counted_rows(where, sign))), params)


async def _apply(conn: AsyncConnection, bank_id: str, ids: Sequence[uuid.UUID] | None, sign: int) -> None:
    await apply_delta(conn, _UPSERT, counted, bank_id, ids, sign)


async def count_in(conn: AsyncConnection, backend: Any, bank_id: str, ids: Sequence[uuid.UUID] | None) -> None:
    """Add memories just written (``ids``; ``None``: every row of a bank that was empty before).

    :param conn: the writing transaction.
    :param backend: the text-search backend (a no-op unless it keeps statistics).
    """
    if keeps(backend):
        await _apply(conn, bank_id, ids, 1)


async def count_out(conn: AsyncConnection, backend: Any, bank_id: str, ids: Sequence[uuid.UUID]) -> None:
    """Subtract memories about to be rewritten or deleted (those of ``ids`` that exist).

    :param conn: the writing transaction, before the rows change.
    :param backend: the text-search backend (a no-op unless it keeps statistics).
    """
    if keeps(backend):
        await _apply(conn, bank_id, ids, -1)


async def delete_bank(conn: AsyncConnection, bank_id: str) -> None:
    """Remove a bank's statistics (whatever the backend: no bank's rows outlive it)."""
    await conn.execute(text("DELETE FROM term_stats WHERE bank_id = :bank"), {"bank": bank_id})


async def backfill(upgrade: Any) -> None:
    """Fill the statistics of an existing database from its stored ``search_vector`` (migration 10).

    The table is emptied first and filled in batches of memories, so an upgrade stopped half-way
    starts over at the next start and never counts a memory twice. Databases whose backend keeps no
    statistics, or whose ``search_vector`` was written by another backend or is not a ``tsvector``,
    get none.

    :param upgrade: a :class:`~hindsight_recall.store.schema.Upgrade` (its ``backend`` decides).
    """
    if not await counts_this_database(upgrade):
        return
    await upgrade.execute("DELETE FROM term_stats")
    await upgrade.in_batches(_UPSERT.format(counted=counted("u.id > :after AND u.id <= :upto")))


async def counts_this_database(upgrade: Any) -> bool:
    """Whether an upgrade fills statistics from the stored vectors: the backend keeps them, built this
    database, and its ``search_vector`` is a ``tsvector``.

    :param upgrade: a :class:`~hindsight_recall.store.schema.Upgrade`.
    """
    if not keeps(upgrade.backend):
        return False
    built_with = await upgrade.conn.scalar(text(
        "SELECT value FROM hindsight_meta WHERE key = 'text_search_extension'"
    ))
    if built_with != upgrade.backend.name:  # another backend's vectors: start refuses this database anyway
        return False
    return await vectors_are_tsvectors(upgrade.conn)


async def drift(conn: AsyncConnection, bank_id: str | None = None) -> list[tuple[str, str, str, int, int]]:
    """The kept counts that differ from a fresh count of the memories (none, when all is well).

    Rows of zero count as absent. For checks and tests: it reads every memory of the bank (or of
    every bank when ``bank_id`` is ``None``).

    :return: ``(bank_id, fact_type, lexeme, kept, fresh)`` tuples.
    """
    if not await vectors_are_tsvectors(conn):
        return []  # another kind of backend: no statistics are kept, so none can drift
    where = "true" if bank_id is None else "u.bank_id = :bank"
    scope = "" if bank_id is None else "WHERE bank_id = :bank"
    rows = await conn.execute(text(
        f"WITH fresh AS ({counted(where)}), kept AS (SELECT bank_id, fact_type, lexeme, df FROM term_stats {scope}) "
        "SELECT bank_id, fact_type, lexeme, coalesce(kept.df, 0) AS kept, coalesce(fresh.df, 0) AS fresh "
        "FROM kept FULL JOIN fresh USING (bank_id, fact_type, lexeme) "
        "WHERE coalesce(kept.df, 0) <> coalesce(fresh.df, 0) ORDER BY 1, 2, 3"
    ), {"bank": bank_id})
    return [(r.bank_id, r.fact_type, r.lexeme, r.kept, r.fresh) for r in rows]


async def vectors_are_tsvectors(conn: AsyncConnection) -> bool:
    """Whether ``memory_units.search_vector`` is a ``tsvector``, the only kind these counts read."""
    kind = await conn.scalar(text(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'memory_units'::regclass "
        "AND attname = 'search_vector' AND NOT attisdropped"
    ))
    return bool(kind == "tsvector")
