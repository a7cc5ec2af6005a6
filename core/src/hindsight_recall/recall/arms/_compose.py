"""Several SQL arms as one statement: one connection, one round trip, one transaction.

On these 2 cores, with other work on the machine, the semantic and graph arms as one statement
took less time than the same statements on two connections at once (docs/benchmarks.md): each
statement on its own connection pays a checkout, ``BEGIN``, ``COMMIT`` and a wake-up of its server
process, and the server does the same work either way. An arm offers its statement through
``statement(ctx)``; arms whose parameters or ``hnsw.*`` settings disagree run apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from ...protocols import ArmStatement as ArmStatement  # re-exported: the arms import it from here
from ...protocols import RetrievalContext, with_ctes
from ...store.driver import fetch
from ...types import ArmResult, Hit
from .. import cost
from ._ann import AnnSettings
from ._rows import hit, row_reader


def composable(statements: Sequence[ArmStatement]) -> bool:
    """True when every shared parameter name, ``hnsw.*`` setting and CTE name has one value across the arms."""
    params: dict[str, Any] = {}
    ann: dict[str, str] = {}
    ctes: dict[str, str] = {}
    for st in statements:
        for merged, own in ((params, st.params), (ann, st.ann), (ctes, st.ctes)):
            for key, value in own.items():
                if key in merged and merged[key] != value:
                    return False
                merged[key] = value
    return True


async def run_composed(ctx: RetrievalContext, statements: Sequence[ArmStatement], ann: AnnSettings, *,
                       spread: bool = False) -> list[ArmResult]:
    """Run the arms' statements as one UNION ALL, or one per fact type; split rows by arm and fact type.

    Every sub-select keeps its own ORDER BY and LIMIT; a leading arm index (a literal from this
    code, not a value) tells the rows apart, and each arm's score is its sub-select's last column.
    CTEs of the same name are one CTE (:func:`composable` checked they agree).

    :param spread: one statement per fact type, on as many connections as the recall's budget gives.
        PostgreSQL runs one statement's branches one after the other, on one core; when cores are
        idle and each fact type's part takes milliseconds of server time (a large bank), spreading
        them costs the slowest part instead of their sum.
    """
    parts = [(i, sub) for i, st in enumerate(statements) for sub in st.subselects]
    groups = _by_fact_type(statements, len(ctx.fact_types)) if spread else [parts]
    ctes = {name: sql for st in statements for name, sql in st.ctes.items()}
    params = {k: v for st in statements for k, v in st.params.items()}
    wanted = {k: v for st in statements for k, v in st.ann.items()}
    timeouts = [st.timeout for st in statements if st.timeout is not None]
    timeout = min(timeouts) if timeouts else None
    label = "+".join(st.arm for st in statements)  # what a benchmark's CPU meter charges
    # a CTE no sub-select of a statement names is never run: each statement may carry them all
    ran = await asyncio.gather(*(_run(ctx, with_ctes(ctes, " UNION ALL ".join(
        f"(SELECT {i} AS arm_index, q.* FROM {sub} AS q)" for i, sub in group)), params, wanted, ann, timeout, label)
        for group in groups))
    hits: dict[tuple[int, str], list[Hit]] = {(i, ft): [] for i in range(len(statements)) for ft in ctx.fact_types}
    with cost.python(label):
        for keys, rows, _ in ran:
            read, at_type = row_reader(keys), keys.index("fact_type")
            for row in rows:
                hits[(row[0], row[at_type])].append(hit(read(row), float(row[-1])))
    duration = max(seconds for _, _, seconds in ran)
    return [ArmResult(st.arm, ft, hits[(i, ft)], duration) for i, st in enumerate(statements) for ft in ctx.fact_types]


def _by_fact_type(statements: Sequence[ArmStatement], types: int) -> list[list[tuple[int, str]]]:
    """The sub-selects grouped by fact type: an arm with one sub-select per fact type (in the recall's
    order, as the built-in arms write them) spreads over the groups; any other stays in the first."""
    groups: list[list[tuple[int, str]]] = [[] for _ in range(max(types, 1))]
    for i, st in enumerate(statements):
        for k, sub in enumerate(st.subselects):
            groups[k if len(st.subselects) == types else 0].append((i, sub))
    return [g for g in groups if g]


async def _run(ctx: RetrievalContext, sql: str, params: dict[str, Any], wanted: dict[str, str],
               ann: AnnSettings, timeout: float | None, label: str) -> tuple[tuple[str, ...], Sequence[Any], float]:
    async with ctx.db.connect() as conn:
        # the clock starts once a connection is held: waiting for one is not the arms' work
        async with asyncio.timeout(timeout):
            if wanted:
                await ann.apply(conn, wanted)
            started = time.perf_counter()
            async with cost.statement(conn, label):
                keys, rows = await fetch(conn, sql, params)
            return keys, rows, time.perf_counter() - started
