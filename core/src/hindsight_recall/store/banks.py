"""Bank rows: creation, validation and per-bank setting overrides."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import InvalidRequest
from ..limits import unicode_problem
from ..protocols import TextSearchBackend
from ..settings import BankSettings
from ..types import Placement
from . import length_stats, term_stats
from .driver import fetch
from .schema import of_document

MAX_BANK_ID = 256


def validate_bank_id(bank_id: Any) -> str:
    """A bank id is a non-empty string without NUL bytes, at most 256 characters."""
    if not isinstance(bank_id, str) or not bank_id.strip():
        raise InvalidRequest("bank_id", "must be a non-empty string")
    if "\x00" in bank_id or len(bank_id) > MAX_BANK_ID:
        raise InvalidRequest("bank_id", f"must not contain NUL bytes or exceed {MAX_BANK_ID} characters")
    if unicode_problem(bank_id):
        raise InvalidRequest("bank_id", f"{unicode_problem(bank_id)}")
    return bank_id


#: How often :func:`ensure_bank` tries again when the bank it found was deleted under it.
ENSURE_ATTEMPTS = 5


def validate_memory_ids(ids: Any) -> list[str]:
    """A memory id or an iterable of them, as the strings they were retained with."""
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, Iterable) or isinstance(ids, bytes | Mapping):
        raise InvalidRequest("ids", f"expected a memory id or a list of memory ids, got {type(ids).__name__}")
    wanted = list(ids)
    for i, value in enumerate(wanted):
        if not isinstance(value, str):
            raise InvalidRequest(f"ids[{i}]", f"expected a string, got {type(value).__name__}")
        if problem := unicode_problem(value):
            raise InvalidRequest(f"ids[{i}]", problem)
    return wanted


async def ensure_bank(conn: AsyncConnection, bank_id: str) -> tuple[uuid.UUID, bool]:
    """Return the bank's internal id, creating the bank if needed; the flag says it was created.

    The bank row stays key-share locked to the end of the transaction, so a :func:`delete_bank`
    waits for this write, or this write waits for the delete and then creates the bank anew: the rows
    written next never reference a deleted bank.
    """
    for _ in range(ENSURE_ATTEMPTS):
        created = await conn.scalar(
            text("INSERT INTO banks (bank_id, internal_id) VALUES (:bank, :iid) ON CONFLICT (bank_id) DO NOTHING "
                 "RETURNING internal_id"),
            {"bank": bank_id, "iid": uuid.uuid4()},
        )
        if created is not None:
            return created, True
        existing = await conn.scalar(
            text("SELECT internal_id FROM banks WHERE bank_id = :bank FOR KEY SHARE"), {"bank": bank_id}
        )
        if existing is not None:
            return existing, False
    raise InvalidRequest("bank_id", f"bank {bank_id!r} was deleted {ENSURE_ATTEMPTS} times while this call wrote "
                                    "to it; retry once the deletes are done", status=409)


async def bank_config(conn: AsyncConnection, bank_id: str) -> dict[str, Any] | None:
    """The bank's stored overrides, or ``None`` when the bank does not exist."""
    row = await conn.execute(text("SELECT config FROM banks WHERE bank_id = :bank"), {"bank": bank_id})
    found = row.first()
    return None if found is None else dict(found.config or {})


@dataclass(frozen=True)
class BankState:
    """What a recall reads of its bank before the arms run."""

    #: the bank's setting overrides
    config: dict[str, Any]
    #: whether the bank is searched through HNSW indexes (its own slot's, or the shared ones)
    indexed: bool
    #: the bank's index slot (:mod:`hindsight_recall.store.ann`), if it has one
    ann_slot: int | None
    #: fact type -> (memories, sum of lengths, sum of squared lengths) (:mod:`.length_stats`)
    lengths: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)


