"""Bank aliases: changed and listed per bank, and resolved from a map every process keeps current.

:class:`AliasResolver` keeps every alias of the database in memory: a process listens on the aliases'
notification channel, and each change (sent at commit by whichever process made it) reloads the map, so
a request never pays a database round trip for its bank id and no process routes by a stale map for
longer than a notification takes. While the listening connection is down the map is not trusted: each
lookup then asks the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg
from sqlalchemy.exc import DBAPIError

from ..errors import DatabaseError, db_message
from ..store import aliases as store
from ..store.db import Database
from ._part import Part

log = logging.getLogger("hindsight_recall.service")


class Aliases(Part):
    """A bank's aliases; each change answers whether it found what it changes, and the bank's aliases after."""

    def resolver(self) -> AliasResolver:
        """A resolver over the engine's database (one per serving process: it listens once it is asked)."""
        return AliasResolver(self._db)

    async def of(self, bank_id: str) -> list[dict[str, Any]]:
        """The bank's aliases.

        :raises BankNotFound: no such bank.
        """
        async with self._db.connect() as conn:
            await store.require_bank(conn, bank_id)
            return await store.list_aliases(conn, bank_id)

    async def create(self, bank_id: str, alias: str, *, primary: bool = False) -> tuple[None, list[dict[str, Any]]]:
        """Give the bank an alias; :class:`~hindsight_recall.errors.InvalidRequest` (409) when it is taken."""
        async with self._db.connect() as conn:
            await store.create_alias(conn, bank_id, alias, primary=primary)
            return None, await store.list_aliases(conn, bank_id)

    async def set_primary(self, bank_id: str, alias: str, primary: bool) -> tuple[bool, list[dict[str, Any]]]:
        """Make the alias the bank's primary one (or not); False when the bank has no such alias."""
        async with self._db.connect() as conn:
            done = await store.set_primary(conn, bank_id, alias, primary)
            return done, await store.list_aliases(conn, bank_id)

    async def delete(self, bank_id: str, alias: str) -> tuple[bool, list[dict[str, Any]]]:
        """Remove the alias; False when the bank has no such alias."""
        async with self._db.connect() as conn:
            done = await store.delete_alias(conn, bank_id, alias)
            return done, await store.list_aliases(conn, bank_id)


#: seconds between attempts to listen again after the connection was lost
RELISTEN_SECONDS = 1.0


class AliasResolver:
    """Aliased bank id -> the bank's id, from a map kept current by notifications (see the module)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: alias -> bank; None while no listening connection vouches for it
        self.names: dict[str, str] | None = None
        self._task: asyncio.Task[None] | None = None

    async def resolve(self, bank_id: str) -> str:
        if self._task is None:
            self._task = asyncio.create_task(self._listen())
        names = self.names
        if names is not None:
            return names.get(bank_id, bank_id)
        async with self.db.connect() as conn:
            return await store.resolve(conn, bank_id)

    async def refresh(self) -> None:
        """Reload the map now (after this process changed it: its own notification may come later).

        A reload that fails leaves the map as it was: the change is committed and answered, and the
        listener reloads on its notification (on Citus the map reads every worker, and one may be away).
        """
        if self.names is None:
            return
        try:
            self.names = await self._load()
        except (DBAPIError, psycopg.Error, DatabaseError) as exc:
            log.warning("reloading the alias map failed (%s); it follows the change's notification", db_message(exc))

    async def _load(self) -> dict[str, str]:
        async with self.db.connect() as conn:
            return await store.alias_map(conn)

    async def _listen(self) -> None:
        from sqlalchemy.engine import make_url

        url = make_url(self.db.url).set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {store.CHANNEL}")
                    # loaded after LISTEN: a change committed from here on is also notified
                    self.names = await self._load()
                    async for _ in conn.notifies():
                        self.names = await self._load()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("alias notifications lost (%s); looking aliases up per request until they are back", exc)
            self.names = None
            await asyncio.sleep(RELISTEN_SECONDS)

    async def close(self) -> None:
        task, self._task, self.names = self._task, None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
