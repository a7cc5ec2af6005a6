"""Read-only measurements of the database that benchmarks report: the server, how a bank's vectors are
searched and planned, the links a bank holds, and the disk a set of banks takes."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .ann import placement

_TOTAL_SIZE = text("SELECT pg_total_relation_size(CAST(:t AS regclass))")
#: on a coordinator the tables hold no rows: the size of every shard on every node
_CITUS_TOTAL_SIZE = text("SELECT citus_total_relation_size(CAST(:t AS regclass))")
#: a worker's checkpointer lives as long as its postmaster (the backend of Citus's own connection does not)
_WORKER_PIDS = text("SELECT result FROM run_command_on_workers("
                    "$$SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'$$) WHERE success")


async def backend_pid(conn: AsyncConnection) -> int:
    """The process id of the server backend serving ``conn``."""
    return int(await conn.scalar(text("SELECT pg_backend_pid()")))


async def server_pids(conn: AsyncConnection, *, citus: bool) -> list[int]:
    """A process id of each server, a child of its postmaster: ``conn``'s backend and, on a Citus
    coordinator, each active worker's checkpointer."""
    pids = [await backend_pid(conn)]
    if citus:
        found = await conn.execute(_WORKER_PIDS)
        pids += [int(row.result) for row in found]
    return pids


async def server(conn: AsyncConnection, settings: Sequence[str], *, citus: bool) -> dict[str, Any]:
    """The versions of PostgreSQL and pgvector, the values of ``settings``, and on a Citus coordinator the
    version of Citus and how many workers are active."""
    version = await conn.scalar(text("SHOW server_version"))
    vector = await conn.scalar(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
    values = {name: await conn.scalar(text("SELECT current_setting(:name)"), {"name": name}) for name in settings}
    out: dict[str, Any] = {"version": f"PostgreSQL {version}, pgvector {vector}", "settings": values}
    if citus:
        out["citus"] = await conn.scalar(text("SELECT extversion FROM pg_extension WHERE extname = 'citus'"))
        out["workers"] = int(await conn.scalar(text("SELECT count(*) FROM citus_get_active_worker_nodes()")))
    return out


async def semantic_plan(conn: AsyncConnection, bank_id: str, vector: Sequence[float], repeats: int) -> dict[str, Any]:
    """Median planning and execution time (over ``repeats`` runs) of the semantic arm's statement for the
    bank's world facts; for a bank searched through an index, also of the exact scan it would get
    without one. With how many indexes ``memory_units`` has, and the bank's world rows."""
    # older schemas (a database of an older release) have no slots, or no index flags at all
    columns = set((await conn.execute(text(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'memory_units'::regclass "
        "AND attname IN ('ann', 'ann_slot')"))).scalars())
    predicate = ""
    if "ann_slot" in columns:
        predicate = (await placement(conn, bank_id)).predicate()
    elif "ann" in columns:
        shared = await conn.scalar(text("SELECT indexed FROM banks WHERE bank_id = :b"), {"b": bank_id})
        predicate = "ann" if shared else ""
    indexed = bool(predicate)
    literal = "[" + ",".join(f"{v:.7g}" for v in vector) + "]"
    out: dict[str, Any] = {}
    # as the arm asks it; for an indexed bank, also the exact scan it would get below the threshold
    for name, ann in [("", f" AND {predicate}" if indexed else ""), *([("exact_", "")] if indexed else [])]:
        if indexed:
            await conn.execute(text("SELECT set_config('hnsw.ef_search', '60', true), "
                                    "set_config('hnsw.iterative_scan', 'strict_order', true)"))
        sql = text(
            "EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) SELECT id FROM memory_units WHERE bank_id = :b "
            f"AND fact_type = 'world'{ann} AND embedding IS NOT NULL "
            "ORDER BY embedding <=> CAST(:v AS vector) LIMIT 60"
        )
        plan, run = [], []
        for _ in range(repeats):
            doc = (await conn.execute(sql, {"b": bank_id, "v": literal})).scalar_one()
            doc = doc[0] if isinstance(doc, list) else json.loads(doc)[0]
            plan.append(doc["Planning Time"])
            run.append(doc["Execution Time"])
        out[f"{name}planning_ms"] = round(statistics.median(plan), 3)
        out[f"{name}execution_ms"] = round(statistics.median(run), 3)
    indexes = await conn.scalar(text(
        "SELECT count(*) FROM pg_indexes WHERE tablename = 'memory_units' AND schemaname = current_schema()"))
    rows = await conn.scalar(text(
        "SELECT count(*) FROM memory_units WHERE bank_id = :b AND fact_type = 'world'"), {"b": bank_id})
    return {**out, "indexes_on_memory_units": int(indexes), "bank_indexed": indexed, "world_rows": int(rows)}


async def link_counts(conn: AsyncConnection, bank_id: str) -> tuple[dict[str, int], int]:
    """The bank's memory links by type, and its memory-entity pairs."""
    by_type = {str(t): int(n) for t, n in (await conn.execute(text(
        "SELECT link_type, count(*) FROM memory_links WHERE bank_id = :b GROUP BY 1"), {"b": bank_id})).all()}
    pairs = await conn.scalar(text("SELECT count(*) FROM unit_entities WHERE bank_id = :b"), {"b": bank_id})
    return by_type, int(pairs)


async def disk_share(conn: AsyncConnection, bank_ids: Sequence[str], tables: Sequence[str], *, shared: bool,
                     citus: bool) -> dict[str, Any]:
    """Bytes on disk per table that belong to ``bank_ids``, the memory links they hold, and the size
    function used (``size_function``).

    :param shared: other banks live on the server too: each table's size is shared out by the banks'
        share of its rows (counted); else a table's whole size is theirs.
    :param citus: the server is a Citus coordinator: sizes are ``citus_total_relation_size`` (every
        shard on every node).
    """
    size_of = _CITUS_TOTAL_SIZE if citus else _TOTAL_SIZE
    ids = {"b": list(bank_ids)}
    sizes: dict[str, int] = {}
    quote = conn.dialect.identifier_preparer.quote
    for table in tables:
        total = int(await conn.scalar(size_of, {"t": table}) or 0)
        if shared:
            ours, rows = (await conn.execute(text(
                f"SELECT sum(CAST(bank_id = ANY(CAST(:b AS text[])) AS int)), count(*) FROM {quote(table)}"
            ), ids)).one()
            total = round(total * int(ours or 0) / rows) if rows else 0
        sizes[table] = total
    links = int(await conn.scalar(text(
        "SELECT count(*) FROM memory_links WHERE bank_id = ANY(CAST(:b AS text[]))"), ids))
    return {"bytes": sizes, "links": links,
            "size_function": "citus_total_relation_size" if citus else "pg_total_relation_size"}
