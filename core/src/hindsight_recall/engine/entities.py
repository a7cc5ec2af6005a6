"""A bank's entities: the list, one entity with the memories that mention it, and the graph of entities
mentioned together."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ..store import entities as store
from ._part import Part, require_bank


class Entities(Part):
    """Read a bank's entities."""

    async def page(self, bank_id: str, *, search: str | None, tags: Sequence[str] | None, tags_match: str,
                   limit: int, offset: int) -> dict[str, Any]:
        """A page of the bank's entities, most mentioned first, with the total.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("list entities") as conn:
            await require_bank(conn, bank_id)
            return await store.list_entities(conn, bank_id, search=search, tags=tags, tags_match=tags_match,
                                             limit=limit, offset=offset)

    async def get(self, bank_id: str, entity_id: uuid.UUID, *, tags: Sequence[str] | None, tags_match: str,
                  memories: int) -> dict[str, Any] | None:
        """One entity with the memories that mention it (at most ``memories``), or ``None``."""
        async with self._transaction("get entity") as conn:
            return await store.get_entity(conn, bank_id, entity_id, tags=tags, tags_match=tags_match,
                                          memories=memories)

    async def graph(self, bank_id: str, *, limit: int, min_count: int, tags: Sequence[str] | None,
                    tags_match: str) -> dict[str, Any]:
        """Entities mentioned together: the ``limit`` strongest pairs of at least ``min_count`` memories.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("entity graph") as conn:
            await require_bank(conn, bank_id)
            return await store.entity_graph(conn, bank_id, limit=limit, min_count=min_count, tags=tags,
                                            tags_match=tags_match)
