"""What measuring the engine reads of its database: the server and its processes, how a bank's vectors are
searched, the links a bank holds and the disk banks take. Read only; each call is one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..store import diagnostics as store
from ._part import Part


class Diagnostics(Part):
    """Facts about the database and the banks in it, for benchmarks and reports."""

    @property
    def citus(self) -> bool:
        """Whether the database is a Citus coordinator (known once the engine is open)."""
        return self._db.citus

    async def server_pids(self) -> list[int]:
        """A process id on each server the engine reads, a child of the server's postmaster: the
        engine's backend and, on a Citus coordinator, one on each active worker."""
        async with self._transaction("read the servers' pids") as conn:
            return await store.server_pids(conn, citus=self._db.citus)

    async def server(self, settings: Sequence[str]) -> dict[str, Any]:
        """``version`` (PostgreSQL's and pgvector's), ``settings`` (the values of those named) and, on a Citus
        coordinator, ``citus`` (its version) and ``workers`` (how many are active).

        :param settings: names of server settings to report, such as ``work_mem``.
        """
        async with self._transaction("describe the server") as conn:
            return await store.server(conn, settings, citus=self._db.citus)

    async def semantic_plan(self, bank_id: str, vector: Sequence[float], repeats: int) -> dict[str, Any]:
        """Median planning and execution milliseconds of the semantic arm's statement for the bank's world
        facts (and of the exact scan, for a bank searched through an index), the indexes on the memory
        table and the bank's world rows. See :func:`~hindsight_recall.store.diagnostics.semantic_plan`.

        :param bank_id: the bank.
        :param vector: the query vector.
        :param repeats: runs of each statement; the medians are reported.
        """
        async with self._transaction("plan the semantic arm") as conn:
            return await store.semantic_plan(conn, bank_id, vector, repeats)

    async def link_counts(self, bank_id: str) -> tuple[dict[str, int], int]:
        """The bank's memory links by type, and its memory-entity pairs.

        :param bank_id: the bank.
        """
        async with self._transaction("count links") as conn:
            return await store.link_counts(conn, bank_id)

    async def disk_share(self, bank_ids: Sequence[str], tables: Sequence[str], *, shared: bool) -> dict[str, Any]:
        """Bytes on disk per table that belong to the banks (``bytes``), the links they hold (``links``) and the
        size function used (``size_function``). See :func:`~hindsight_recall.store.diagnostics.disk_share`.

        :param bank_ids: the banks.
        :param tables: the tables measured.
        :param shared: other banks live on the server too: sizes are shared out by the banks' share of rows.
        """
        async with self._transaction("measure the disk") as conn:
            return await store.disk_share(conn, bank_ids, tables, shared=shared, citus=self._db.citus)
