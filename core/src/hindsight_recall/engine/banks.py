"""Banks as a whole: the list, a bank's profile and setting overrides, its links and ingestion over time.

Driver errors of these calls reach the caller as they are: the service tells a write that lost to another
(409) from a lost connection (503) by them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import BankNotFound
from ..recall import length_prior
from ..retain.options import extraction_options
from ..store import bank_reads
from ..store import banks as store
from ..store.bank_reads import PERIODS as PERIODS  # re-exported: the periods a time series covers
from ..store.bank_reads import SERIES_FIELDS as SERIES_FIELDS
from ..store.banks import validate_bank_id as validate_bank_id  # re-exported: faces check ids they are given
from ._part import Part

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from ..settings import Settings
    from ..store.db import Database


class Banks(Part):
    """List banks; read and change a bank's profile and settings; read what it holds over time.

    :param settings: the process's settings, which a bank's overrides are checked over.
    """

    def __init__(self, db: Database, settings: Settings) -> None:
        super().__init__(db)
        self._settings = settings

    async def page(self, *, search: str | None, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of banks, most recently written first, with their profiles and counts, and how many match
        ``search`` (a substring of the id or name) in all."""
        async with self._db.connect() as conn:
            return await bank_reads.bank_page(conn, search=search, limit=limit, offset=offset)

    async def exists(self, bank_id: str) -> bool:
        """Whether the bank exists."""
        async with self._db.connect() as conn:
            return await store.bank_config(conn, bank_id) is not None

    async def profile(self, bank_id: str) -> dict[str, Any] | None:
        """The bank's name, mission and disposition (defaults filled in), or ``None`` for no bank."""
        async with self._db.connect() as conn:
            return await store.bank_profile(conn, bank_id)

    async def set_profile(self, bank_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` (name, mission, disposition traits) into the profile, creating the bank if needed;
        the profile after."""
        async with self._db.connect() as conn:
            return await store.set_bank_profile(conn, bank_id, changes)

    async def write(self, bank_id: str, profile: Mapping[str, Any], config: Mapping[str, Any], *,
                    create: bool) -> dict[str, Any]:
        """Change the bank's profile and setting overrides together; the profile after.

        :param create: create the bank if needed; else :class:`~hindsight_recall.errors.BankNotFound`.
        """
        async with self._db.connect() as conn:
            if not create and await store.bank_config(conn, bank_id) is None:
                raise BankNotFound(bank_id)
            written = await store.set_bank_profile(conn, bank_id, profile)
            if config:
                await self._set_config(conn, bank_id, config)
            return written

    async def add_background(self, bank_id: str, text: str) -> dict[str, Any]:
        """Append ``text`` to the bank's mission as a paragraph of its own (the bank is created if needed);
        the profile after."""
        async with self._db.connect() as conn:
            before = ((await store.bank_profile(conn, bank_id)) or {}).get("mission") or ""
            mission = f"{before}\n\n{text}" if before.strip() else text
            return await store.set_bank_profile(conn, bank_id, {"mission": mission})

    async def config(self, bank_id: str) -> dict[str, Any] | None:
        """The bank's setting overrides, or ``None`` for no bank."""
        async with self._db.connect() as conn:
            return await store.bank_config(conn, bank_id)

    async def configure(self, bank_id: str, values: Mapping[str, Any], *, create: bool = True) -> dict[str, Any]:
        """Merge setting overrides (a ``None`` value removes one); the overrides after.

        :param create: create the bank if needed; else :class:`~hindsight_recall.errors.BankNotFound`.
        """
        async with self._db.connect() as conn:
            if not create and await store.bank_config(conn, bank_id) is None:
                raise BankNotFound(bank_id)
            return await self._set_config(conn, bank_id, values)

    async def _set_config(self, conn: AsyncConnection, bank_id: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """Store overrides, refused (400, nothing written) when with the process's settings they would make
        every retain of the bank fail: ``custom`` extraction without instructions."""
        stored = await store.set_bank_config(conn, bank_id, dict(values))
        extraction_options(self._settings, stored)
        return stored

    async def reset_config(self, bank_id: str) -> dict[str, Any]:
        """Remove every override: the bank follows the server's settings again.

        :raises BankNotFound: no such bank.
        """
        async with self._db.connect() as conn:
            overrides = await store.bank_config(conn, bank_id)
            if overrides is None:
                raise BankNotFound(bank_id)
            return await store.set_bank_config(conn, bank_id, dict.fromkeys(overrides))

    async def activity(self, bank_id: str) -> dict[str, Any]:
        """The bank's links by type (``links_by_type``) and when a memory was last stored or changed
        (``last_write``, ``None`` for an empty bank)."""
        async with self._db.connect() as conn:
            return {"links_by_type": await bank_reads.link_counts(conn, bank_id),
                    "last_write": await bank_reads.last_write(conn, bank_id)}

    async def timeseries(self, bank_id: str, period: str, time_field: str,
                         now: datetime | None = None) -> list[dict[str, Any]]:
        """Memories stored per UTC bucket and fact type over ``period`` (a key of :data:`PERIODS`) back from
        ``now``, bucketed on ``time_field`` (one of :data:`SERIES_FIELDS`).

        :raises BankNotFound: no such bank.
        """
        async with self._db.connect() as conn:
            if await store.bank_config(conn, bank_id) is None:
                raise BankNotFound(bank_id)
            return await bank_reads.memories_timeseries(conn, bank_id, period, time_field, now or datetime.now(UTC))

    async def length_prior(self, bank_id: str, fact_types: Iterable[str]) -> dict[str, Any] | None:
        """The keyword length prior a recall of ``fact_types`` applies in the bank (``b``, the spread and mean
        of its lengths, how many memories), from the statistics every write keeps; ``None`` with no memories."""
        async with self._db.connect() as conn:
            state = await store.bank_state(conn, bank_id)
        lengths = state.lengths if state is not None else {}
        return length_prior.describe(length_prior.for_fact_types(lengths, fact_types))
