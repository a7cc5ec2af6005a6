"""Citus: the engine on a coordinator and two workers.

- Every statement a single-bank call sends runs on one shard: each call's statements are recorded as
  the engine sends them and planned again with ``EXPLAIN`` and the same parameters; one that would run
  on more than one shard (``Task Count`` above 1) fails the test with its text and plan.
- Backends: only those that declare ``citus_compatible`` start on Citus, and each of them is run.
- Growing the cluster: a third worker and a rebalance while other banks retain and recall.

Without a coordinator (``HINDSIGHT_TEST_DATABASE_URL`` pointing at one, as ``nox -s 'tests(citus)'`` sets
it) these tests skip; under ``tests(citus)`` they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hindsight_recall import Engine
from hindsight_recall.retain import links
from hindsight_recall.settings import Settings
from hindsight_recall.store.db import sqlalchemy_url

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: set by tests(citus): a missing cluster fails the run instead of skipping
REQUIRED_ENV = "HINDSIGHT_TEST_CITUS"
_TASKS = re.compile(r"Task Count: (\d+)")
_EXPLAINABLE = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")


def require_citus(engine: Any) -> None:
    """Skip (or fail, under tests(citus)) unless the engine talks to a Citus coordinator."""
    if engine.db.citus:
        return
    reason = ("needs a Citus coordinator: run `nox -s 'tests(citus)'`, or point HINDSIGHT_TEST_DATABASE_URL "
              "at one")
    if os.environ.get(REQUIRED_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRED_ENV} is set)", pytrace=False)
    pytest.skip(reason)


def driver_url(engine: Any) -> str:
    """The engine's database URL in libpq form."""
    return sqlalchemy_url(engine.db.url).replace("postgresql+psycopg://", "postgresql://", 1)


@dataclass
class Statements:
    """Every statement the engine sent while recording, with its parameters (COPY included)."""

    sent: list[tuple[str, Any]] = field(default_factory=list)
    #: the commands the coordinator sent on to the workers meanwhile (``citus.log_remote_commands``)
    remote: list[str] = field(default_factory=list)
    watched: set[int] = field(default_factory=set)


@contextlib.contextmanager
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[Statements]:
    """Record what every psycopg cursor executes or copies (SQLAlchemy's and the raw ones), and what
    the coordinator sends on to the workers for it."""
    record = Statements()
    execute, copy = psycopg.AsyncCursor.execute, psycopg.AsyncCursor.copy

    async def recorded_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if id(self.connection) not in record.watched:
            record.watched.add(id(self.connection))
            self.connection.add_notice_handler(lambda d: record.remote.append(d.message_primary or ""))
            await execute(self, "SET citus.log_remote_commands = on")
        record.sent.append((str(query), params))
        return await execute(self, query, params, **kw)

    def recorded_copy(self: Any, statement: Any, params: Any = None, **kw: Any) -> Any:
        record.sent.append((str(statement), params))
        return copy(self, statement, params, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.AsyncCursor, "execute", recorded_execute)
        patch.setattr(psycopg.AsyncCursor, "copy", recorded_copy)
        yield record


@dataclass
class Verdict:
    """How each recorded statement runs on the cluster."""

    #: statements whose plan has a task count above one: (statement, plan)
    fan_out: list[tuple[str, str]] = field(default_factory=list)
    #: statements planned with a single task
    routed: list[str] = field(default_factory=list)
    #: INSERT ... SELECT from the session's staging table: the rows go to the shards their bank_id names
    pulled: list[str] = field(default_factory=list)
    #: statements with no distributed table (settings, locks, catalog reads, staging tables)
    local: list[str] = field(default_factory=list)
    #: COPY into a distributed table (each row goes to the shard its bank_id names)
    copied: list[str] = field(default_factory=list)


#: a shard's name: its table's and the shard id (six digits or more; not an alias such as memory_units_1)
_SHARD = re.compile(
    r"\b(?:banks|memory_units|entities|chunks|unit_entities|memory_links|observation_sources)_(\d{6,})\b")


