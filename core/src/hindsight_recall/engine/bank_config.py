"""A bank's setting overrides: the settings a bank holds over the engine's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..store import banks
from ._part import Part


class BankConfig(Part):
    """Read and change a bank's overrides."""

    async def get(self, bank_id: str) -> dict[str, Any] | None:
        """The bank's overrides, or ``None`` when the bank does not exist.

        :param bank_id: the bank.
        """
        async with self._transaction("read bank config") as conn:
            return await banks.bank_config(conn, bank_id)

    async def update(self, bank_id: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and merge overrides (a ``None`` value removes one); the bank is created if needed. Returns
        the overrides now stored.

        :param bank_id: the bank.
        :param values: setting name -> value, bank-configurable settings only.
        :raises InvalidRequest: a setting that is not bank-configurable, or a value it refuses.
        """
        async with self._transaction("update bank config") as conn:
            return await banks.set_bank_config(conn, bank_id, dict(values))
