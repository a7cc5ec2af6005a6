"""Citus: a recall reads its bank's shards on the worker that holds them, not through the coordinator.

Through the coordinator every statement is planned twice: as a distributed query there, then again on
the worker, which gets it as text and never keeps a plan. A LoCoMo recall's statements cost the
servers 27 ms of CPU that way, and 6.4 ms run on the shards themselves, with plans kept as on a
single server (docs/benchmarks.md). So a recall's connections come from a pool on the bank's worker,
and its statements name the bank's shards (``memory_units`` becomes ``memory_units_102057 AS
memory_units``); writes still go through the coordinator.

Where a bank's shards are is asked of the coordinator once and kept for :data:`PLACEMENT_SECONDS`
(a shard moved by the rebalancer is read at its new place within that time; a statement that finds
its shard gone drops the placement and the recall is tried again). A worker this process cannot
reach is left alone for :data:`UNREACHABLE_SECONDS`, and its banks are read through the coordinator.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause, text

log = logging.getLogger(__name__)

#: seconds a bank's placement is kept before it is asked again
PLACEMENT_SECONDS = 5.0
#: seconds a worker that refused a connection is left alone
UNREACHABLE_SECONDS = 60.0
#: banks whose placement is kept at once
PLACEMENTS_KEPT = 4096

#: every shard of the tables ``:tables`` (as the search path names them) that holds the bank's rows
#: (``:bank``), with its worker; a reference table's every copy
_PLACEMENT = text(
    "SELECT q.name, shard_name(q.logicalrelid, s.shardid) AS shard, n.nodename AS host, n.nodeport AS port, "
    "q.partmethod = 'h' AS hashed "
    "FROM (SELECT p.logicalrelid, p.partmethod, CAST(CAST(p.logicalrelid AS regclass) AS text) AS name "
    "FROM pg_dist_partition p) q "
    "JOIN pg_dist_shard s ON s.logicalrelid = q.logicalrelid "
    "JOIN pg_dist_placement pl ON pl.shardid = s.shardid "
    "JOIN pg_dist_node n ON n.groupid = pl.groupid AND n.isactive AND n.noderole = 'primary' "
    "WHERE q.name = ANY(CAST(:tables AS text[])) "
    "AND (q.partmethod <> 'h' OR s.shardid = get_shard_id_for_distribution_column(q.logicalrelid, CAST(:bank AS text)))"
)

#: a table named after FROM or JOIN, and the alias after it, if any
_TABLE = re.compile(r"\b(FROM|JOIN)(\s+)([A-Za-z_]\w*)\b(?!\s*[.(])((\s+AS)?\s+([A-Za-z_]\w*))?", re.IGNORECASE)
#: words that may follow a table and are not its alias
_NOT_ALIAS = frozenset({
    "where", "join", "on", "using", "left", "right", "inner", "full", "cross", "natural", "group", "order", "limit",
    "offset", "union", "except", "intersect", "having", "window", "for", "tablesample", "lateral", "returning", "set",
    "fetch",
})


@dataclass(frozen=True)
class Placement:
    """Where one bank's shards are: the worker, and each table's shard on it."""

    host: str
    port: int
    #: (table, shard) pairs, the shard's name as ``shard_name()`` gives it
    shards: tuple[tuple[str, str], ...]


def rewrite(sql: str, placement: Placement) -> str:
    """``sql`` with each table after FROM or JOIN read from its shard, under the table's own name (or
    its alias), so the rest of the statement is unchanged."""
    return _rewrite(sql, placement.shards)


@functools.lru_cache(maxsize=2048)
def _rewrite(sql: str, shards: tuple[tuple[str, str], ...]) -> str:
    names = dict(shards)

    def one(match: re.Match[str]) -> str:
        keyword, space, table, rest, _, alias = match.groups()
        shard = names.get(table.lower())
        if shard is None:
            return match.group(0)
        if alias is not None and alias.lower() not in _NOT_ALIAS:
            return f"{keyword}{space}{shard}{rest}"
        return f"{keyword}{space}{shard} AS {table}{rest or ''}"

    return _TABLE.sub(one, sql)


class ShardReads:
    """Placements of banks, as this process last found them, and the workers it cannot reach."""

    def __init__(self) -> None:
        self._placements: dict[str, tuple[float, Placement | None]] = {}
        self._unreachable: dict[tuple[str, int], float] = {}
        #: bank -> the placement a statement found a shard of gone
        self._gone: dict[str, Placement] = {}

    async def placement(self, bank_id: str, ask: Callable[[], Awaitable[Any]]) -> Placement | None:
        """The bank's placement, or ``None`` when its shards are not all on one worker this process can
        reach.

        :param ask: runs :func:`placement_sql` for the bank on the coordinator (when none is kept).
        """
        now = time.monotonic()
        kept = self._placements.get(bank_id)
        if kept is None or now - kept[0] > PLACEMENT_SECONDS:
            found = _placement(await ask())
            if found is not None and found == self._gone.pop(bank_id, None):
                # the shard is not where the catalog says (not a move): the coordinator knows better
                log.warning("a shard of bank %r is missing on %s:%d; reading it through the coordinator",
                            bank_id, found.host, found.port)
                found = None
            if len(self._placements) >= PLACEMENTS_KEPT:
                self._placements.clear()
            kept = self._placements[bank_id] = (now, found)
        found = kept[1]
        if found is None or now < self._unreachable.get((found.host, found.port), 0.0):
            return None
        return found

    def gone(self, bank_id: str) -> None:
        """A statement found a shard of the bank gone (moved away): its placement is asked again, and if
        the coordinator names the same one, the bank is read through the coordinator for a while."""
        kept = self._placements.pop(bank_id, None)
        if kept is not None and kept[1] is not None:
            self._gone[bank_id] = kept[1]

    def unreachable(self, placement: Placement, exc: BaseException) -> None:
        """Leave the placement's worker alone for a while: this process could not connect to it."""
        log.warning("cannot connect to the Citus worker %s:%d (%s); reading its banks through the coordinator "
                    "for %g s", placement.host, placement.port, exc, UNREACHABLE_SECONDS)
        self._unreachable[(placement.host, placement.port)] = time.monotonic() + UNREACHABLE_SECONDS


def placement_sql() -> TextClause:
    """Every shard of the tables ``:tables`` (unqualified: those the search path finds) that holds the
    bank's rows (``:bank``), with its worker."""
    return _PLACEMENT


def mark_moved(exc: BaseException) -> None:
    """Mark an error of a statement whose shard was gone: the recall may be tried again."""
    exc.hindsight_shard_moved = True  # type: ignore[attr-defined]


def moved(exc: BaseException) -> bool:
    """Whether :func:`mark_moved` marked the error."""
    return bool(getattr(exc, "hindsight_shard_moved", False))


def _placement(rows: Any) -> Placement | None:
    """One worker holding a shard of every hash-distributed table, with the reference tables' copies on
    it; ``None`` when the rows show no such worker."""
    anchor = [(r.host, r.port) for r in rows if r.hashed and r.name == "memory_units"]
    if len(anchor) != 1:  # not distributed here, or a shard with two copies: the coordinator chooses
        return None
    host, port = anchor[0]
    hashed = {r.name for r in rows if r.hashed}
    shards = {r.name: r.shard for r in rows if (r.host, r.port) == (host, port)}
    if not hashed <= shards.keys():
        return None
    return Placement(host, port, tuple(sorted(shards.items())))