async def foreign_shards(url: str, bank_id: str, remote: list[str]) -> list[str]:
    """The worker commands that name a shard not holding ``bank_id`` (executed, not planned)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await (await conn.execute(
            "SELECT get_shard_id_for_distribution_column(logicalrelid, CAST(%s AS text)) FROM pg_dist_partition "
            "WHERE partmethod = 'h'", (bank_id,))).fetchall()
    mine = {r[0] for r in rows}
    return [c for c in remote if {int(n) for n in _SHARD.findall(c)} - mine]


def first_word(statement: str) -> str:
    return statement.lstrip(" (").split(None, 1)[0].upper() if statement.strip() else ""


async def explain_all(url: str, schema: str, statements: list[tuple[str, Any]]) -> Verdict:
    """``EXPLAIN`` every statement with its parameters on a connection set up as the engine's are.

    Temporary staging tables the engine created are created here too, so statements reading them plan.
    """
    verdict = Verdict()
    options = f'-c search_path="{schema}",public -c plan_cache_mode=force_custom_plan'
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, options=options) as conn:
        for statement, params in statements:
            word = first_word(statement)
            if word == "CREATE" and " TEMP " in statement.upper():
                await conn.execute(statement)
                continue
            if word == "COPY":
                target = statement.split()[1]
                if target in ("retain_stage", "stage_links"):
                    verdict.local.append(statement)
                else:
                    assert "bank_id" in statement, f"COPY into a distributed table without its bank_id: {statement}"
                    verdict.copied.append(statement)
                continue
            if word not in _EXPLAINABLE:
                verdict.local.append(statement)
                continue
            rows = await (await conn.execute(f"EXPLAIN {statement}", params)).fetchall()
            plan = "\n".join(r[0] for r in rows)
            tasks = [int(n) for n in _TASKS.findall(plan)]
            if any(n > 1 for n in tasks) or "repartition" in plan:
                verdict.fan_out.append((statement, plan))
            elif tasks:
                verdict.routed.append(statement)
            elif "pull to coordinator" in plan:
                verdict.pulled.append(statement)
            else:
                verdict.local.append(statement)
    return verdict


#: a small bank: entities, tags, dates, a cause and an observation
ALICE = [
    {"id": "job", "text": "Alice works as a data engineer at Helios Robotics in Munich.",
     "entities": ["Alice", "Helios Robotics"], "tags": ["work"], "occurred_at": "2023-08-01T00:00:00Z"},
    {"id": "old-job", "text": "Alice used to be an analyst at Northwind Labs.",
     "entities": ["Alice", "Northwind Labs"], "tags": ["work"], "occurred_at": "2022-02-01T00:00:00Z"},
    {"id": "pasta", "text": "Bob cooked pasta carbonara for dinner.", "type": "experience",
     "entities": ["Bob"], "occurred_at": "2023-05-02T00:00:00Z"},
    {"id": "reorg", "text": "Northwind Labs reorganised Alice's team under a new manager.",
     "entities": ["Northwind Labs", "Alice"], "tags": ["work"], "occurred_at": "2023-05-15T00:00:00Z",
     "causes": ["left"]},
    {"id": "left", "text": "Alice left Northwind Labs in June.", "entities": ["Alice", "Northwind Labs"],
     "occurred_at": "2023-06-30T00:00:00Z"},
    {"id": "summary", "text": "Alice changed jobs in 2023, moving from Northwind Labs to Helios Robotics.",
     "type": "observation", "sources": ["job", "left"], "entities": ["Alice"]},
]

#: a second batch into the bank: updates, a new document chunk, causes and sources into earlier rows
MORE = [
    {"id": "job", "text": "Alice is now a staff data engineer at Helios Robotics.", "entities": ["Alice"],
     "occurred_at": "2024-01-10T00:00:00Z", "document_id": "diary", "chunk": "January: promotion."},
    {"id": "promo", "text": "Alice was promoted in January 2024.", "entities": ["Alice", "Helios Robotics"],
     "occurred_at": "2024-01-09T00:00:00Z", "causes": ["job"], "document_id": "diary",
     "chunk": "January: promotion.", "tags": ["work"]},
    {"id": "obs2", "text": "Alice's career keeps moving up.", "type": "observation", "sources": ["promo", "job"]},
]


def _fail_on_fan_out(verdict: Verdict, what: str) -> None:
    if verdict.fan_out:
        statement, plan = verdict.fan_out[0]
        pytest.fail(f"{what}: {len(verdict.fan_out)} statement(s) run on more than one shard; the first:\n"
                    f"{statement}\n--- plan ---\n{plan}", pytrace=False)


@pytest.fixture(params=["exact", "indexed"])
async def citus_engine(
    request: pytest.FixtureRequest, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Engine]:
    """An engine on the cluster: small banks ranked exactly, or every bank in the shared HNSW indexes
    (and links of new rows found through them), so both kinds of statement are checked."""
    overrides: dict[str, Any] = {}
    if request.param == "indexed":
        overrides["vector_index_min_rows"] = 1
        monkeypatch.setattr(links, "INDEX_MIN_ROWS", 0)
        monkeypatch.setattr(links, "INDEX_RATIO", 0)
    async with Engine(make_settings(**overrides)) as engine:
        require_citus(engine)
        yield engine


async def _check(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, what: str, bank: str, call: Any
) -> tuple[Any, Verdict]:
    """Run ``call`` recording its statements; fail if one plans, or ran, on a shard not holding ``bank``."""
    with recording(monkeypatch) as record:
        result = await call
    verdict = await explain_all(driver_url(engine), engine.settings.database_schema, record.sent)
    _fail_on_fan_out(verdict, what)
    # what ran, too: INSERT ... SELECT from a staging table and COPY plan no task, their rows find their shard
    elsewhere = await foreign_shards(driver_url(engine), bank, record.remote)
    assert not elsewhere, f"{what}: a worker ran a command on another bank's shard: {elsewhere[0]}"
    assert any(_SHARD.search(c) for c in record.remote), f"{what}: no command reached a shard"
    assert verdict.routed, f"{what}: no statement reached a shard"
    return result, verdict


async def test_retain_recall_and_bank_calls_each_run_on_one_shard(
    citus_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, bank = citus_engine, f"route-{uuid.uuid4().hex[:10]}"
    await _check(engine, monkeypatch, "retain into a new bank", bank, engine.retain(bank, ALICE))
    _, verdict = await _check(engine, monkeypatch, "retain into an existing bank", bank, engine.retain(bank, MORE))
    assert any(first_word(s) == "COPY" for s in verdict.copied)
    body, _ = await _check(engine, monkeypatch, "recall", bank, engine.recall(
        bank, "What happened with Alice's job in January 2024?", include_entities=500, include_chunks=500,
        include_source_facts=500, tags=["work"], tags_match="any", trace=True))
    assert body["results"], "the recall found nothing"
    await _check(engine, monkeypatch, "recall of observations", bank, engine.recall(
        bank, "How is Alice's career going?", types=["observation"], include_source_facts=500))
    stats, _ = await _check(engine, monkeypatch, "bank stats", bank, engine.bank_stats(bank))
    assert stats is not None and stats["memories"] == len({m["id"] for m in [*ALICE, *MORE]})
    removed, _ = await _check(engine, monkeypatch, "forget", bank, engine.forget(bank, ["promo", "pasta"]))
    assert removed == 2
    deleted, _ = await _check(engine, monkeypatch, "delete_bank", bank, engine.delete_bank(bank))
    assert deleted


async def test_listing_banks_is_the_statement_that_fans_out(
    citus_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing every bank reads every shard, by design: the one call not routed to one shard."""
    bank = f"route-{uuid.uuid4().hex[:10]}"
    await citus_engine.retain(bank, ALICE[:2])
    with recording(monkeypatch) as record:
        listed = await citus_engine.list_banks()
    assert bank in [b["bank_id"] for b in listed]
    verdict = await explain_all(driver_url(citus_engine), citus_engine.settings.database_schema, record.sent)
    assert [first_word(s) for s, _ in verdict.fan_out] == ["SELECT"]
    await citus_engine.delete_bank(bank)


async def test_a_statement_without_its_bank_is_caught(citus_engine: Engine) -> None:
    """The check itself: the same lookups without a bank_id filter plan on every shard and are reported."""
    ids = [uuid.uuid4()]
    unfiltered = [
        ("SELECT count(*) FROM memory_links WHERE from_unit_id = ANY(%(ids)s)", {"ids": ids}),
        ("DELETE FROM unit_entities WHERE unit_id = ANY(%(ids)s)", {"ids": ids}),
    ]
    filtered = [(s.replace("WHERE ", "WHERE bank_id = %(bank)s AND "), {**p, "bank": "b"}) for s, p in unfiltered]
    url, schema = driver_url(citus_engine), citus_engine.settings.database_schema
    assert len((await explain_all(url, schema, unfiltered)).fan_out) == 2
    verdict = await explain_all(url, schema, filtered)
    assert not verdict.fan_out and len(verdict.routed) == 2
