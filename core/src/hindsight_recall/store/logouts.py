"""Console logins ended by "Log out", until they would have expired anyway.

A login token is checked by its signature alone, so ending one before it expires needs a record that
every process serving the database reads: one ``hindsight_meta`` row per ended login, keyed by the
token's fingerprint (never the token), holding when the token expires. Rows whose token has expired
are removed whenever a login is ended.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

#: the keys of ended logins in ``hindsight_meta``: this prefix and the token's fingerprint
PREFIX = "console_logout:"


async def end(conn: AsyncConnection, fingerprint: str, expires: int, now: int) -> None:
    """Record the login ``fingerprint`` as ended (its token expires at ``expires``, epoch seconds), and
    forget ended logins that have expired by ``now``."""
    await conn.execute(text(
        "DELETE FROM hindsight_meta WHERE key LIKE :prefix AND value ~ '^[0-9]{1,18}$' "
        "AND CAST(value AS bigint) <= :now"), {"prefix": PREFIX + "%", "now": now})
    await conn.execute(text(
        "INSERT INTO hindsight_meta (key, value) VALUES (:key, :value) ON CONFLICT (key) DO NOTHING"
    ), {"key": PREFIX + fingerprint, "value": str(expires)})


async def ended(conn: AsyncConnection, fingerprint: str) -> bool:
    """Whether the login ``fingerprint`` was ended."""
    return bool(await conn.scalar(text("SELECT EXISTS (SELECT 1 FROM hindsight_meta WHERE key = :key)"),
                                  {"key": PREFIX + fingerprint}))
