"""Read-only views over whole banks: a page of the bank list, link counts, a bank's ingestion over time."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .banks import bank_profile_of
from .citus import DISTRIBUTED

#: the bank list, most recently written first: one statement, profiles and counts included (no
#: window function: Citus would not push one down). The counts come from one grouped scan (a join on
#: the bank column, which Citus runs per shard); the first-ingest time of the newest document only
#: for the page.
_BANK_PAGE = """
WITH written AS (
    SELECT bank_id, count(*) AS facts, max(greatest(created_at, updated_at)) AS last_write
    FROM memory_units GROUP BY bank_id
), listed AS (
    SELECT b.bank_id, b.created_at, b.updated_at, b.profile, coalesce(w.facts, 0) AS facts, w.last_write
    FROM banks b LEFT JOIN written w ON w.bank_id = b.bank_id
    WHERE CAST(:q AS text) IS NULL OR strpos(lower(b.bank_id), lower(CAST(:q AS text))) > 0
       OR strpos(lower(coalesce(b.profile->>'name', '')), lower(CAST(:q AS text))) > 0
    ORDER BY w.last_write DESC NULLS LAST, b.created_at DESC, b.bank_id
    LIMIT :limit OFFSET :offset
), documents AS (
    SELECT bank_id, max(first_seen) AS last_document
    FROM (SELECT bank_id, min(created_at) AS first_seen FROM memory_units
          WHERE bank_id IN (SELECT bank_id FROM listed) AND document_id IS NOT NULL
          GROUP BY bank_id, document_id) AS firsts
    GROUP BY bank_id
)
SELECT l.*, d.last_document FROM listed l LEFT JOIN documents d ON d.bank_id = l.bank_id
ORDER BY l.last_write DESC NULLS LAST, l.created_at DESC, l.bank_id
"""

_BANK_COUNT = """
SELECT count(*) FROM banks b WHERE CAST(:q AS text) IS NULL OR strpos(lower(b.bank_id), lower(CAST(:q AS text))) > 0
    OR strpos(lower(coalesce(b.profile->>'name', '')), lower(CAST(:q AS text))) > 0
"""


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def bank_page(conn: AsyncConnection, *, search: str | None = None, limit: int = 100,
                    offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """One page of banks, most recently written first, and how many match ``search`` in all.

    :param search: a case-insensitive substring of the bank id or its name.
    """
    params = {"q": search, "limit": limit, "offset": offset}
    rows = list(await conn.execute(text(_BANK_PAGE), params))
    total = int(await conn.scalar(text(_BANK_COUNT), {"q": search}) or 0)
    page = []
    for r in rows:
        profile = bank_profile_of(r.bank_id, r.profile or {}, r.updated_at)
        page.append({
            "bank_id": r.bank_id, "name": profile["name"], "disposition": profile["disposition"],
            "mission": profile["mission"] or None, "created_at": _iso(r.created_at),
            "updated_at": profile["updated_at"],
            "fact_count": r.facts, "last_document_at": _iso(r.last_document), "last_write_at": _iso(r.last_write),
            "display_alias": None, "matched_aliases": [],
        })
    return page, int(total)


async def link_counts(conn: AsyncConnection, bank_id: str) -> dict[str, int]:
    """The bank's links by type (``semantic``, ``temporal``, ``causes``, ...)."""
    rows = await conn.execute(text(
        "SELECT link_type, count(*) AS n FROM memory_links WHERE bank_id = :bank GROUP BY link_type ORDER BY link_type"
    ), {"bank": bank_id})
    return {r.link_type: r.n for r in rows}


async def last_write(conn: AsyncConnection, bank_id: str) -> str | None:
    """When a memory of the bank was last stored or changed; ``None`` for an empty bank."""
    value = await conn.scalar(text(
        "SELECT max(greatest(created_at, updated_at)) FROM memory_units WHERE bank_id = :bank"), {"bank": bank_id})
    return _iso(value)


#: period -> (bucket unit, bucket width, bucket count): upstream's periods
PERIODS: dict[str, tuple[str, timedelta, int]] = {
    "1h": ("minute", timedelta(minutes=1), 60),
    "12h": ("hour", timedelta(hours=1), 12),
    "1d": ("hour", timedelta(hours=1), 24),
    "7d": ("day", timedelta(days=1), 7),
    "30d": ("day", timedelta(days=1), 30),
    "90d": ("day", timedelta(days=1), 90),
}
#: the axes a time series may bucket on; an event time falls back to ``created_at`` per row
SERIES_FIELDS = ("created_at", "mentioned_at", "occurred_start")


def _floor(moment: datetime, unit: str) -> datetime:
    if unit == "minute":
        return moment.replace(second=0, microsecond=0)
    if unit == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


async def memories_timeseries(conn: AsyncConnection, bank_id: str, period: str, time_field: str,
                              now: datetime) -> list[dict[str, Any]]:
    """Memories per UTC bucket and fact type over ``period`` back from ``now``; every bucket listed, empty
    ones as zeros. ``period`` is a key of :data:`PERIODS`, ``time_field`` one of :data:`SERIES_FIELDS`."""
    unit, step, count = PERIODS[period]
    column = SERIES_FIELDS[SERIES_FIELDS.index(time_field)]  # never caller text
    at = f"coalesce({column}, created_at)" if column != "created_at" else "created_at"
    first, until = _window(now, unit, step, count)
    rows = await conn.execute(text(
        f"SELECT date_trunc(:unit, {at} AT TIME ZONE 'UTC') AS bucket, fact_type, count(*) AS n "
        f"FROM memory_units WHERE bank_id = :bank AND {at} >= :since AND {at} < :until GROUP BY 1, 2"
    ), {"unit": unit, "bank": bank_id, "since": first, "until": until})
    return _buckets(((r.bucket, r.fact_type, r.n) for r in rows), first, step, count, now)


