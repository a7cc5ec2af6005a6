"""Citus: every bank on one shard.

Two idempotent steps run after the numbered migrations:

- :func:`key_by_bank` (every database): the tables that join memories (entity pairs, links, observation
  sources) carry their bank, so each statement can name the bank of every table it reads.
- :func:`distribute` (only when the database has the ``citus`` extension): every bank-keyed table is
  distributed by ``bank_id`` in one colocation group, so all of a bank's rows live on one shard and a
  statement that names its bank runs on one worker; the two small bookkeeping tables become reference
  tables. Keys and foreign keys gain ``bank_id`` (Citus needs the distribution column in each). On a
  database that already holds memories, ``create_distributed_table`` moves the rows onto the shards.

Both checks, whether the database has Citus and whether every table is distributed, are made once per
process and store: a later engine of the process (each call of the blocking ``hindsight_recall.retain``
opens one) takes the answers this process found. A store is known by its connection string (the schema
included) and its password.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import ConfigError, DatabaseError
from ..protocols import TextSearchBackend
from .driver import driver_connection

#: join tables that gain a bank column, with the column naming the memory each row belongs to
BANK_KEYED_JOINS = (
    ("unit_entities", "unit_id"),
    ("memory_links", "from_unit_id"),
    ("observation_sources", "observation_id"),
)
#: distributed by bank_id, in this order (the first one anchors the colocation group)
DISTRIBUTED = ("banks", "memory_units", "entities", "chunks", "unit_entities", "memory_links", "observation_sources",
               "term_stats", "length_stats", "bank_aliases", "bank_transfers", "transfer_archive_parts",
               "invalidated_memories", "documents", "operations", "directives", "webhooks", "webhook_outbox",
               "audit_log")
#: small global tables, copied to every node
REFERENCE = ("hindsight_meta", "hindsight_migrations")
#: table -> its primary key on Citus (the bank column is part of every key)
_KEYS = {
    "memory_units": "id, bank_id",
    "entities": "id, bank_id",
    "unit_entities": "unit_id, entity_id, bank_id",
    "memory_links": "from_unit_id, to_unit_id, link_type, bank_id",
    "observation_sources": "source_id, observation_id, bank_id",
}
#: (table, constraint, definition) of every foreign key, as it is on Citus
_FOREIGN_KEYS = (
    ("memory_units", "memory_units_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("entities", "entities_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("chunks", "chunks_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("documents", "documents_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("bank_aliases", "bank_aliases_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("bank_transfers", "bank_transfers_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("transfer_archive_parts", "transfer_archive_parts_bank_id_transfer_id_fkey",
     "(bank_id, transfer_id) REFERENCES bank_transfers (bank_id, id) ON DELETE CASCADE"),
    ("invalidated_memories", "invalidated_memories_bank_id_fkey",
     "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("directives", "directives_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("webhooks", "webhooks_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("webhook_outbox", "webhook_outbox_bank_id_fkey", "(bank_id) REFERENCES banks (bank_id) ON DELETE CASCADE"),
    ("unit_entities", "unit_entities_unit_id_fkey",
     "(unit_id, bank_id) REFERENCES memory_units (id, bank_id) ON DELETE CASCADE"),
    ("unit_entities", "unit_entities_entity_id_fkey",
     "(entity_id, bank_id) REFERENCES entities (id, bank_id) ON DELETE CASCADE"),
)


async def key_by_bank(conn: AsyncConnection) -> None:
    """Give the join tables a ``bank_id`` column, filled from their memories (once; cheap after).

    Rows whose memory is gone (links carry no foreign keys) belong to no bank and are dropped.

    :param conn: the migration transaction.
    """
    for table, column in BANK_KEYED_JOINS:
        if await _has_column(conn, table, "bank_id"):
            continue
        await conn.execute(text(f"ALTER TABLE {table} ADD COLUMN bank_id text"))
        await conn.execute(text(
            f"UPDATE {table} t SET bank_id = u.bank_id FROM memory_units u WHERE u.id = t.{column}"
        ))
        await conn.execute(text(f"DELETE FROM {table} WHERE bank_id IS NULL"))
        await conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN bank_id SET NOT NULL"))


#: connection string -> whether its database has the citus extension, as this process found it
_coordinators: dict[str, bool] = {}
#: connection strings of the stores this process found with every table distributed
_distributed: set[str] = set()


async def _store(conn: AsyncConnection) -> str:
    """What names the store: the connection string (the schema is among its options) and a digest of
    the password (throwaway servers may take the port of one stopped before)."""
    raw = await driver_connection(conn)
    return f"{raw.info.dsn} {hashlib.sha256(raw.pgconn.password or b'').hexdigest()[:16]}"


async def has_citus(conn: AsyncConnection) -> bool:
    """Whether the database has the ``citus`` extension (the engine is then talking to a coordinator);
    asked once per process and store."""
    store = await _store(conn)
    if store not in _coordinators:
        _coordinators[store] = bool(await conn.scalar(text(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")))
    return _coordinators[store]


async def vacuum_shards(conn: AsyncConnection, bank_ids: Sequence[str], tables: Sequence[str]) -> None:
    """``VACUUM (ANALYZE)`` the shards of ``tables`` that hold the banks' rows, each on its worker
    (a VACUUM cannot run in a transaction, and on the coordinator it would run on every shard).

    :raises DatabaseError: a worker refused one (its message), after the others ran.
    """
    result = await conn.execute(text(
        "SELECT w.node_name, w.success, w.result FROM ("
        "SELECT array_agg(s.nodename) AS names, array_agg(s.nodeport) AS ports, "
        "array_agg(format('VACUUM (ANALYZE) %s', shard_name(s.table_name, s.shardid))) AS commands "
        "FROM citus_shards s WHERE s.shardid IN (SELECT DISTINCT get_shard_id_for_distribution_column(t, b) "
        "FROM unnest(CAST(:tables AS text[])) AS t, unnest(CAST(:banks AS text[])) AS b)) q "
        "CROSS JOIN LATERAL master_run_on_worker(q.names, q.ports, q.commands, true) AS w "
        "WHERE q.names IS NOT NULL"
    ), {"tables": list(tables), "banks": list(bank_ids)})
    failed = [f"{r.node_name}: {r.result}" for r in result if not r.success]
    if failed:
        raise DatabaseError("; ".join(failed))


def compatible_backends(plugins: Any) -> list[str]:
    """The installed text-search backends that declare ``citus_compatible``.

    :param plugins: the engine's plugin manager.
    """
    names: list[str] = plugins.names("text_search")
    return [n for n in names if getattr(plugins.get("text_search", n), "citus_compatible", False)]


def check_backend(backend: TextSearchBackend, compatible: Sequence[str]) -> None:
    """Refuse a text-search backend that cannot run on Citus, naming the ones that can.

    :param backend: the selected backend.
    :param compatible: names of the installed backends that declare ``citus_compatible``.
    """
    if not getattr(backend, "citus_compatible", False):
        raise ConfigError(
            f"HINDSIGHT_API_TEXT_SEARCH_EXTENSION={backend.name!r} cannot run on Citus (this database has the "
            f"citus extension); choose a Citus-compatible backend: {', '.join(sorted(compatible)) or 'none installed'}"
        )


async def distribute(conn: AsyncConnection) -> bool:
    """Distribute every bank-keyed table by ``bank_id`` (colocated) and make the bookkeeping tables
    reference tables; a no-op for tables Citus already manages. True when anything was distributed.

    :param conn: the migration transaction, on the coordinator.
    """
    store = await _store(conn)
    if store in _distributed:  # found distributed by an earlier engine of this process
        return False
    done = set((await conn.execute(text(
        "SELECT logicalrelid::regclass::text FROM pg_dist_partition "
        "WHERE logicalrelid = ANY(CAST(:names AS regclass[]))"
    ), {"names": [*DISTRIBUTED, *REFERENCE]})).scalars())
    for table in REFERENCE:
        if table not in done:
            await conn.execute(text("SELECT create_reference_table(:t)"), {"t": table})
    pending = [t for t in DISTRIBUTED if t not in done]
    if not pending:
        _distributed.add(store)
        return False
    # Citus needs the distribution column in every key and foreign key: drop the foreign keys, widen
    # the keys, distribute, and put the foreign keys back with the bank in them.
    for table, name, _ in _FOREIGN_KEYS:
        if table in pending:
            await conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}"))
    if "banks" in pending:
        await conn.execute(text("ALTER TABLE banks DROP CONSTRAINT IF EXISTS banks_internal_id_key"))
        await conn.execute(text("ALTER TABLE banks ADD CONSTRAINT banks_internal_id_key UNIQUE (internal_id, bank_id)"))
    for table, key in _KEYS.items():
        if table in pending:
            await conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey"))
            await conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({key})"))
    for table in pending:
        colocate = "none" if table == DISTRIBUTED[0] else DISTRIBUTED[0]
        await conn.execute(text("SELECT create_distributed_table(:t, 'bank_id', colocate_with => :c)"),
                           {"t": table, "c": colocate})
        await conn.execute(text("SELECT truncate_local_data_after_distributing_table(:t)"), {"t": table})
    for table, name, definition in _FOREIGN_KEYS:
        if table in pending or definition.split("REFERENCES ")[1].split(" ")[0] in pending:
            await conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}"))
            await conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY {definition}"))
    return True


async def _has_column(conn: AsyncConnection, table: str, column: str) -> bool:
    return bool(await conn.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = CAST(:t AS regclass) AND attname = :c "
        "AND NOT attisdropped)"
    ), {"t": table, "c": column}))
