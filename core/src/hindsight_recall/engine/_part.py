"""What every part of the engine shares: its database, one connection (one transaction) per call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import BankNotFound
from ..store import banks
from ..store.db import Database, database_errors


class Part:
    """One capability of the engine, over the engine's database.

    :param db: the engine's database (opened and closed by the engine).
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    @asynccontextmanager
    async def _transaction(self, what: str) -> AsyncIterator[AsyncConnection]:
        """One connection in one transaction, committed when the block ends without an error; a driver
        error becomes a :class:`~hindsight_recall.errors.DatabaseError` naming ``what``."""
        with database_errors(what):
            async with self._db.connect() as conn:
                yield conn


async def require_bank(conn: AsyncConnection, bank_id: str) -> None:
    """Raise :class:`~hindsight_recall.errors.BankNotFound` for a bank that does not exist."""
    if await banks.bank_config(conn, bank_id) is None:
        raise BankNotFound(bank_id)
