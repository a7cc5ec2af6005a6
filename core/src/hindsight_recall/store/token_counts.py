"""Stored token counts belong to the encoding (and counting rule) that made them.

Retain stores each memory's token count so packing need not tokenize every result. The counts are
recorded in ``hindsight_meta`` under the counter's key (``<encoding>:<what is counted>``); when an
engine starts with another key, the stored counts are cleared in one statement and recalls count
those rows on the fly until they are retained again. Clearing is cheap where recounting a large
database at start-up would not be.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

KEY = "token_counts"


async def reconcile(conn: AsyncConnection, counts_key: str) -> bool:
    """Clear counts made under another key and record ``counts_key``; return whether any were cleared.

    Another encoding clears every count. A database from before the key was recorded counted the
    text alone, with (we assume) the same encoding: only its memories with a context or metadata
    have another count now, so only theirs are cleared, and an upgrade rewrites no other row.

    :param conn: a connection inside a transaction (after the schema migrations).
    :param counts_key: :attr:`hindsight_recall.tokens.TokenCounter.counts_key`.
    """
    await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('hindsight_recall.token_counts'))"))
    current = await conn.scalar(text("SELECT value FROM hindsight_meta WHERE key = :key"), {"key": KEY})
    if current == counts_key:
        return False
    stale = "token_count IS NOT NULL"
    if current is None:
        stale += " AND (coalesce(context, '') <> '' OR metadata IS NOT NULL)"
    cleared = (await conn.execute(text(f"UPDATE memory_units SET token_count = NULL WHERE {stale}"))).rowcount
    await conn.execute(text(
        "INSERT INTO hindsight_meta (key, value) VALUES (:key, :value) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    ), {"key": KEY, "value": counts_key})
    return bool(cleared)
