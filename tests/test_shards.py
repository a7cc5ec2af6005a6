"""Citus: how a recall's statements are rewritten to read a bank's shards on its worker (no server
needed here; test_citus.py runs them on a cluster)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hindsight_recall.settings import Settings
from hindsight_recall.store.shards import Placement, ShardReads, _placement, rewrite

PLACED = Placement("10.0.0.2", 5432, (("banks", "banks_102017"), ("memory_units", "memory_units_102057"),
                                      ("unit_entities", "unit_entities_102153")))


@pytest.mark.parametrize(("sql", "expected"), [
    # no alias: the shard takes the table's name, so qualified columns still resolve
    ("SELECT memory_units.id FROM memory_units WHERE bank_id = :b",
     "SELECT memory_units.id FROM memory_units_102057 AS memory_units WHERE bank_id = :b"),
    ("SELECT 1 FROM (SELECT id FROM memory_units) q",
     "SELECT 1 FROM (SELECT id FROM memory_units_102057 AS memory_units) q"),
    # an alias stays the alias
    ("SELECT u.id FROM memory_units u JOIN unit_entities AS ue ON ue.unit_id = u.id",
     "SELECT u.id FROM memory_units_102057 u JOIN unit_entities_102153 AS ue ON ue.unit_id = u.id"),
    ("SELECT * FROM banks\nLEFT JOIN memory_units ON true",
     "SELECT * FROM banks_102017 AS banks\nLEFT JOIN memory_units_102057 AS memory_units ON true"),
    # functions, CTEs, columns and unknown tables are left alone
    ("SELECT extract(epoch FROM occurred_start), memory_units FROM unnest(:ids) AS memory_units",
     "SELECT extract(epoch FROM occurred_start), memory_units FROM unnest(:ids) AS memory_units"),
    ("WITH nearest AS (SELECT 1) SELECT * FROM nearest JOIN entities e ON true",
     "WITH nearest AS (SELECT 1) SELECT * FROM nearest JOIN entities e ON true"),
    ("SELECT 1 FROM public.memory_units", "SELECT 1 FROM public.memory_units"),
])
def test_tables_after_from_and_join_read_their_shard(sql: str, expected: str) -> None:
    assert rewrite(sql, PLACED) == expected


def _row(name: str, host: str, hashed: bool = True) -> SimpleNamespace:
    return SimpleNamespace(name=name, shard=f"{name}_1", host=host, port=5432, hashed=hashed)


def test_a_placement_needs_every_distributed_table_on_one_worker() -> None:
    rows = [_row("memory_units", "w1"), _row("banks", "w1"), _row("hindsight_meta", "w1", False),
            _row("hindsight_meta", "w2", False)]
    found = _placement(rows)
    assert found == Placement("w1", 5432, (("banks", "banks_1"), ("hindsight_meta", "hindsight_meta_1"),
                                           ("memory_units", "memory_units_1")))
    # a table of the bank on another worker (not co-located), two copies of a shard, or none: no placement
    assert _placement([_row("memory_units", "w1"), _row("banks", "w2")]) is None
    assert _placement([_row("memory_units", "w1"), _row("memory_units", "w2")]) is None
    assert _placement([]) is None


async def test_placements_are_kept_and_unreachable_workers_left_alone() -> None:
    asked: list[int] = []

    async def ask() -> list[SimpleNamespace]:
        asked.append(1)
        return [_row("memory_units", "w1")]

    shards = ShardReads()
    first = await shards.placement("b", ask)
    assert first is not None and await shards.placement("b", ask) == first
    assert len(asked) == 1  # kept
    shards.unreachable(first, OSError("refused"))
    assert await shards.placement("b", ask) is None  # read through the coordinator meanwhile
    assert len(asked) == 1


async def test_a_shard_gone_where_the_coordinator_still_puts_it_is_read_through_the_coordinator() -> None:
    async def ask() -> list[SimpleNamespace]:
        return [_row("memory_units", "w1")]

    shards = ShardReads()
    first = await shards.placement("b", ask)
    shards.gone("b")  # moved: asked again, and a new place would be taken
    assert await shards.placement("b", ask) is None  # the same place again: not a move
    shards.gone("never-asked")  # nothing kept: nothing to remember
    assert await shards.placement("never-asked", ask) == first


def test_direct_reads_are_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().citus_direct_reads is True
    monkeypatch.setenv("HINDSIGHT_API_CITUS_DIRECT_READS", "false")
    assert Settings().citus_direct_reads is False
    monkeypatch.setenv("HINDSIGHT_API_CITUS_DIRECT_READS", "sometimes")
    with pytest.raises(ValueError, match="citus_direct_reads"):
        Settings()
