"""What a person browsing the banks reads (the console's pages): banks with their size on disk, one bank's
overview, and pages of its memories, documents and entities.

Every call but :meth:`Browse.banks` is about one bank and raises
:class:`~hindsight_recall.errors.BankNotFound` for a bank that does not exist (a page never creates one).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

from ..errors import BankNotFound
from ..store import bank_reads, banks, browse, listing
from ..store.bank_reads import PERIODS as PERIODS  # re-exported: the periods a bank's overview covers
from ..store.banks import DEFAULT_DISPOSITION as DEFAULT_DISPOSITION  # and the traits a profile sets
from ._part import Part, require_bank


class Browse(Part):
    """Read pages of banks and of one bank, each call in one transaction (the bank's overview in several)."""

    async def banks(self, *, search: str | None, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of banks, most recently written first, each with its estimated ``size`` in bytes (``None``
        on Citus), and how many match ``search`` in all."""
        async with self._transaction("listing banks") as conn:
            page, total = await bank_reads.bank_page(conn, search=search, limit=limit, offset=offset)
            sizes = await bank_reads.bank_sizes(conn, {b["bank_id"]: b["fact_count"] for b in page},
                                                citus=self._db.citus)
        return [{**b, "size": sizes[b["bank_id"]]} for b in page], total

    async def bank(self, bank_id: str, period: str, now: datetime) -> dict[str, Any]:
        """The bank's setting overrides (``config``), ``profile``, ``entities`` count, ``overview`` (see
        :func:`~hindsight_recall.store.bank_reads.bank_overview`, over ``period`` back from ``now``) and
        estimated ``size`` in bytes."""

        async def counts() -> dict[str, Any]:
            async with self._transaction("bank") as conn:
                config = await banks.bank_config(conn, bank_id)
                if config is None:
                    raise BankNotFound(bank_id)
                return {"config": config, "entities": await browse.entity_count(conn, bank_id)}

        async def profile() -> dict[str, Any] | None:
            async with self._transaction("bank") as conn:
                return await banks.bank_profile(conn, bank_id)

        async def overview() -> dict[str, Any]:
            async with self._transaction("bank") as conn:
                return await bank_reads.bank_overview(conn, bank_id, period, now)

        # on their own connections these run side by side; the one pass over the memories is the dear one.
        # The links (millions of rows) are counted apart (:meth:`links`), by the image the page shows.
        stats, found, seen = await asyncio.gather(counts(), profile(), overview())
        if found is None:
            raise BankNotFound(bank_id)
        async with self._transaction("bank") as conn:
            size = (await bank_reads.bank_sizes(conn, {bank_id: seen["memories"]}, citus=self._db.citus))[bank_id]
        return {**stats, "profile": found, "overview": seen, "size": size}

    async def memories(self, bank_id: str, *, search: str | None, limit: int, offset: int,
                       entity_id: uuid.UUID | None, **filters: Any) -> dict[str, Any]:
        """A page of the bank's memories: ``rows``, ``total`` (``None`` for a ``search``, a substring over
        every memory, which is not counted: one row past the page says there are ``more``), ``more``, and
        the name of the entity filtered by (``entity_label``).

        :param filters: ``fact_type``, ``document_id``, ``tags``, ``tags_match``, ``time_field``, ``start``,
            ``end`` (see :func:`~hindsight_recall.store.listing.list_memories`).
        """
        async with self._transaction("list_memories") as conn:
            await require_bank(conn, bank_id)
            if search:
                rows, more = await listing.memory_page(conn, bank_id, search=search, limit=limit, offset=offset,
                                                       entity_id=entity_id, **filters)
                total = None
            else:
                rows, total = await listing.list_memories(conn, bank_id, limit=limit, offset=offset,
                                                          entity_id=entity_id, **filters)
                more = offset + limit < total
            label = await browse.entity_name(conn, bank_id, str(entity_id)) if entity_id else None
        return {"rows": rows, "total": total, "more": more, "entity_label": label}

    async def memory(self, bank_id: str, memory_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The memory (``None`` when the bank has no such memory) and its links both ways, strongest first."""
        async with self._transaction("get_memory") as conn:
            await require_bank(conn, bank_id)
            found = await listing.get_memory(conn, bank_id, memory_id)
            return found, await browse.memory_links(conn, bank_id, memory_id) if found else []

    async def links(self, bank_id: str) -> dict[str, int]:
        """How many links the bank has, by type."""
        async with self._transaction("bank") as conn:
            await require_bank(conn, bank_id)
            return await bank_reads.link_counts(conn, bank_id)

    async def documents(self, bank_id: str, *, search: str | None, limit: int, offset: int
                        ) -> tuple[list[dict[str, Any]], int]:
        """A page of the bank's documents (memories grouped by document), newest first, and how many match."""
        async with self._transaction("documents") as conn:
            await require_bank(conn, bank_id)
            return await browse.document_page(conn, bank_id, search=search, limit=limit, offset=offset)

    async def entities(self, bank_id: str, *, search: str | None, limit: int, offset: int, paired: int
                       ) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]]]:
        """A page of the bank's entities, most mentioned first; how many match; and how often two of the
        page's first ``paired`` entities are named by the same memory (the edges of their graph)."""
        async with self._transaction("entities") as conn:
            await require_bank(conn, bank_id)
            rows, total = await browse.entity_page(conn, bank_id, search=search, limit=limit, offset=offset)
            edges = await browse.entity_pairs(conn, bank_id, [r["id"] for r in rows[:paired]])
        return rows, total, edges
