"""Arm rows read through psycopg directly: SQLAlchemy's binds translated, in the connection's transaction."""

from __future__ import annotations

import uuid
from typing import Any

from hindsight_recall.recall.arms._rows import COLUMNS, row_reader
from hindsight_recall.recall.fusion import rrf_fuse, score_fuse
from hindsight_recall.store.driver import driver_sql, fetch
from hindsight_recall.types import Hit
from sqlalchemy import text


def test_binds_become_numbered_placeholders_as_sqlalchemy_reads_them() -> None:
    sql = ("SELECT x::text, CAST(:b AS int[]), x % 2, '%' FROM t WHERE y = :a_2 AND z ~ 'a\\:b' AND w = :a::int "
           "AND v = :b")
    # as text(): a bind followed by '::' is not one (CAST it), '\:' is a colon, and a name used twice is one $n
    assert driver_sql(sql) == (
        "SELECT x::text, CAST($1 AS int[]), x % 2, '%' FROM t WHERE y = $2 AND z ~ 'a:b' AND w = :a::int AND v = $1",
        ("b", "a_2"),
    )
    from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg

    compiled = text(sql).compile(dialect=PGDialect_asyncpg())  # SQLAlchemy's own $n form
    assert driver_sql(sql) == (str(compiled), tuple(compiled.positiontup or ()))


async def test_fetch_reads_rows_as_tuples_in_the_connections_transaction(engine: Any, alice: str) -> None:
    async with engine.db.connect() as conn:
        await conn.execute(text("SET LOCAL application_name = 'rows-test'"))
        keys, rows = await fetch(conn, f"SELECT {COLUMNS}, current_setting('application_name') AS app "
                                       "FROM memory_units WHERE bank_id = :bank AND fact_type = ANY(:types) "
                                       "ORDER BY external_id", {"bank": alice, "types": ["world"], "unused": 1})
        by_sqlalchemy = (await conn.execute(text(f"SELECT {COLUMNS} FROM memory_units WHERE bank_id = :bank "
                                                 "AND fact_type = 'world' ORDER BY external_id"),
                                            {"bank": alice})).all()
    assert keys[-1] == "app" and {r[-1] for r in rows} == {"rows-test"}
    assert [tuple(r[:-1]) for r in rows] == [tuple(r) for r in by_sqlalchemy]
    read = row_reader(keys)
    first = read(rows[0])
    assert isinstance(first.id, uuid.UUID) and first.fact_type == "world" and not first.complete


def test_a_row_reader_fills_what_the_dataclass_would() -> None:
    from datetime import UTC, datetime

    from hindsight_recall.store.schema import ROW_COLUMNS
    from hindsight_recall.types import MemoryRow

    when, source = datetime(2024, 5, 1, tzinfo=UTC), uuid.uuid4()
    values = {"id": uuid.uuid4(), "external_id": "m1", "text": "Alice hikes", "fact_type": "world",
              "context": "trip", "occurred_start": when, "occurred_end": None, "mentioned_at": when,
              "tags": ["a"], "metadata": {"k": "v"}, "document_id": "d", "chunk_id": "c", "proof_count": 3,
              "source_memory_ids": [source], "token_count": 4}
    for columns, complete in ((ROW_COLUMNS, True), (COLUMNS, False)):
        keys = [*reversed([c.strip() for c in columns.split(",")]), "score"]  # any order, extra columns
        for nulls in (False, True):  # a NULL proof count is 1, NULL arrays are empty
            given = {**values, **({"proof_count": None, "source_memory_ids": None, "tags": None} if nulls else {})}
            row = row_reader(keys)([given.get(k, 0.5) for k in keys])
            whole = {k: given[k] for k in ("text", "context", "tags", "metadata", "document_id")} if complete else {}
            expected = MemoryRow(**{**{k: v for k, v in given.items() if k in COLUMNS}, **whole,
                                    "proof_count": 1 if nulls else 3,
                                    "source_memory_ids": () if nulls else (source,),
                                    **({"tags": () if nulls else ("a",)} if complete else {}),
                                    "text": given["text"] if complete else "", "complete": complete})
            assert row == expected and vars(row) == vars(expected)


def test_a_hit_made_in_one_step_is_the_dataclasss_hit() -> None:
    from hindsight_recall.recall.arms._rows import hit
    from hindsight_recall.types import MemoryRow

    row = MemoryRow(id=uuid.uuid4(), external_id="m1", text="t", fact_type="world")
    made = hit(row, 0.5)
    assert made == Hit(row, 0.5) and vars(made) == vars(Hit(row, 0.5))
    assert made.extras is not hit(row, 0.5).extras  # each hit has its own extras


async def test_a_failing_statement_raises_the_drivers_error(engine: Any) -> None:
    import psycopg

    async with engine.db.connect() as conn:
        try:
            await fetch(conn, "SELECT 1 / :zero", {"zero": 0})
        except psycopg.errors.DivisionByZero:
            pass
        else:  # pragma: no cover
            raise AssertionError("the division by zero passed")


def _hits(rows: list[Any], scores: list[float], **extras: float) -> list[Hit]:
    return [Hit(r, s, dict(extras)) for r, s in zip(rows, scores, strict=True)]


def test_fusion_credits_each_memory_once_per_arm_with_its_best_rank() -> None:
    read = row_reader(("id", "external_id", "fact_type", "occurred_start", "occurred_end", "mentioned_at",
                       "chunk_id", "proof_count", "source_memory_ids", "token_count"))
    a, b, c = (read((uuid.uuid4(), name, "world", None, None, None, None, None, None, 3)) for name in "abc")
    lists = {"semantic": _hits([a, b, a], [0.9, 0.5, 0.1]), "keyword": _hits([b, c], [2.0, 1.0]),
             "temporal": _hits([c], [0.7], temporal_proximity=0.25)}
    fused = {cand.row.external_id: cand for cand in rrf_fuse(lists, k=60)}
    assert fused["a"].source_ranks == {"semantic_rank": 1}  # its second listing is ignored
    assert fused["b"].source_ranks == {"semantic_rank": 2, "keyword_rank": 1}
    assert fused["b"].rrf_score == 1 / 62 + 1 / 61 and fused["b"].semantic == 0.5 and fused["b"].keyword == 2.0
    assert fused["c"].temporal_proximity == 0.25 and fused["c"].source_ranks == {"keyword_rank": 2, "temporal_rank": 1}
    scored = {cand.row.external_id: cand for cand in score_fuse(lists, {"keyword": 2.0})}
    assert scored["a"].source_scores == {"semantic": 1.0} and scored["b"].source_scores == {"semantic": 0.5,
                                                                                            "keyword": 2.0}
    assert scored["c"].rrf_score == 0.0 + 1.0  # keyword's weakest (0 × 2) and temporal's only hit (1)