async def bank_state(conn: AsyncConnection, bank_id: str) -> BankState | None:
    """The bank's overrides, how its vectors are indexed and its length statistics, in one read;
    ``None`` for an unknown bank."""
    # read at every recall: through psycopg directly (see driver.fetch)
    _, rows = await fetch(conn, f"SELECT config, indexed, ann_slot, {length_stats.BANK_LENGTHS} FROM banks "
                                "WHERE bank_id = :bank", {"bank": bank_id})
    if not rows:
        return None
    config, indexed, ann_slot, lengths = rows[0]
    where = Placement(ann_slot, bool(indexed))
    return BankState(dict(config or {}), bool(where.predicate()), where.slot, length_stats.lengths_of(lengths))


async def set_bank_config(conn: AsyncConnection, bank_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """Validate and merge overrides into ``banks.config``; ``None`` values remove a key."""
    unknown = sorted(set(values) - set(BankSettings.model_fields))
    if unknown:
        raise InvalidRequest(unknown[0], f"is not bank-configurable (choices: {', '.join(BankSettings.model_fields)})")
    current = await bank_config(conn, bank_id)
    if current is None:
        await ensure_bank(conn, bank_id)
        current = {}
    merged = {**current, **{k: v for k, v in values.items() if v is not None}}
    for key in (k for k, v in values.items() if v is None):
        merged.pop(key, None)
    try:
        checked = BankSettings(**merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"]) or "config"
        raise InvalidRequest(name, f"{err['msg']} (got {err.get('input')!r})") from None
    stored = {k: getattr(checked, k) for k in merged}
    await conn.execute(text("UPDATE banks SET config = CAST(:config AS jsonb) WHERE bank_id = :bank"),
                       {"config": json.dumps(stored), "bank": bank_id})
    return stored


#: the disposition a bank has until one is set (upstream's default)
DEFAULT_DISPOSITION = {"skepticism": 3, "literalism": 3, "empathy": 3}
#: what a profile holds; ``background`` is upstream's older name for the mission
PROFILE_FIELDS = ("name", "mission", "disposition")
#: the longest name or mission accepted, in characters
MAX_PROFILE_TEXT = 20_000


def bank_profile_of(bank_id: str, stored: Mapping[str, Any], updated_at: Any) -> dict[str, Any]:
    """A stored profile with the defaults filled in (as :func:`bank_profile` answers it)."""
    mission = stored.get("mission") or ""
    return {"bank_id": bank_id, "name": stored.get("name") or bank_id, "mission": mission, "background": mission,
            "disposition": {**DEFAULT_DISPOSITION, **(stored.get("disposition") or {})},
            "updated_at": updated_at.isoformat() if updated_at else None}


async def bank_profile(conn: AsyncConnection, bank_id: str) -> dict[str, Any] | None:
    """The bank's name, mission and disposition (defaults filled in), or ``None`` for an unknown bank."""
    row = (await conn.execute(text("SELECT profile, updated_at FROM banks WHERE bank_id = :bank"),
                              {"bank": bank_id})).first()
    return None if row is None else bank_profile_of(bank_id, row.profile or {}, row.updated_at)


def _check_profile(changes: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(changes) - set(PROFILE_FIELDS))
    if unknown:
        raise InvalidRequest(unknown[0], f"is not a profile field (choices: {', '.join(PROFILE_FIELDS)})")
    checked: dict[str, Any] = {}
    for key in ("name", "mission"):
        value = changes.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or len(value) > MAX_PROFILE_TEXT or unicode_problem(value) or "\x00" in value:
            raise InvalidRequest(key, f"must be text without NUL bytes, at most {MAX_PROFILE_TEXT} characters")
        checked[key] = value
    if changes.get("disposition") is not None:
        traits = dict(changes["disposition"])
        for trait, value in traits.items():
            if trait not in DEFAULT_DISPOSITION or not isinstance(value, int) or isinstance(value, bool) \
                    or not 1 <= value <= 5:
                raise InvalidRequest(f"disposition.{trait}", "must be one of skepticism, literalism, empathy, "
                                                             "each an integer from 1 to 5")
        checked["disposition"] = traits
    return checked


async def set_bank_profile(conn: AsyncConnection, bank_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``changes`` (name, mission, disposition traits) into the profile, creating the bank if
    needed; ``None`` values leave a field as it is. Returns the profile as :func:`bank_profile` does."""
    checked = _check_profile(changes)
    await ensure_bank(conn, bank_id)
    if "disposition" in checked:  # traits merge one level down, so one trait can change alone
        current = (await bank_profile(conn, bank_id) or {}).get("disposition", DEFAULT_DISPOSITION)
        checked["disposition"] = {**current, **checked["disposition"]}
    row = (await conn.execute(text(
        "UPDATE banks SET profile = profile || CAST(:changes AS jsonb), updated_at = now() WHERE bank_id = :bank "
        "RETURNING profile, updated_at"), {"changes": json.dumps(checked), "bank": bank_id})).one()
    return bank_profile_of(bank_id, row.profile, row.updated_at)


async def delete_bank(conn: AsyncConnection, bank_id: str) -> bool:
    """Remove a bank with everything in it (rows only: no DDL); False if it did not exist."""
    # Locking the bank row first waits for retains in flight (they hold a key-share lock on it), so
    # no link can be written after its memories' links are deleted. Links, observation sources and
    # queued operations carry no foreign keys.
    internal_id = await conn.scalar(
        text("SELECT internal_id FROM banks WHERE bank_id = :bank FOR UPDATE"), {"bank": bank_id}
    )
    if internal_id is None:
        return False
    for table in ("memory_links", "observation_sources", "operations"):
        await conn.execute(text(f"DELETE FROM {table} WHERE bank_id = :bank"), {"bank": bank_id})
    # its aliases go with it (by cascade); every process's alias map is told at commit
    if await conn.scalar(text("SELECT EXISTS (SELECT 1 FROM bank_aliases WHERE bank_id = :bank)"), {"bank": bank_id}):
        await conn.execute(text("SELECT pg_notify('hindsight_recall_aliases', :bank)"), {"bank": bank_id[:7000]})
    await length_stats.delete_bank(conn, bank_id)
    await term_stats.delete_bank(conn, bank_id)
    await conn.execute(text("DELETE FROM banks WHERE bank_id = :bank"), {"bank": bank_id})
    return True


async def list_banks(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every bank with its memory count and creation time, by name."""
    rows = await conn.execute(text(
        "SELECT b.bank_id, b.created_at, (SELECT count(*) FROM memory_units u WHERE u.bank_id = b.bank_id) AS memories "
        "FROM banks b ORDER BY b.bank_id"
    ))
    return [{"bank_id": r.bank_id, "memories": r.memories, "created_at": r.created_at.isoformat()} for r in rows]


async def bank_stats(conn: AsyncConnection, bank_id: str) -> dict[str, Any] | None:
    """Counts of what a bank holds, or ``None`` when the bank does not exist."""
    bank = (await conn.execute(text("SELECT created_at, config FROM banks WHERE bank_id = :bank"),
                               {"bank": bank_id})).first()
    if bank is None:
        return None
    params = {"bank": bank_id}
    by_type = {r.fact_type: r.n for r in await conn.execute(text(
        "SELECT fact_type, count(*) AS n FROM memory_units WHERE bank_id = :bank GROUP BY fact_type"
    ), params)}
    counts = (await conn.execute(text(
        "SELECT (SELECT count(*) FROM entities WHERE bank_id = :bank) AS entities, "
        "(SELECT count(*) FROM chunks WHERE bank_id = :bank) AS chunks, "
        "(SELECT count(DISTINCT document_id) FROM memory_units WHERE bank_id = :bank) AS documents, "
        "(SELECT count(*) FROM memory_links WHERE bank_id = :bank) AS links"
    ), params)).one()
    return {
        "bank_id": bank_id, "created_at": bank.created_at.isoformat(), "memories": sum(by_type.values()),
        "by_type": by_type, "entities": counts.entities, "chunks": counts.chunks, "documents": counts.documents,
        "links": counts.links, "config": dict(bank.config or {}),
    }


async def forget(conn: AsyncConnection, bank_id: str, external_ids: Sequence[str],
                 backend: TextSearchBackend | None = None) -> int:
    """Remove a bank's memories by caller id with their links, entity pairs and observation sources.

    Chunks, entities and documents no other memory of the bank uses go too; observations citing a
    removed memory lose it from their sources. Returns how many memories were removed.

    :param backend: the text-search backend, whose term statistics (if it keeps them) lose the memories.
    """
    # the same bank-row lock as delete_bank: no retain in flight can link to a removed memory
    found = await conn.scalar(text("SELECT 1 FROM banks WHERE bank_id = :bank FOR UPDATE"), {"bank": bank_id})
    if found is None or not external_ids:
        return 0
    ids = list((await conn.execute(text(
        "SELECT id FROM memory_units WHERE bank_id = :bank AND external_id = ANY(:ids)"
    ), {"bank": bank_id, "ids": list(external_ids)})).scalars())
    if not ids:
        return 0
    params = {"bank": bank_id, "ids": ids}
    entity_ids = list((await conn.execute(text(
        "SELECT DISTINCT entity_id FROM unit_entities WHERE bank_id = :bank AND unit_id = ANY(:ids)"
    ), params)).scalars())
    for statement in (  # links and observation sources carry no foreign keys; each column has its index
        "DELETE FROM memory_links WHERE bank_id = :bank AND from_unit_id = ANY(:ids)",
        "DELETE FROM memory_links WHERE bank_id = :bank AND to_unit_id = ANY(:ids)",
        "DELETE FROM observation_sources WHERE bank_id = :bank AND observation_id = ANY(:ids)",
        "DELETE FROM observation_sources WHERE bank_id = :bank AND source_id = ANY(:ids)",
        "UPDATE memory_units SET source_memory_ids = nullif(ARRAY(SELECT s FROM unnest(source_memory_ids) AS s "
        "WHERE s <> ALL(CAST(:ids AS uuid[]))), '{}'), updated_at = now() "
        "WHERE bank_id = :bank AND source_memory_ids && CAST(:ids AS uuid[])",
    ):
        await conn.execute(text(statement), params)
    await length_stats.count_out(conn, backend, bank_id, ids)
    await term_stats.count_out(conn, backend, bank_id, ids)
    removed = (await conn.execute(text(
        "DELETE FROM memory_units WHERE bank_id = :bank AND id = ANY(:ids) RETURNING chunk_id, document_id"
    ), params)).all()
    chunk_ids = [r.chunk_id for r in removed if r.chunk_id]
    await conn.execute(text(  # a document is its memories: without any, it is gone
        f"DELETE FROM documents d WHERE d.bank_id = :bank AND d.document_id = ANY(:docs) AND NOT EXISTS "
        f"(SELECT 1 FROM memory_units u WHERE u.bank_id = :bank AND {of_document('u', 'd.document_id')})"
    ), {"bank": bank_id, "docs": sorted({r.document_id for r in removed if r.document_id})})
    await conn.execute(text(
        "DELETE FROM chunks c WHERE c.bank_id = :bank AND c.chunk_id = ANY(:chunks) "
        "AND NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = :bank AND u.chunk_id = c.chunk_id)"
    ), {"bank": bank_id, "chunks": sorted(set(chunk_ids))})
    await conn.execute(text(
        "DELETE FROM entities e WHERE e.bank_id = :bank AND e.id = ANY(:eids) "
        "AND NOT EXISTS (SELECT 1 FROM unit_entities ue WHERE ue.bank_id = :bank AND ue.entity_id = e.id)"
    ), {"bank": bank_id, "eids": entity_ids})
    return len(ids)
