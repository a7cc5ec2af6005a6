"""A bank's observations, as far as no model is needed: those built on a memory, and their scopes."""

from __future__ import annotations

from typing import Any

from ..store import observations as store
from ._part import Part, require_bank


class Observations(Part):
    """Read a bank's observations (clearing them is a forget: :meth:`Engine.forget`)."""

    async def built_on(self, bank_id: str, memory_id: str) -> list[str] | None:
        """The ids of the observations that name ``memory_id`` among their sources; ``None`` when the bank
        has no such memory."""
        async with self._transaction("clear a memory's observations") as conn:
            return await store.built_on(conn, bank_id, memory_id)

    async def scopes(self, bank_id: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """Each distinct tag set of the bank's observations with its count, most first; and how many.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("observation scopes") as conn:
            await require_bank(conn, bank_id)
            return await store.scopes(conn, bank_id, limit, offset)