def _window(now: datetime, unit: str, step: timedelta, count: int) -> tuple[datetime, datetime]:
    """The first bucket's start and the end of the last one."""
    last = _floor(now, unit)
    return last - step * (count - 1), last + step


def _buckets(counts: Iterable[tuple[datetime, str, int]], first: datetime, step: timedelta, count: int,
             now: datetime) -> list[dict[str, Any]]:
    """Every bucket of the window, with the (bucket, fact type, count) rows summed in; empty ones as zeros."""
    buckets: dict[datetime, dict[str, Any]] = {
        first + step * i: {"time": (first + step * i).isoformat(), "world": 0, "experience": 0, "observation": 0}
        for i in range(count)}
    for at, fact_type, n in counts:
        bucket = buckets.get(at.replace(tzinfo=now.tzinfo))
        if bucket is not None and fact_type in bucket:
            bucket[fact_type] += n
    return list(buckets.values())


async def bank_overview(conn: AsyncConnection, bank_id: str, period: str, now: datetime) -> dict[str, Any]:
    """What the console's bank page shows of the memories, read in one pass over them: the counts by fact
    type, the documents, the last write, and :func:`memories_timeseries` over ``created_at``.

    The same numbers as ``bank_stats`` and :func:`last_write` give, which read the memories three times.
    """
    unit, step, count = PERIODS[period]
    first, until = _window(now, unit, step, count)
    rows = await conn.execute(text(
        # grouped by document too, so the outer query can count the documents (a DISTINCT aggregate
        # cannot be split over parallel workers; a grouping can)
        "WITH g AS MATERIALIZED ("
        "  SELECT fact_type, CASE WHEN created_at >= :since AND created_at < :until "
        "    THEN date_trunc(:unit, created_at AT TIME ZONE 'UTC') END AS bucket, document_id, count(*) AS n, "
        "    max(greatest(created_at, updated_at)) AS last FROM memory_units WHERE bank_id = :bank GROUP BY 1, 2, 3"
        ") SELECT fact_type, bucket, sum(n) AS n, max(last) AS last, NULL AS documents FROM g GROUP BY 1, 2 "
        "UNION ALL SELECT NULL, NULL, NULL, NULL, count(DISTINCT document_id) FROM g"
    ), {"unit": unit, "bank": bank_id, "since": first, "until": until})
    by_type: dict[str, int] = {}
    series: list[tuple[datetime, str, int]] = []
    documents, last = 0, None
    for r in rows:
        if r.fact_type is None:
            documents = int(r.documents)
            continue
        by_type[r.fact_type] = by_type.get(r.fact_type, 0) + int(r.n)
        last = r.last if last is None or r.last > last else last
        if r.bucket is not None:
            series.append((r.bucket, r.fact_type, int(r.n)))
    return {"memories": sum(by_type.values()), "by_type": by_type, "documents": documents, "last_write": _iso(last),
            "series": _buckets(series, first, step, count, now)}


_TABLE_SIZES = """
SELECT t.name, pg_total_relation_size(c.oid) AS bytes, c.reltuples AS rows,
       CAST(CAST(s.most_common_vals AS text) AS text[]) AS vals, s.most_common_freqs AS freqs, s.n_distinct
FROM unnest(CAST(:tables AS text[])) AS t(name)
JOIN pg_class c ON c.oid = to_regclass(t.name)
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'bank_id'
"""


async def bank_sizes(conn: AsyncConnection, memories: dict[str, int], *, citus: bool) -> dict[str, int | None]:
    """An estimate of each bank's bytes on disk, read from the catalog only (nothing is scanned).

    Each table holding banks' rows has its size (``pg_total_relation_size``: heap, indexes, TOAST) shared
    out by the bank's share of its rows, as the planner's statistics of its ``bank_id`` column estimate
    it; a table never analysed is shared out by the bank's share of all memories. ``None`` on Citus,
    where the coordinator's tables hold no rows and no statistics.

    :param memories: bank id -> how many memories it holds.
    :param citus: whether the database is a Citus coordinator (known since the engine opened).
    """
    if not memories or citus:
        return {b: None for b in memories}
    tables = list(await conn.execute(text(_TABLE_SIZES), {"tables": list(DISTRIBUTED)}))
    all_memories = max([sum(memories.values()), 1] + [int(t.rows) for t in tables if t.name == "memory_units"])
    sizes = dict.fromkeys(memories, 0.0)
    for t in tables:
        rows = max(float(t.rows), 0.0)
        known = dict(zip(t.vals or (), t.freqs or (), strict=False))
        distinct = (t.n_distinct if t.n_distinct > 0 else -t.n_distinct * rows) if t.n_distinct else 0.0
        # the banks the statistics do not list share what the listed ones leave
        rest = max(1.0 - sum(known.values()), 0.0) / max(distinct - len(known), 1.0)
        for bank_id in memories:
            share = memories[bank_id] / all_memories if t.n_distinct is None else known.get(bank_id, rest)
            sizes[bank_id] += t.bytes * min(share, 1.0)
    return {b: int(v) for b, v in sizes.items()}
