"""The database schema: versioned, idempotent migrations plus the text-search column and bank indexes."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import ConfigError
from ..protocols import TextSearchBackend
from ..types import FACT_TYPES
from . import length_stats, operations, term_stats, webhooks
from .citus import distribute, has_citus, key_by_bank

if TYPE_CHECKING:
    from .db import Database

log = logging.getLogger(__name__)

#: Columns every arm selects, in the order :class:`~hindsight_recall.types.MemoryRow` expects.
ROW_COLUMNS = (
    "id, external_id, text, fact_type, context, occurred_start, occurred_end, mentioned_at, "
    "tags, metadata, document_id, chunk_id, proof_count, source_memory_ids, token_count"
)
#: What ranking needs of a row (fusion, scoring, packing, observation dedup, chunks): the arms read
#: only these, and the rows a recall returns are completed with :data:`ROW_COLUMNS` in one statement.
ARM_COLUMNS = (
    "id, external_id, fact_type, occurred_start, occurred_end, mentioned_at, chunk_id, proof_count, "
    "source_memory_ids, token_count"
)

_FACT_TYPE_CHECK = ", ".join(f"'{t}'" for t in FACT_TYPES)


def _v1(dimensions: int) -> list[str]:
    return [
        "CREATE EXTENSION IF NOT EXISTS vector",
        """CREATE TABLE IF NOT EXISTS banks (
            bank_id text PRIMARY KEY,
            internal_id uuid UNIQUE NOT NULL,
            config jsonb NOT NULL DEFAULT '{}'::jsonb,
            created_at timestamptz NOT NULL DEFAULT now())""",
        f"""CREATE TABLE IF NOT EXISTS memory_units (
            id uuid PRIMARY KEY,
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            external_id text NOT NULL,
            fact_type text NOT NULL CHECK (fact_type IN ({_FACT_TYPE_CHECK})),
            text text NOT NULL,
            context text,
            embedding vector({int(dimensions)}),
            occurred_start timestamptz,
            occurred_end timestamptz,
            mentioned_at timestamptz,
            event_date timestamptz,
            tags varchar[] NOT NULL DEFAULT '{{}}',
            metadata jsonb,
            document_id text,
            chunk_id text,
            proof_count int NOT NULL DEFAULT 1,
            source_memory_ids uuid[],
            text_signals text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (bank_id, external_id))""",
        *(
            f"CREATE INDEX IF NOT EXISTS idx_mu_{col} ON memory_units (bank_id, fact_type, {col}) "
            f"WHERE {col} IS NOT NULL"
            for col in ("occurred_start", "occurred_end", "mentioned_at")
        ),
        "CREATE INDEX IF NOT EXISTS idx_mu_tags ON memory_units USING gin (tags)",
        """CREATE TABLE IF NOT EXISTS entities (
            id uuid PRIMARY KEY,
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            canonical_name text NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS idx_entities_bank ON entities (bank_id)",
        """CREATE TABLE IF NOT EXISTS unit_entities (
            unit_id uuid NOT NULL REFERENCES memory_units(id) ON DELETE CASCADE,
            entity_id uuid NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            PRIMARY KEY (unit_id, entity_id))""",
        "CREATE INDEX IF NOT EXISTS idx_unit_entities_entity ON unit_entities (entity_id, unit_id)",
        """CREATE TABLE IF NOT EXISTS memory_links (
            from_unit_id uuid NOT NULL REFERENCES memory_units(id) ON DELETE CASCADE,
            to_unit_id uuid NOT NULL REFERENCES memory_units(id) ON DELETE CASCADE,
            link_type text NOT NULL CHECK (link_type IN
                ('semantic', 'temporal', 'causes', 'caused_by', 'enables', 'prevents')),
            weight double precision NOT NULL CHECK (weight >= 0 AND weight <= 1),
            PRIMARY KEY (from_unit_id, to_unit_id, link_type))""",
        "CREATE INDEX IF NOT EXISTS idx_links_from ON memory_links (from_unit_id, link_type, weight DESC)",
        "CREATE INDEX IF NOT EXISTS idx_links_to ON memory_links (to_unit_id, link_type, weight DESC)",
        """CREATE TABLE IF NOT EXISTS chunks (
            chunk_id text PRIMARY KEY,
            document_id text,
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            chunk_index int NOT NULL,
            chunk_text text NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS idx_chunks_bank ON chunks (bank_id)",
    ]


def _v2(dimensions: int) -> list[str]:
    # The graph arm's observation path looks up observations by their sources (`&&`).
    return ["CREATE INDEX IF NOT EXISTS idx_mu_source_ids ON memory_units USING gin (source_memory_ids)"]


def _v3(dimensions: int) -> list[str]:
    # Links are derived rows written in the same transaction as the memories they join; checking two
    # foreign keys per link row was two thirds of bulk-link time. delete_bank removes a bank's links.
    return [
        "ALTER TABLE memory_links DROP CONSTRAINT IF EXISTS memory_links_from_unit_id_fkey",
        "ALTER TABLE memory_links DROP CONSTRAINT IF EXISTS memory_links_to_unit_id_fkey",
    ]


def _v4(dimensions: int) -> list[str]:
    # A 384-d row is about 2.3 kB, just over the default 2 kB toast threshold, so every embedding
    # went out of line and each heap fetch or exact scan paid a TOAST lookup. Rows now stay whole up
    # to a page; only new rows are affected.
    return ["ALTER TABLE memory_units SET (toast_tuple_target = 8160)"]


def _v5(dimensions: int) -> list[str]:
    # The graph arm finds observations citing any of a few thousand reached memories. A GIN `&&`
    # scan costs about keys × matches; btree probes on this table cost one descent per key.
    return [
        """CREATE TABLE IF NOT EXISTS observation_sources (
            source_id uuid NOT NULL,
            observation_id uuid NOT NULL,
            PRIMARY KEY (source_id, observation_id))""",
        "CREATE INDEX IF NOT EXISTS idx_observation_sources_observation ON observation_sources (observation_id)",
        "INSERT INTO observation_sources (source_id, observation_id) "
        "SELECT DISTINCT s.source_id, u.id FROM memory_units u CROSS JOIN LATERAL unnest(u.source_memory_ids) "
        "AS s(source_id) ON CONFLICT DO NOTHING",
        "DROP INDEX IF EXISTS idx_mu_source_ids",
    ]


def _v6(dimensions: int) -> list[str]:
    # The graph arm walks each entity's memories of one fact type, newest id first. With the fact type
    # beside the pair, one index range serves the walk; before, every pair cost a memory_units lookup.
    return [
        "ALTER TABLE unit_entities ADD COLUMN IF NOT EXISTS fact_type text",
        "UPDATE unit_entities ue SET fact_type = u.fact_type FROM memory_units u "
        "WHERE u.id = ue.unit_id AND ue.fact_type IS DISTINCT FROM u.fact_type",
        "ALTER TABLE unit_entities ALTER COLUMN fact_type SET NOT NULL",
        "CREATE INDEX IF NOT EXISTS idx_unit_entities_entity_type "
        "ON unit_entities (entity_id, fact_type, unit_id DESC)",
        "DROP INDEX IF EXISTS idx_unit_entities_entity",
    ]


def _v7(dimensions: int) -> list[str]:
    # Chunk ids are built from names and are unique only within their bank: the bank is part of the key,
    # so one bank's chunk can never replace another's. The key's leading bank column serves the bank index.
    return [
        "ALTER TABLE chunks DROP CONSTRAINT IF EXISTS chunks_pkey",
        "ALTER TABLE chunks ADD PRIMARY KEY (bank_id, chunk_id)",
        "DROP INDEX IF EXISTS idx_chunks_bank",
    ]


#: the default of VECTOR_INDEX_MIN_ROWS, used when an older database is upgraded: a bank with at least
#: this many memories is searched through the shared HNSW indexes; below it, an exact scan of its
#: rows over the (bank_id, fact_type) btree is fast and never misses a neighbour
ANN_MIN_ROWS = 5_000
#: Rows rewritten per transaction when an upgrade fills a new column of existing rows.
BACKFILL_BATCH_ROWS = 10_000


def ann_indexes() -> dict[str, str]:
    """One HNSW index per fact type over the rows of every bank of ``VECTOR_INDEX_MIN_ROWS`` or more.

    The index set does not grow with the number of banks, so planning time stays flat and no retain
    or delete runs DDL. A search filters its bank inside the index scan (iterative scans).
    """
    return {
        f"idx_mu_ann_{ft}": f"memory_units USING hnsw (embedding vector_cosine_ops) WHERE ann AND fact_type = '{ft}'"
        for ft in FACT_TYPES
    }


def ann_index_statements() -> list[str]:
    """:func:`ann_indexes` as ``CREATE INDEX`` statements."""
    return [f"CREATE INDEX IF NOT EXISTS {name} ON {body}" for name, body in ann_indexes().items()]


def _v8(dimensions: int) -> list[str]:
    # Per-bank partial HNSW indexes made planning grow with the number of banks and put DDL in the
    # retain and delete transactions (deadlocks between concurrent first loads). Small banks are now
    # scanned exactly; large ones are flagged (`ann`) into three shared indexes (see _v8_rows).
    return [
        "ALTER TABLE banks ADD COLUMN IF NOT EXISTS indexed boolean NOT NULL DEFAULT false",
        "ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS ann boolean NOT NULL DEFAULT false",
        # tokens of `text`, counted at retain so packing does not tokenize on every recall
        "ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS token_count int",
        # first: flagging rows rewrites them, and a live HNSW index makes each rewrite slow
        "DO $$ DECLARE r record; BEGIN FOR r IN SELECT indexname FROM pg_indexes "
        "WHERE schemaname = current_schema() AND tablename = 'memory_units' "
        "AND left(indexname, 11) = 'idx_mu_emb_' LOOP "
        "EXECUTE 'DROP INDEX IF EXISTS ' || quote_ident(r.indexname); END LOOP; END $$",
    ]


async def _v8_rows(upgrade: Upgrade) -> None:
    await upgrade.execute(
        "UPDATE banks SET indexed = true WHERE NOT indexed AND bank_id IN "
        f"(SELECT bank_id FROM memory_units GROUP BY bank_id HAVING count(*) >= {int(ANN_MIN_ROWS)})"
    )
    await upgrade.in_batches(
        "UPDATE memory_units SET ann = true WHERE id > :after AND id <= :upto AND NOT ann "
        "AND bank_id IN (SELECT bank_id FROM banks WHERE indexed)"
    )
    await upgrade.create_indexes({"idx_mu_bank_type": "memory_units (bank_id, fact_type)", **ann_indexes()})


#: A memory's document for position and context: its document id, else its chunk.
DOCUMENT_KEY = "coalesce(document_id, chunk_id)"


def of_document(alias: str, document: str) -> str:
    """SQL: the memories ``alias`` of the document ``document`` (the right side of ``=``: a column, a
    parameter or ``ANY(:param)``), as the document position index serves them (every memory with a
    document has a place in it)."""
    return (f"coalesce({alias}.document_id, {alias}.chunk_id) = {document} AND {alias}.document_id = {document} "
            f"AND {alias}.position IS NOT NULL")


#: The span a memory occurred over, as one range (a single date is a point); NULL without either date.
#: Retain guarantees start <= end; least/greatest keep a bad old row from failing the index.
OCCURRED_RANGE = (
    "(CASE WHEN occurred_start IS NULL AND occurred_end IS NULL THEN NULL ELSE "
    "tstzrange(least(occurred_start, occurred_end), greatest(occurred_start, occurred_end), '[]') END)"
)
#: Orders a document's old rows as they were most likely given: by load, then by the external id with
#: its numbers compared as numbers ("D1:2" before "D1:10").
_NATURAL_ORDER = (
    "created_at, regexp_replace(external_id, '[0-9]+', '', 'g'), "
    "(SELECT array_agg(lpad(n[1], 20, '0')) FROM regexp_matches(external_id, '([0-9]+)', 'g') AS n), external_id"
)


def _v9(dimensions: int) -> list[str]:
    # Recall's context stage lifts a memory by its neighbours in the same document; existing rows get
    # the order they were most likely given in. The temporal arm's window test becomes one range overlap
    # on a GiST index (plus the mentioned_at btree), instead of four ORed ranges on three indexes.
    return [
        "ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS position int",
        "CREATE EXTENSION IF NOT EXISTS btree_gist",
    ]


async def backfill_positions(upgrade: Upgrade) -> None:
    """Give every old row with a document its place in it (migration 9); rows with a place keep it.

    The places are computed once into a work table (a read: nothing is locked), then written in batches.
    """
    await upgrade.execute("DROP TABLE IF EXISTS hindsight_upgrade_positions")
    await upgrade.execute(
        "CREATE UNLOGGED TABLE hindsight_upgrade_positions AS SELECT id, row_number() OVER "
        f"(PARTITION BY bank_id, {DOCUMENT_KEY} ORDER BY {_NATURAL_ORDER}) - 1 AS place "
        f"FROM memory_units WHERE {DOCUMENT_KEY} IS NOT NULL"
    )
    await upgrade.execute("ALTER TABLE hindsight_upgrade_positions ADD PRIMARY KEY (id)")
    await upgrade.execute("ANALYZE hindsight_upgrade_positions")
    await upgrade.in_batches(
        "UPDATE memory_units u SET position = p.place FROM hindsight_upgrade_positions p "
        "WHERE p.id = u.id AND u.id > :after AND u.id <= :upto AND p.id > :after AND p.id <= :upto "
        "AND u.position IS NULL"
    )
    await upgrade.execute("DROP TABLE hindsight_upgrade_positions")


async def _v9_rows(upgrade: Upgrade) -> None:
    await backfill_positions(upgrade)
    await upgrade.create_indexes({
        "idx_mu_document_position": f"memory_units (bank_id, ({DOCUMENT_KEY}), position) WHERE position IS NOT NULL",
        # not partial: the planner cannot prove the window test implies "a date is set", and then skips it
        "idx_mu_occurred_range": f"memory_units USING gist (bank_id, fact_type, {OCCURRED_RANGE})",
    })


def _v10(dimensions: int) -> list[str]:
    # The keyword arm's IDF weights and term selection read per-bank counts kept at every write,
    # instead of counting the bank's matches on every query (see store/term_stats.py).
    return term_stats.table_statements()


def _v11(dimensions: int) -> list[str]:
    # A large bank gets HNSW indexes of its own (a slot, see store/ann.py), built once after a bulk load:
    # rows entering a live shared index one by one ran about 13 times slower than a build. Nullable
    # columns without a default: no table rewrite.
    return [
        "ALTER TABLE banks ADD COLUMN IF NOT EXISTS ann_slot smallint",
        "ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS ann_slot smallint",
    ]


def _v12(dimensions: int) -> list[str]:
    # A bank's profile (name, mission, background, disposition: what reflect's prompt is shaped by) and
    # when it last changed. A constant default: no table rewrite.
    return [
        "ALTER TABLE banks ADD COLUMN IF NOT EXISTS profile jsonb NOT NULL DEFAULT '{}'::jsonb",
        "ALTER TABLE banks ADD COLUMN IF NOT EXISTS updated_at timestamptz",
    ]


def _v13(dimensions: int) -> list[str]:
    # The queue of async operations (see store/operations.py): a new table, nothing rewritten.
    return operations.table_statements()


def _v14(dimensions: int) -> list[str]:
    # A document is its memories (text, tags, counts are read from them), but when it arrived and when
    # it last changed are its own: a row per document keeps those, and lists documents newest first
    # without reading every memory. Chunks get their creation time (nullable, no rewrite).
    return [
        """CREATE TABLE IF NOT EXISTS documents (
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            document_id text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (bank_id, document_id))""",
        "CREATE INDEX IF NOT EXISTS idx_documents_updated ON documents (bank_id, updated_at DESC, document_id)",
        "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS created_at timestamptz",
        "ALTER TABLE chunks ALTER COLUMN created_at SET DEFAULT now()",
    ]


async def _v14_rows(upgrade: Upgrade) -> None:
    # every document the memories name gets its row, dated by its memories (idempotent)
    await upgrade.execute(
        "INSERT INTO documents (bank_id, document_id, created_at, updated_at) "
        "SELECT bank_id, document_id, min(created_at), max(updated_at) FROM memory_units "
        "WHERE document_id IS NOT NULL GROUP BY bank_id, document_id ON CONFLICT DO NOTHING"
    )
    await upgrade.create_indexes({"idx_chunks_document": "chunks (bank_id, document_id, chunk_index)"})


def _v15(dimensions: int) -> list[str]:
    # Bank aliases: extra ids that reach a bank (routing only; no row is stored under an alias). An
    # alias is unique across banks; the key holds the bank so the table can be distributed by it, and
    # uniqueness is kept by the writers (store/aliases.py). Transfers: each export or import run is
    # recorded, and an export's ZIP archive is kept in parts until its bank is deleted.
    return [
        """CREATE TABLE IF NOT EXISTS bank_aliases (
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            alias text NOT NULL,
            is_primary boolean NOT NULL DEFAULT false,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (bank_id, alias))""",
        "CREATE INDEX IF NOT EXISTS idx_bank_aliases_alias ON bank_aliases (alias)",
        "CREATE UNIQUE INDEX IF NOT EXISTS idx_bank_aliases_one_primary ON bank_aliases (bank_id) WHERE is_primary",
        """CREATE TABLE IF NOT EXISTS bank_transfers (
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            id uuid NOT NULL,
            kind text NOT NULL,
            status text NOT NULL,
            result jsonb NOT NULL DEFAULT '{}'::jsonb,
            error text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (bank_id, id))""",
        """CREATE TABLE IF NOT EXISTS transfer_archive_parts (
            bank_id text NOT NULL,
            transfer_id uuid NOT NULL,
            part int NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (bank_id, transfer_id, part),
            FOREIGN KEY (bank_id, transfer_id) REFERENCES bank_transfers (bank_id, id) ON DELETE CASCADE)""",
    ]


def _v16(dimensions: int) -> list[str]:
    # Invalidated memories (upstream's curation state) leave memory_units, so no arm ever sees them,
    # and wait here as the JSONL object that retains them again when restored.
    return [
        """CREATE TABLE IF NOT EXISTS invalidated_memories (
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            external_id text NOT NULL,
            memory jsonb NOT NULL,
            reason text,
            invalidated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (bank_id, external_id))""",
    ]


def _v17(dimensions: int) -> list[str]:
    return []  # an index on unit_entities' bank column (_v17_bank), built online by _v17_rows


async def _v17_bank(conn: AsyncConnection) -> None:
    await key_by_bank(conn)  # the bank column the index holds (idempotent)


async def _v17_rows(upgrade: Upgrade) -> None:
    # The graph arm takes at most a few hundred of an entity's memories of one type, newest id first.
    # With the bank beside the key, that walk is an index-only scan that stops at its LIMIT; before,
    # it read every memory of the entity from the table and sorted them (0.5 ms per entity at 100k).
    await upgrade.create_indexes({
        "idx_unit_entities_reach": "unit_entities (entity_id, fact_type, unit_id DESC) INCLUDE (bank_id)"})
    await upgrade.build_indexes()  # before the index it replaces goes
    how = "CONCURRENTLY " if upgrade.online else ""
    await upgrade.execute(f"DROP INDEX {how}IF EXISTS idx_unit_entities_entity_type")


def _v18(dimensions: int) -> list[str]:
    return []  # an index and a row deletion: online, by _v18_rows


async def _v18_rows(upgrade: Upgrade) -> None:
    # The temporal arm reads a memory's neighbours in time from the dates themselves (one index range
    # per side) instead of stored links: the links were 20 of every 27 rows of memory_links, most of
    # the bytes on disk per memory and of the retain's link work.
    await upgrade.create_indexes({
        "idx_mu_event_date": "memory_units (bank_id, fact_type, event_date, id) WHERE event_date IS NOT NULL"})
    await upgrade.in_batches("DELETE FROM memory_links WHERE link_type = 'temporal' "
                             "AND from_unit_id > :after AND from_unit_id <= :upto")


def _v19(dimensions: int) -> list[str]:
    return []  # index drops only: online, by _v19_rows


async def _v19_rows(upgrade: Upgrade) -> None:
    # Indexes no statement uses any more, each a cost on every write and on disk: the occurrence
    # dates are searched through the range index (migration 9), and links from a memory through the
    # key, which leads with the memory (a memory has a few dozen links at most).
    how = "CONCURRENTLY " if upgrade.online else ""
    for name in ("idx_mu_occurred_start", "idx_mu_occurred_end", "idx_links_from"):
        await upgrade.execute(f"DROP INDEX {how}IF EXISTS {name}")


def _v20(dimensions: int) -> list[str]:
    # What a bank keeps besides its memories, none of it read by recall: directives (rules reflect's
    # model is given), webhooks (endpoints told of its events), and the audit log (who wrote what, when;
    # kept after its bank is deleted, so the deletion stays on record). Webhook deliveries are operations
    # retried after a delay: not_before holds one back until then.
    return [
        """CREATE TABLE IF NOT EXISTS directives (
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            id uuid NOT NULL,
            name text NOT NULL,
            content text NOT NULL,
            priority int NOT NULL DEFAULT 0,
            is_active boolean NOT NULL DEFAULT true,
            tags text[] NOT NULL DEFAULT '{}',
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (bank_id, id))""",
        """CREATE TABLE IF NOT EXISTS webhooks (
            bank_id text NOT NULL REFERENCES banks(bank_id) ON DELETE CASCADE,
            id uuid NOT NULL,
            url text NOT NULL,
            secret text,
            event_types text[] NOT NULL DEFAULT '{}',
            enabled boolean NOT NULL DEFAULT true,
            http_config jsonb NOT NULL DEFAULT '{}'::jsonb,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (bank_id, id))""",
        """CREATE TABLE IF NOT EXISTS audit_log (
            bank_id text NOT NULL,
            id uuid NOT NULL,
            action text NOT NULL,
            transport text NOT NULL,
            started_at timestamptz NOT NULL,
            ended_at timestamptz NOT NULL,
            request jsonb,
            response jsonb,
            metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
            PRIMARY KEY (bank_id, id))""",
        "CREATE INDEX IF NOT EXISTS idx_audit_log_started ON audit_log (bank_id, started_at DESC, id)",
        "ALTER TABLE operations ADD COLUMN IF NOT EXISTS not_before timestamptz",
    ]


def _v21(dimensions: int) -> list[str]:
    # The keyword arm's length prior reads how the lengths of a bank's memories spread: per-bank sums
    # kept at every write, so no query reads the bank's lengths (see store/length_stats.py).
    return length_stats.table_statements()


def _v22(dimensions: int) -> list[str]:
    # A webhook event is written in the transaction of the change it tells of and queued for delivery
    # after (an outbox): a process that dies between the commit and the queueing loses no event.
    return webhooks.outbox_statements()


#: version -> statements (a function of the embedding dimension), run in one transaction: quick DDL
#: only, since it locks the tables. Append; never change what a released one leaves behind.
MIGRATIONS: dict[int, Callable[[int], Sequence[str]]] = {
    1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5, 6: _v6, 7: _v7, 8: _v8, 9: _v9, 10: _v10, 11: _v11, 12: _v12, 13: _v13,
    14: _v14, 15: _v15, 16: _v16, 17: _v17, 18: _v18, 19: _v19, 20: _v20, 21: _v21, 22: _v22,
}


async def _reid(conn: AsyncConnection) -> None:
    from ._reid import reid_ambiguous  # late: it needs the retain id functions

    await reid_ambiguous(conn)


#: version -> a data step run after that version's statements, in the same transaction.
DATA_MIGRATIONS: dict[int, Callable[[AsyncConnection], Awaitable[None]]] = {7: _reid, 17: _v17_bank}
#: version -> work on existing rows run after that version's transaction and before it is recorded:
#: row rewrites in batches, indexes built concurrently, so recalls and retains go on meanwhile. Each
#: step is idempotent: an upgrade stopped half-way resumes at the next start.
ROW_MIGRATIONS: dict[int, Callable[[Upgrade], Awaitable[None]]] = {
    8: _v8_rows, 9: _v9_rows, 10: term_stats.backfill, 14: _v14_rows, 17: _v17_rows, 18: _v18_rows, 19: _v19_rows,
    21: length_stats.backfill,
}


async def raise_maintenance_memory(conn: AsyncConnection) -> None:
    """At least 1 GB of ``maintenance_work_mem`` for this session: HNSW builds run several times
    faster when the graph fits in memory."""
    await conn.execute(text("SELECT set_config('maintenance_work_mem', greatest("
                            "pg_size_bytes(current_setting('maintenance_work_mem')), pg_size_bytes('1GB')) "
                            "/ 1024 || 'kB', false)"))


class Upgrade:
    """Runs row migrations on a connection: in batches with indexes built concurrently on a populated
    database, or inside the migration's own transaction on an empty one (nothing to wait for there).

    Online, indexes are built after every pending version's rows are rewritten (:meth:`build_indexes`):
    a rewrite costs several times more with a live HNSW index to update.

    :param conn: an autocommit connection without statement timeout, or a connection in a transaction.
    :param online: batch, defer and build ``CONCURRENTLY`` (needs autocommit).
    :param backend: the selected text-search backend, for row work that depends on it.
    """

    def __init__(self, conn: AsyncConnection, online: bool, backend: TextSearchBackend | None = None) -> None:
        self.conn, self.online, self.backend = conn, online, backend
        self.pending: dict[str, str] = {}

    async def execute(self, statement: str, params: dict[str, Any] | None = None) -> None:
        await self.conn.execute(text(statement), params or {})

    async def in_batches(self, statement: str) -> None:
        """Run ``statement`` over ``memory_units`` id ranges ``(:after, :upto]`` of
        :data:`BACKFILL_BATCH_ROWS` rows, each its own transaction when online."""
        after = uuid.UUID(int=0)
        started = time.perf_counter()
        while True:
            upto = await self.conn.scalar(text(
                "SELECT id FROM (SELECT id FROM memory_units WHERE id > :after ORDER BY id LIMIT :n) t "
                "ORDER BY id DESC LIMIT 1"
            ), {"after": after, "n": BACKFILL_BATCH_ROWS})
            if upto is None:
                log.info("upgrade: %s ... in %.1f s", statement[:60], time.perf_counter() - started)
                return
            await self.execute(statement, {"after": after, "upto": upto})
            after = upto

    async def create_indexes(self, indexes: dict[str, str]) -> None:
        """``CREATE INDEX IF NOT EXISTS name ON body`` for each: at once, or online at :meth:`build_indexes`."""
        self.pending.update(indexes)
        if not self.online:
            await self.build_indexes()

    async def build_indexes(self) -> None:
        """Build the pending indexes (``CONCURRENTLY`` online); an invalid index left by an interrupted
        concurrent build is dropped and built again."""
        if self.online:
            await raise_maintenance_memory(self.conn)
        how = "CONCURRENTLY " if self.online else ""
        for name, body in self.pending.items():
            broken = await self.conn.scalar(text(
                "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = :name AND n.nspname = current_schema()"
            ), {"name": name})
            if broken:
                await self.execute(f"DROP INDEX {how}IF EXISTS {name}")
            started = time.perf_counter()
            await self.execute(f"CREATE INDEX {how}IF NOT EXISTS {name} ON {body}")
            log.info("upgrade: index %s built in %.1f s", name, time.perf_counter() - started)
        self.pending.clear()


async def migrate(db: Database, dimensions: int, backend: TextSearchBackend) -> None:
    """Bring the schema up to date, idempotently and safely under concurrent start-ups; on a Citus
    coordinator, distribute the tables by bank (see :mod:`.citus`).

    Each version's DDL runs in its own short transaction. On a populated database its row work
    (:data:`ROW_MIGRATIONS`) follows in batches, without a statement timeout, and the new indexes
    are built concurrently once every version's rows are done; the versions are recorded last, so
    an upgrade stopped half-way resumes at the next start. Refuses a database a newer release upgraded.

    :param db: the open database.
    :param dimensions: the embedding dimension of the configured provider.
    :param backend: the selected text-search backend.
    """
    async with db.migration_lock():
        async with db.connect() as conn:
            await conn.execute(text(
                "CREATE TABLE IF NOT EXISTS hindsight_meta (key text PRIMARY KEY, value text NOT NULL)"
            ))
            await conn.execute(text(
                "CREATE TABLE IF NOT EXISTS hindsight_migrations "
                "(version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            ))
            done = set((await conn.execute(text("SELECT version FROM hindsight_migrations"))).scalars())
        _check_version(done)
        async with contextlib.AsyncExitStack() as stack:
            upgrade: Upgrade | None = None
            online: list[int] = []
            started = time.perf_counter()
            for version in sorted(MIGRATIONS):
                if version in done or await _apply(db, version, dimensions, backend):
                    continue
                if upgrade is None:
                    log.warning("upgrading the schema: rewriting rows in batches, then building indexes "
                                "concurrently; other processes' recalls and retains go on meanwhile")
                    upgrade = Upgrade(await stack.enter_async_context(db.maintenance()), online=True,
                                      backend=backend)
                await ROW_MIGRATIONS[version](upgrade)
                online.append(version)
            if upgrade is not None:
                await upgrade.build_indexes()
                for version in online:
                    await _record(upgrade.conn, version)
                log.warning("schema versions %s are in place after %.1f s", online, time.perf_counter() - started)
        async with db.connect() as conn:
            await key_by_bank(conn)
            await _check_dimensions(conn, dimensions)
            await _install_text_search(conn, backend)
            if await has_citus(conn):
                await distribute(conn)


def _check_version(done: set[int]) -> None:
    """Old code must not run on a schema it does not know: its writes would miss what newer code expects."""
    newest, known = max(done, default=0), max(MIGRATIONS)
    if newest > known:
        raise ConfigError(
            f"this database's schema is at version {newest}, written by a newer hindsight-recall; this one "
            f"knows versions up to {known}. Upgrade hindsight-recall (pip install -U hindsight-recall) "
            "everywhere this database is used; a schema is never downgraded."
        )


async def _apply(db: Database, version: int, dimensions: int, backend: TextSearchBackend) -> bool:
    """One version's DDL in a transaction; True when it is done (and recorded), False when its row
    work is left to do online because the table holds rows."""
    row_work = ROW_MIGRATIONS.get(version)
    async with db.connect() as conn:
        await conn.execute(text("SET LOCAL statement_timeout = 0"))
        for statement in MIGRATIONS[version](dimensions):
            await conn.execute(text(statement))
        if version in DATA_MIGRATIONS:
            await DATA_MIGRATIONS[version](conn)
        if row_work is not None:
            if await conn.scalar(text("SELECT EXISTS (SELECT 1 FROM memory_units)")):
                return False
            await row_work(Upgrade(conn, online=False, backend=backend))
        await _record(conn, version)
    return True


async def _record(conn: AsyncConnection, version: int) -> None:
    await conn.execute(text("INSERT INTO hindsight_migrations (version) VALUES (:v) ON CONFLICT DO NOTHING"),
                       {"v": version})


async def _check_dimensions(conn: AsyncConnection, dimensions: int) -> None:
    column = await conn.scalar(text(
        "SELECT atttypmod FROM pg_attribute "
        "WHERE attrelid = 'memory_units'::regclass AND attname = 'embedding'"
    ))
    if column is not None and column > 0 and column != dimensions:
        raise ConfigError(
            f"the database stores {column}-dimensional embeddings but the embedding model gives "
            f"{dimensions}. Use the model the bank was built with (HINDSIGHT_API_EMBEDDINGS_LOCAL_MODEL) "
            "or a fresh database."
        )


async def _install_text_search(conn: AsyncConnection, backend: TextSearchBackend) -> None:
    current = await conn.scalar(text("SELECT value FROM hindsight_meta WHERE key = 'text_search_extension'"))
    if current is not None and current != backend.name:
        populated = await conn.scalar(text("SELECT EXISTS (SELECT 1 FROM memory_units)"))
        if populated:
            raise ConfigError(
                f"HINDSIGHT_API_TEXT_SEARCH_EXTENSION={backend.name!r}, but this database was built with "
                f"{current!r} and already holds memories. Set it back to {current!r}, or switch on an "
                "empty database (a new one, or after deleting every bank) so the search column is rebuilt."
            )
        await conn.execute(text("DROP INDEX IF EXISTS idx_memory_units_text_search"))
        await conn.execute(text("ALTER TABLE memory_units DROP COLUMN IF EXISTS search_vector"))
    # at every start, not only on a switch: a backend's new version of a statement (a function,
    # say) reaches databases it set up before
    for statement in backend.install_statements():
        await conn.execute(text(statement))
    if current == backend.name:
        return
    await conn.execute(text(
        f"ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS search_vector {backend.column_type()}"
    ))
    for statement in backend.index_statements():
        await conn.execute(text(statement))
    await conn.execute(
        text(
            "INSERT INTO hindsight_meta (key, value) VALUES ('text_search_extension', :name) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ),
        {"name": backend.name},
    )
