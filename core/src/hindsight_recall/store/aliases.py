"""Bank aliases: extra ids that reach a bank. Routing only: no row is ever stored under an alias.

An alias names exactly one bank and never another alias, so there are no chains or loops to follow;
a name that is a bank is never an alias (a real bank wins), and one alias belongs to one bank. The
table is keyed by (bank, alias) so that Citus can keep it beside its bank; the uniqueness of an alias
across banks is kept by the writers, which take an advisory lock on the name first. Every change
sends a notification on :data:`CHANNEL` at commit, so each process's cached map follows at once.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import BankNotFound, InvalidRequest
from .banks import validate_bank_id

#: the notification channel every alias change is announced on (the payload is the alias)
CHANNEL = "hindsight_recall_aliases"


def _lock_key(alias: str) -> int:
    digest = hashlib.blake2b(b"hindsight_recall.alias\0" + alias.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


async def resolve(conn: AsyncConnection, bank_id: str) -> str:
    """The bank ``bank_id`` names: itself when it is a bank or nothing, its bank when it is an alias.

    The bank is asked first: on Citus that reads only the bank's own shard, so a bank answers while
    another worker is away; only a name that is no bank is looked for among every bank's aliases.
    """
    if await conn.scalar(text("SELECT 1 FROM banks WHERE bank_id = :id"), {"id": bank_id}) is not None:
        return bank_id
    found = await conn.scalar(text("SELECT bank_id FROM bank_aliases WHERE alias = :id LIMIT 1"), {"id": bank_id})
    return str(found) if found is not None else bank_id


async def alias_map(conn: AsyncConnection) -> dict[str, str]:
    """Every alias that routes (its name is not also a bank) -> its bank: what a process caches.

    Two statements, not one with ``NOT EXISTS``: Citus cannot join the aliases to the banks they name
    (the join is not on the aliases' distribution column), and refuses the single statement.
    """
    names = {r.alias: r.bank_id for r in await conn.execute(text("SELECT alias, bank_id FROM bank_aliases"))}
    if not names:
        return names
    banks = await conn.execute(text("SELECT bank_id FROM banks WHERE bank_id = ANY(:names)"), {"names": list(names)})
    for row in banks:
        names.pop(row.bank_id, None)
    return names


async def list_aliases(conn: AsyncConnection, bank_id: str) -> list[dict[str, Any]]:
    """The bank's aliases, the primary one first, then oldest first."""
    rows = await conn.execute(text(
        "SELECT alias, is_primary FROM bank_aliases WHERE bank_id = :bank ORDER BY is_primary DESC, created_at, alias"
    ), {"bank": bank_id})
    return [{"alias": r.alias, "primary": bool(r.is_primary)} for r in rows]


async def require_bank(conn: AsyncConnection, bank_id: str) -> None:
    if await conn.scalar(text("SELECT 1 FROM banks WHERE bank_id = :bank FOR KEY SHARE"), {"bank": bank_id}) is None:
        raise BankNotFound(bank_id)


async def create_alias(conn: AsyncConnection, bank_id: str, alias: str, *, primary: bool = False) -> None:
    """Make ``alias`` another id of ``bank_id``: 400 for a bad name or the bank's own id, 404 for no bank,
    409 when the name is already a bank or an alias (of this bank or another)."""
    validate_bank_id(alias)
    if alias == bank_id:
        raise InvalidRequest("alias", "a bank cannot be an alias of itself", status=400)
    await require_bank(conn, bank_id)
    await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(alias)})
    taken = await conn.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM banks WHERE bank_id = :a) OR EXISTS (SELECT 1 FROM bank_aliases WHERE alias = :a)"
    ), {"a": alias})
    if taken:
        raise InvalidRequest("alias", f"{alias!r} is already taken by another bank or alias", status=409)
    await conn.execute(text("INSERT INTO bank_aliases (bank_id, alias) VALUES (:bank, :alias)"),
                       {"bank": bank_id, "alias": alias})
    if primary:
        await set_primary(conn, bank_id, alias, True)
    await _announce(conn, alias)


async def set_primary(conn: AsyncConnection, bank_id: str, alias: str, primary: bool) -> bool:
    """Show ``alias`` in place of the bank's id (demoting the one shown before), or stop showing it.
    Display only: routing does not change. False when the bank has no such alias."""
    await require_bank(conn, bank_id)
    owned = await conn.scalar(text("SELECT 1 FROM bank_aliases WHERE bank_id = :bank AND alias = :alias FOR UPDATE"),
                              {"bank": bank_id, "alias": alias})
    if owned is None:
        return False
    if primary:  # demote first: the one-primary index forbids two at any moment
        await conn.execute(text(
            "UPDATE bank_aliases SET is_primary = false WHERE bank_id = :bank AND is_primary AND alias <> :alias"
        ), {"bank": bank_id, "alias": alias})
    await conn.execute(text("UPDATE bank_aliases SET is_primary = :p WHERE bank_id = :bank AND alias = :alias"),
                       {"bank": bank_id, "alias": alias, "p": primary})
    return True


async def delete_alias(conn: AsyncConnection, bank_id: str, alias: str) -> bool:
    """Stop ``alias`` reaching ``bank_id`` (only that bank's alias: no detaching another's). False when
    the bank has no such alias."""
    await require_bank(conn, bank_id)
    gone = await conn.scalar(text("DELETE FROM bank_aliases WHERE bank_id = :bank AND alias = :alias RETURNING alias"),
                             {"bank": bank_id, "alias": alias})
    if gone is not None:
        await _announce(conn, alias)
    return gone is not None


async def primary_alias(conn: AsyncConnection, bank_id: str) -> str | None:
    """The alias the bank is shown under, if one is primary."""
    found = await conn.scalar(text("SELECT alias FROM bank_aliases WHERE bank_id = :bank AND is_primary"),
                              {"bank": bank_id})
    return None if found is None else str(found)


async def _announce(conn: AsyncConnection, alias: str) -> None:
    """Tell every process (at commit) that the alias map changed."""
    await conn.execute(text("SELECT pg_notify(:channel, :alias)"), {"channel": CHANNEL, "alias": alias[:7000]})
