"""What every page reads first: a connection from the engine's pool, and the bank it is about."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.requests import Request

from ...errors import BankNotFound
from ...store import banks
from ...store.db import database_errors
from ..base import engine_of


@contextlib.asynccontextmanager
async def connect(request: Request, what: str) -> AsyncIterator[AsyncConnection]:
    """A connection from the engine's pool, driver errors made the API's."""
    with database_errors(what):
        async with engine_of(request).db.connect() as conn:
            yield conn


async def existing(conn: AsyncConnection, bank_id: str) -> dict[str, Any]:
    """The bank's stored overrides; 404 for a bank that does not exist (pages never create one)."""
    stored = await banks.bank_config(conn, bank_id)
    if stored is None:
        raise BankNotFound(bank_id)
    return stored
