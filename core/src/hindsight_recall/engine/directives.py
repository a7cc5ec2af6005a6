"""A bank's directives: named rules its reflect gives the model, highest priority first."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BankNotFound
from ..store import banks
from ..store import directives as store
from ._part import Part, require_bank

#: how a tagged directive may match the asked-for tags
MATCHES = tuple(store.MATCHES)


class Directives(Part):
    """Create, read, change and delete a bank's directives."""

    async def page(self, bank_id: str, *, tags: Sequence[str] | None, tags_match: str, active_only: bool,
                   limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of the bank's directives and how many match in all.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("list directives") as conn:
            await require_bank(conn, bank_id)
            return await store.page(conn, bank_id, tags=tags, tags_match=tags_match, active_only=active_only,
                                    limit=limit, offset=offset)

    async def reflect_profile(self, bank_id: str, tags: Sequence[str] | None = None) -> dict[str, Any]:
        """The bank's profile with the directives a reflect on ``tags`` follows, as reflect's prompt reads it.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("read the bank's profile") as conn:
            profile = await banks.bank_profile(conn, bank_id)
            if profile is None:
                raise BankNotFound(bank_id)
            return {**profile, "directives": await store.active(conn, bank_id, tags)}

    async def create(self, bank_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Store a directive; the bank is created if needed, as a retain creates it."""
        async with self._transaction("create directive") as conn:
            await banks.ensure_bank(conn, bank_id)
            return await store.create(conn, bank_id, fields)

    async def get(self, bank_id: str, directive_id: uuid.UUID) -> dict[str, Any] | None:
        """The directive, or ``None``."""
        async with self._transaction("get directive") as conn:
            return await store.get(conn, bank_id, directive_id)

    async def update(self, bank_id: str, directive_id: uuid.UUID, changes: Mapping[str, Any]) -> dict[str, Any] | None:
        """The directive changed, or ``None`` when there is no such directive."""
        async with self._transaction("update directive") as conn:
            return await store.update(conn, bank_id, directive_id, changes)

    async def delete(self, bank_id: str, directive_id: uuid.UUID) -> bool:
        """False when there was no such directive."""
        async with self._transaction("delete directive") as conn:
            return await store.delete(conn, bank_id, directive_id)
