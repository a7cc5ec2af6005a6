"""Console logins ended before they expire, shared by every process on the database."""

from __future__ import annotations

import time

from ..store import logouts as store
from ._part import Part


class Logouts(Part):
    """End a console login, and ask whether one was ended."""

    async def end(self, fingerprint: str, expires: int) -> None:
        """Refuse the login ``fingerprint`` from now on (until ``expires``, epoch seconds, when its token
        would stop working anyway)."""
        async with self._transaction("log out") as conn:
            await store.end(conn, fingerprint, expires, int(time.time()))

    async def ended(self, fingerprint: str) -> bool:
        """Whether the login ``fingerprint`` was ended."""
        async with self._transaction("check a login") as conn:
            return await store.ended(conn, fingerprint)
