"""Stable row ids: a bank's memory and entity ids hashed (uuid5) from the names callers give them.

Retain writes rows under these ids and migration 7 re-ids old rows with them, so both read them here.
"""

from __future__ import annotations

import uuid

_NAMESPACE = uuid.UUID("6f1c7a52-3d55-4c1e-9a0f-2f6b7f1d9e11")

#: characters that make a joined name ambiguous; names holding one are length-prefixed instead
_SEPARATORS = frozenset("\x1e\x1f")


def id_name(kind: str, bank_id: str, key: str) -> str:
    """The name hashed into a row id: unambiguous for every bank and key.

    Names free of the separators keep the joined form ids always had, so stored rows keep their ids;
    any other name is ``\\x1e`` plus a length-prefixed encoding, which no joined form starts with.
    """
    if _SEPARATORS.isdisjoint(bank_id) and _SEPARATORS.isdisjoint(key):
        return f"{bank_id}\x1f{key}" if kind == "unit" else f"{bank_id}\x1f{kind}\x1f{key}"
    return "\x1e" + "".join(f"{len(part)}:{part}" for part in (kind, bank_id, key))


def unit_id(bank_id: str, memory_id: str) -> uuid.UUID:
    """The stable row id of a caller's memory id within a bank."""
    return uuid.uuid5(_NAMESPACE, id_name("unit", bank_id, memory_id))


def entity_id(bank_id: str, name: str) -> uuid.UUID:
    """Entities are unique per bank, case-insensitively."""
    return uuid.uuid5(_NAMESPACE, id_name("entity", bank_id, name.casefold()))
