"""A bank's memories as read back one at a time or by the page: valid ones, invalidated ones, and their tags.

Retaining, editing and forgetting memories are the engine's own calls
(:meth:`~hindsight_recall.engine.Engine.retain`, ``update_memory``, ``forget``, ``list_memories``).
"""

from __future__ import annotations

from typing import Any, Literal

from ..errors import BankNotFound
from ..store import banks, invalidated, listing
from ..store.listing import TIME_FIELDS as TIME_FIELDS  # re-exported: the times a page may filter on
from ._part import Part

#: a memory found, by its state: recall sees a valid one, not an invalidated one
Found = tuple[Literal["valid", "invalidated"], dict[str, Any]]


class Memories(Part):
    """Read a bank's memories, valid or invalidated, and the tags they carry."""

    async def find(self, bank_id: str, memory_id: str) -> Found | None:
        """The memory with its state: ``("valid", memory)`` as :meth:`Engine.get_memory` reads it, or
        ``("invalidated", {memory, reason, invalidated_at})``; ``None`` when the bank has neither."""
        async with self._transaction("get_memory") as conn:
            found = await listing.get_memory(conn, bank_id, memory_id)
            if found is not None:
                return "valid", found
            record = await invalidated.find(conn, bank_id, memory_id)
            return None if record is None else ("invalidated", record)

    async def invalidated(self, bank_id: str, *, fact_type: str | None, search: str | None, limit: int,
                          offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of the bank's invalidated memories, most recently invalidated first, and their total."""
        async with self._db.connect() as conn:
            return await invalidated.page(conn, bank_id, fact_type=fact_type, search=search, limit=limit,
                                          offset=offset)

    async def tags(self, bank_id: str, *, pattern: str | None, limit: int, offset: int,
                   of_mental_models: bool = False) -> tuple[list[dict[str, Any]], int]:
        """A page of the bank's tags with how many memories carry each, most used first, and how many match
        ``pattern`` (the whole tag, ``*`` the wildcard). Mental models are not kept here: theirs are none.

        :raises BankNotFound: no such bank.
        """
        async with self._db.connect() as conn:
            if await banks.bank_config(conn, bank_id) is None:
                raise BankNotFound(bank_id)
            if of_mental_models:
                return [], 0
            return await listing.list_tags(conn, bank_id, pattern=pattern, limit=limit, offset=offset)
