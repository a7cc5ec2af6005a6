"""Archives of bank exports, kept in the database and read back a part at a time.

Exporting, restoring, merging and cloning are the engine's own calls
(:meth:`~hindsight_recall.engine.Engine.export_bank` and the calls after it).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from ..store import transfer as store
from ._part import Part


class Transfers(Part):
    """Read back what an export stored."""

    async def archive(self, bank_id: str, transfer_id: uuid.UUID
                      ) -> tuple[dict[str, Any], AsyncIterator[bytes]] | None:
        """An export's archive: its ``result_metadata`` (``filename``, ``byte_size``, ...) and its bytes, read
        on a connection of their own as they are iterated; ``None`` when the transfer stored no archive."""
        async with self._db.connect() as conn:
            found = await store.transfer(conn, bank_id, transfer_id)
        if found is None or "storage_key" not in found["result_metadata"]:
            return None
        return found["result_metadata"], self._parts(bank_id, transfer_id)

    async def _parts(self, bank_id: str, transfer_id: uuid.UUID) -> AsyncIterator[bytes]:
        async with self._db.connect() as conn:
            async for part in store.archive_parts(conn, bank_id, transfer_id):
                yield part
