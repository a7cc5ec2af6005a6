"""The bank a retain writes into: found, locked and measured in one statement (created when missing).

Before it writes a row, a retain needs the bank row key-share locked to the end of the transaction (a
:func:`~hindsight_recall.store.banks.delete_bank` then waits for the write), the bank's index placement,
how many memories it holds (does it reach ``VECTOR_INDEX_MIN_ROWS``; are links found through its HNSW
indexes) and how many of the batch's ids it holds already (none: nothing of theirs to count out or
clear first). One statement reads them all; on Citus it is one command to the bank's worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import InvalidRequest
from ..store import banks
from ..types import Placement

_READ = text(
    "SELECT b.ann_slot, b.indexed, "
    "(SELECT count(*) FROM (SELECT 1 FROM memory_units u WHERE u.bank_id = :bank LIMIT :upto) t) AS rows, "
    "(SELECT count(*) FROM memory_units u WHERE u.bank_id = :bank AND u.id = ANY(:ids)) AS present "
    "FROM banks b WHERE b.bank_id = :bank FOR KEY SHARE OF b"
)


@dataclass(frozen=True)
class OpenBank:
    """The bank as this retain found it."""

    #: the retain created the bank (it holds nothing yet)
    created: bool
    placement: Placement
    #: the bank's memories before the write, counted up to the ``upto`` of :func:`open_bank`
    rows: int
    #: how many of the batch's ids the bank holds already (rewritten, not added)
    present: int

    def total_after(self, written: int) -> int:
        """The bank's memories once ``written`` rows are written: exact when the count stopped below its
        bound, else at least the bound."""
        return self.rows + written - self.present


async def open_bank(conn: AsyncConnection, bank_id: str, ids: Sequence[uuid.UUID], upto: int) -> OpenBank:
    """Lock the bank (creating it when missing) and read what the retain needs of it.

    :param conn: the retain transaction, holding the bank's advisory lock.
    :param bank_id: the bank.
    :param ids: the row ids the retain writes.
    :param upto: count the bank's memories up to this many (a bound keeps the read cheap on a big bank).
    """
    params = {"bank": bank_id, "ids": list(ids), "upto": max(int(upto), 1)}
    row = (await conn.execute(_READ, params)).first()
    if row is None:
        _, created = await banks.ensure_bank(conn, bank_id)
        if created:
            return OpenBank(created=True, placement=Placement(), rows=0, present=0)
        # another call created it meanwhile; ensure_bank holds its key-share lock now
        row = (await conn.execute(_READ, params)).first()
        if row is None:
            raise InvalidRequest("bank_id", f"bank {bank_id!r} was deleted while this call wrote to it; retry",
                                 status=409)
    return OpenBank(created=False, placement=Placement(None if row.ann_slot is None else int(row.ann_slot),
                                                       bool(row.indexed)),
                    rows=int(row.rows), present=int(row.present))
