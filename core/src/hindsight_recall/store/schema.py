"""The database schema: versioned, idempotent migrations plus the text-search column and bank indexes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import ConfigError
from ..protocols import TextSearchBackend
from ..types import FACT_TYPES
from .citus import distribute, has_citus, key_by_bank

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


def ann_index_statements() -> list[str]:
    """One HNSW index per fact type over the rows of every bank of ``VECTOR_INDEX_MIN_ROWS`` or more.

    The index set does not grow with the number of banks, so planning time stays flat and no retain
    or delete runs DDL. A search filters its bank inside the index scan (iterative scans).
    """
    return [
        f"CREATE INDEX IF NOT EXISTS idx_mu_ann_{ft} ON memory_units USING hnsw (embedding vector_cosine_ops) "
        f"WHERE ann AND fact_type = '{ft}'"
        for ft in FACT_TYPES
    ]


def _v8(dimensions: int) -> list[str]:
    # Per-bank partial HNSW indexes made planning grow with the number of banks and put DDL in the
    # retain and delete transactions (deadlocks between concurrent first loads). Small banks are now
    # scanned exactly; large ones are flagged (`ann`) into three shared indexes, built here in bulk.
    return [
        "ALTER TABLE banks ADD COLUMN IF NOT EXISTS indexed boolean NOT NULL DEFAULT false",
        "ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS ann boolean NOT NULL DEFAULT false",
        # tokens of `text`, counted at retain so packing does not tokenize on every recall
        "ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS token_count int",
        "CREATE INDEX IF NOT EXISTS idx_mu_bank_type ON memory_units (bank_id, fact_type)",
        # first: flagging rows below rewrites them, and a live HNSW index makes each rewrite slow
        "DO $$ DECLARE r record; BEGIN FOR r IN SELECT indexname FROM pg_indexes "
        "WHERE schemaname = current_schema() AND tablename = 'memory_units' "
        "AND left(indexname, 11) = 'idx_mu_emb_' LOOP "
        "EXECUTE 'DROP INDEX IF EXISTS ' || quote_ident(r.indexname); END LOOP; END $$",
        "UPDATE banks SET indexed = true WHERE bank_id IN "
        f"(SELECT bank_id FROM memory_units GROUP BY bank_id HAVING count(*) >= {int(ANN_MIN_ROWS)})",
        "UPDATE memory_units SET ann = true WHERE bank_id IN (SELECT bank_id FROM banks WHERE indexed)",
        "SET LOCAL maintenance_work_mem = '1GB'",
        *ann_index_statements(),
    ]


#: A memory's document for position and context: its document id, else its chunk.
DOCUMENT_KEY = "coalesce(document_id, chunk_id)"
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
        f"""UPDATE memory_units u SET position = o.place FROM (
            SELECT id, row_number() OVER (PARTITION BY bank_id, {DOCUMENT_KEY} ORDER BY {_NATURAL_ORDER}) - 1 AS place
            FROM memory_units WHERE {DOCUMENT_KEY} IS NOT NULL) AS o
            WHERE u.id = o.id AND u.position IS NULL""",
        f"CREATE INDEX IF NOT EXISTS idx_mu_document_position ON memory_units (bank_id, ({DOCUMENT_KEY}), position) "
        "WHERE position IS NOT NULL",
        "CREATE EXTENSION IF NOT EXISTS btree_gist",
        # not partial: the planner cannot prove the window test implies "a date is set", and then skips it
        f"CREATE INDEX IF NOT EXISTS idx_mu_occurred_range ON memory_units USING gist (bank_id, fact_type, "
        f"{OCCURRED_RANGE})",
    ]


#: version -> statements (a function of the embedding dimension). Append; never edit a released one.
MIGRATIONS: dict[int, Callable[[int], Sequence[str]]] = {
    1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5, 6: _v6, 7: _v7, 8: _v8, 9: _v9,
}


async def _reid(conn: AsyncConnection) -> None:
    from ._reid import reid_ambiguous  # late: it needs the retain id functions

    await reid_ambiguous(conn)


#: version -> a data step run after that version's statements, in the same transaction.
DATA_MIGRATIONS: dict[int, Callable[[AsyncConnection], Awaitable[None]]] = {7: _reid}


async def migrate(conn: AsyncConnection, dimensions: int, backend: TextSearchBackend) -> None:
    """Bring the schema up to date, idempotently and safely under concurrent start-ups; on a Citus
    coordinator, distribute the tables by bank (see :mod:`.citus`).

    :param conn: a connection inside a transaction.
    :param dimensions: the embedding dimension of the configured provider.
    :param backend: the selected text-search backend.
    """
    await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('hindsight_recall.migrate'))"))
    await conn.execute(text(
        "CREATE TABLE IF NOT EXISTS hindsight_meta (key text PRIMARY KEY, value text NOT NULL)"
    ))
    await conn.execute(text(
        "CREATE TABLE IF NOT EXISTS hindsight_migrations "
        "(version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    done = set((await conn.execute(text("SELECT version FROM hindsight_migrations"))).scalars())
    for version in sorted(MIGRATIONS):
        if version in done:
            continue
        for statement in MIGRATIONS[version](dimensions):
            await conn.execute(text(statement))
        if version in DATA_MIGRATIONS:
            await DATA_MIGRATIONS[version](conn)
        await conn.execute(text("INSERT INTO hindsight_migrations (version) VALUES (:v)"), {"v": version})
    await key_by_bank(conn)
    await _check_dimensions(conn, dimensions)
    await _install_text_search(conn, backend)
    if await has_citus(conn):
        await distribute(conn)


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
    if current == backend.name:
        return
    if current is not None:
        populated = await conn.scalar(text("SELECT EXISTS (SELECT 1 FROM memory_units)"))
        if populated:
            raise ConfigError(
                f"HINDSIGHT_API_TEXT_SEARCH_EXTENSION={backend.name!r}, but this database was built with "
                f"{current!r} and already holds memories. Set it back to {current!r}, or switch on an "
                "empty database (a new one, or after deleting every bank) so the search column is rebuilt."
            )
        await conn.execute(text("DROP INDEX IF EXISTS idx_memory_units_text_search"))
        await conn.execute(text("ALTER TABLE memory_units DROP COLUMN IF EXISTS search_vector"))
    for statement in backend.install_statements():
        await conn.execute(text(statement))
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
