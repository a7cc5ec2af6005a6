"""Transfers: a bank exported as an archive kept in the database (and read back a part at a time), an
archive restored into a new bank or merged into one, a bank cloned. See :mod:`hindsight_recall.transfer`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

from .. import transfer
from ..retain.ingest import Ingestor
from ..store import transfer as store
from ..store.banks import validate_bank_id
from ..store.db import Database, database_errors
from ._part import Part


class Transfers(Part):
    """Export, restore, merge and clone banks; read back what an export stored.

    :param ingestor: writes what an archive brings, as a retain does.
    """

    def __init__(self, db: Database, ingestor: Ingestor) -> None:
        super().__init__(db)
        self._ingestor = ingestor


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

    async def export(self, bank_id: str, *, documents: Collection[str] | None = None, bank_config: bool = True,
                     kind: str = "bank_export") -> tuple[uuid.UUID, dict[str, Any]]:
        """Export the bank (or some of its documents) as a transfer archive kept in the database; returns
        the transfer's id and result (counts, ``download_url``). See :func:`~hindsight_recall.transfer.export`.

        :param bank_id: the bank.
        :param documents: only these documents (no observations, links or settings then).
        :param bank_config: carry the profile and settings.
        :param kind: the transfer's type as its operation shows it.
        """
        validate_bank_id(bank_id)
        with database_errors("export"):
            return await transfer.export(self._ingestor, bank_id, wanted=set(documents) if documents else None,
                                         bank_config=bank_config, kind=kind)

    async def restore(self, archive: Path, *, record_on: str, target: str | None = None, data: bool = True,
                      config: bool = True) -> tuple[uuid.UUID, dict[str, Any]]:
        """Restore a whole-bank archive into a new bank, checked whole first and written in one
        transaction; returns the transfer's id and result. See :func:`~hindsight_recall.transfer.restore`.

        :param archive: the archive's path.
        :param record_on: a bank the transfer is recorded against besides the target (when it exists).
        :param target: the new bank (default: the archive's source bank).
        :param data: restore the memories; :param config: restore the profile and settings.
        """
        with database_errors("import"):
            return await transfer.restore(self._ingestor, archive, record_on=validate_bank_id(record_on),
                                          target=target, data=data, config=config)

    async def merge(self, bank_id: str, archive: Path, on_conflict: str = "skip"
                    ) -> tuple[uuid.UUID, dict[str, Any]]:
        """Fold an archive's documents into a bank in one transaction (see :func:`~hindsight_recall.transfer.merge`).

        :param bank_id: the bank (created when missing).
        :param archive: the archive's path.
        :param on_conflict: ``skip``, ``replace`` or ``new-id`` for a document the bank already holds.
        """
        with database_errors("import"):
            return await transfer.merge(self._ingestor, archive, validate_bank_id(bank_id), on_conflict)

    async def clone(self, bank_id: str, target: str, *, data: bool = True,
                    config: bool = True) -> tuple[uuid.UUID, dict[str, Any]]:
        """Copy a bank into a new one: an export and a restore in one transaction, nothing leaving the server.

        :param bank_id: the bank copied (the clone is recorded against it).
        :param target: the new bank.
        :param data: copy the memories; :param config: copy the profile and settings.
        """
        with database_errors("clone"):
            return await transfer.clone(self._ingestor, validate_bank_id(bank_id), target, data=data,
                                        config=config)
