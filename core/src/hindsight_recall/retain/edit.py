"""Editing one stored memory, invalidating it or restoring it, each in one retain transaction.

An edit is a retain of the same id with some fields changed: the text is embedded again and the
memory's links rebuilt, as retaining it so would have done; links other memories made to it for its
old text or dates are dropped. An invalidated memory leaves the bank for
:mod:`~hindsight_recall.store.invalidated` (its links with it); restoring it retains it again, with
any edit made at the same time. The stored memory is read under the bank's lock, so two edits of one
memory never lose each other's changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from ..errors import InvalidRequest, MemoryNotFound
from ..store import banks, invalidated, memory_edit
from ..types import Memory
from ._transaction import Transaction

State = Literal["valid", "invalidated"]


async def update_memory(
    tx: Transaction, bank_id: str, memory_id: str, edit: Callable[[Memory], Memory], *,
    state: State | None = None, reason: str | None = None,
) -> State:
    """Apply ``edit`` to the memory in ``tx`` and set its state; returns the state it ends in.

    :param edit: the memory as stored -> the memory as it should be (same id).
    :param state: ``invalidated`` takes it out of the bank, ``valid`` restores it; ``None`` keeps its state.
    :param reason: why it was invalidated (kept with it; an invalidated memory edited again keeps its reason
        unless a new one is given).
    :raises MemoryNotFound: the bank has the memory neither stored nor invalidated.
    :raises InvalidRequest: the memory is an observation (derived from others: edit its sources).
    """
    conn = tx.conn
    stored = await memory_edit.stored_memory(conn, bank_id, memory_id)
    retired = None if stored is not None else await invalidated.find(conn, bank_id, memory_id)
    if retired is not None:
        stored = invalidated.as_memory(retired)
    if stored is None:
        raise MemoryNotFound(bank_id, memory_id)
    if stored.type == "observation":
        raise InvalidRequest("memory_id", "observations are derived from other memories and cannot be edited; "
                                          "edit their sources", status=400)
    edited = edit(stored)
    if edited.id != memory_id:
        raise InvalidRequest("memory_id", "an edit cannot change a memory's id", status=400)
    if state == "invalidated" or (retired is not None and state is None):
        kept_reason = reason if retired is None or reason else retired["reason"]
        await invalidated.keep(conn, bank_id, edited, kept_reason)
        await banks.forget(conn, bank_id, [memory_id], tx.ingestor.backend)
        return "invalidated"
    await tx.write(bank_id, [edited])
    if retired is not None:
        await invalidated.take(conn, bank_id, memory_id)
    elif _placed(edited) != _placed(stored):
        await memory_edit.drop_links_into(conn, bank_id, memory_id)
    return "valid"


def _placed(memory: Memory) -> tuple[object, ...]:
    """What links into a memory were chosen for: its text and dates."""
    return memory.text, memory.occurred_start, memory.occurred_end, memory.mentioned_at
