"""Bank templates: a bank's settings and directives read out together, and applied to a bank together.

Driver errors of these calls reach the caller as they are: the service tells a write that lost to another
(409) from a lost connection (503) by them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BankNotFound
from ..store import banks, directives
from ..store.transfer import bank_row
from ._part import Part


class Templates(Part):
    """Read a bank's template and apply one to a bank."""

    async def read(self, bank_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The bank as an export carries it (name, mission, disposition, ``config``: its overrides) and its
        directives, highest priority first (at most a template's worth).

        :raises BankNotFound: no such bank.
        """
        async with self._db.connect() as conn:
            row = await bank_row(conn, bank_id)
            if row is None:
                raise BankNotFound(bank_id)
            rules, _ = await directives.page(conn, bank_id, tags=None, tags_match="any", active_only=False,
                                             limit=directives.MAX_TEMPLATE, offset=0)
            return row, rules

    async def apply(self, bank_id: str, *, profile: Mapping[str, Any], config: Mapping[str, Any],
                    rules: Sequence[Mapping[str, Any]], dry_run: bool = False) -> dict[str, list[str]]:
        """Merge ``profile`` and ``config`` into the bank's (created if needed) and store ``rules``, a directive
        with a stored one's name replacing it, in one transaction; the names ``created`` and ``updated``.

        :param dry_run: only say what would be created and updated.
        :raises InvalidRequest: a value the bank's profile or settings refuse.
        """
        async with self._db.connect() as conn:
            existing = await directives.ids_by_name(conn, bank_id)
            changed = {"created": [r["name"] for r in rules if r["name"] not in existing],
                       "updated": [r["name"] for r in rules if r["name"] in existing]}
            if dry_run:
                return changed
            await banks.set_bank_profile(conn, bank_id, profile)
            if config:
                await banks.set_bank_config(conn, bank_id, dict(config))
            for rule in rules:
                if rule["name"] in existing:
                    await directives.update(conn, bank_id, existing[rule["name"]], rule)
                else:
                    await directives.create(conn, bank_id, rule)
            return changed
