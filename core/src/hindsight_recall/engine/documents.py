"""A bank's documents: listed, read, retagged, their chunks, and the async retains that wrote them.

Forgetting a document is the engine's own call (:meth:`~hindsight_recall.engine.Engine.delete_document`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..store import chunks, operations
from ..store import documents as store
from ..store.document_items import StoredItem as StoredItem  # re-exported: what the faces read
from ..store.document_items import document_items
from ..store.documents import TIME_FIELDS as TIME_FIELDS  # re-exported: the axes a page is ordered on
from ._part import Part, require_bank

#: a completed retain that wrote a document: its operation id, stored request, plan and when it completed
Retain = tuple[uuid.UUID, str, dict[str, Any], datetime]


class Documents(Part):
    """Read a bank's documents, their chunks and items, and retag a document."""

    async def page(self, bank_id: str, **options: Any) -> dict[str, Any]:
        """A page of the bank's documents with the total: ``search``, ``tags``, ``tags_match``, ``time_field``,
        ``start``, ``end``, ``limit``, ``offset`` (see :func:`~hindsight_recall.store.documents.list_documents`).

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("list documents") as conn:
            await require_bank(conn, bank_id)
            return await store.list_documents(conn, bank_id, **options)

    async def get(self, bank_id: str, document_id: str) -> dict[str, Any] | None:
        """The document with its text and memory count, or ``None``."""
        async with self._transaction("get document") as conn:
            return await store.get_document(conn, bank_id, document_id)

    async def set_tags(self, bank_id: str, document_id: str, tags: Sequence[str]) -> bool:
        """Give every memory of the document exactly ``tags``; False when the bank has no such document."""
        async with self._transaction("update document") as conn:
            return await store.set_tags(conn, bank_id, document_id, tags)

    async def chunks(self, bank_id: str, document_id: str, *, limit: int, offset: int) -> dict[str, Any] | None:
        """A page of the document's chunks by index with their total, or ``None`` for no such document."""
        async with self._transaction("list chunks") as conn:
            return await chunks.document_chunks(conn, bank_id, document_id, limit=limit, offset=offset)

    async def chunk(self, chunk_id: str) -> dict[str, Any] | None:
        """The chunk ``chunk_id`` names (the id names its bank), or ``None``."""
        async with self._transaction("get chunk") as conn:
            return await chunks.get_chunk(conn, chunk_id)

    async def items(self, bank_id: str, document_id: str) -> list[StoredItem] | None:
        """The document's items as the store keeps them, to retain it again (see
        :mod:`~hindsight_recall.store.document_items`); ``None`` when the bank has no such document."""
        async with self._transaction("read a document's items") as conn:
            return await document_items(conn, bank_id, document_id)

    async def retains(self, bank_id: str, document_id: str, *, limit: int,
                      offset: int) -> tuple[list[Retain], int] | None:
        """The bank's completed async retains that wrote the document, newest first, and how many there are;
        ``None`` when the bank has no such document."""
        async with self._transaction("document history") as conn:
            if not await store.exists(conn, bank_id, document_id):
                return None
            return await operations.retains_of_document(conn, bank_id, document_id, limit, offset)
