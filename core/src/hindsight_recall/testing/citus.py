"""Checks that a call on a Citus coordinator stays on its bank's shard, for tests and the compliance suite.

:func:`check_routed` runs a call while recording every statement the engine sends (SQLAlchemy's and the
raw psycopg ones, COPY included) and every command the coordinator passes on to the workers. It then
plans each statement again with ``EXPLAIN`` and the same parameters and fails when a plan has more
than one task (it would run on every shard), and fails when a worker ran a command on a shard that
does not hold the bank, or when the coordinator sent the call's commands to more than one worker (or,
given ``max_commands``, more commands than that: each statement of a transaction costs at least one
command, and so do ``BEGIN`` and the commit, two when it commits in two phases, as after a COPY).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from sqlalchemy.engine import make_url

from ..store.citus import DISTRIBUTED
from ..store.vector_types import register_vector

T = TypeVar("T")

_TASKS = re.compile(r"Task Count: (\d+)")
_EXPLAINABLE = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")
#: the session's staging tables (temporary, on the coordinator)
_STAGING = ("retain_stage", "stage_links")


def driver_url(engine: Any) -> str:
    """The engine's database URL in libpq form."""
    from ..store.db import sqlalchemy_url

    return sqlalchemy_url(engine.db.url).replace("postgresql+psycopg://", "postgresql://", 1)


@dataclass(frozen=True)
class RemoteCommand:
    """One command the coordinator sent to a worker."""

    #: the worker, as ``host:port``
    node: str
    #: the command's text (with the shards' names)
    text: str


@dataclass
class Statements:
    """Every statement the engine sent while recording, with its parameters (COPY included)."""

    sent: list[tuple[str, Any]] = field(default_factory=list)
    #: the server each of :attr:`sent` went to, as ``host:port`` (a recall's reads go to a worker)
    servers: list[str] = field(default_factory=list)
    #: the coordinator's notices meanwhile (``citus.log_remote_commands``): its commands to the workers,
    #: and the other notices of those connections
    remote: list[str] = field(default_factory=list)
    #: the commands among them, with the worker each went to
    commands: list[RemoteCommand] = field(default_factory=list)
    watched: set[int] = field(default_factory=set)

    def listing(self) -> str:
        """The commands, one a line, numbered (for failure messages)."""
        return "\n".join(f"{i:3d}. {c.node}: {c.text[:160]}" for i, c in enumerate(self.commands, start=1))


#: the detail of a remote-command notice names the worker: "on server user@host:port connectionId: n"
_SERVER = re.compile(r"on server \S*?@?([^@\s]+:\d+)")


def _noted(record: Statements, notice: Any) -> None:
    message = notice.message_primary or ""
    record.remote.append(message)
    if message.startswith("issuing "):
        found = _SERVER.search(notice.message_detail or "")
        record.commands.append(RemoteCommand(found.group(1) if found else "?", message[len("issuing "):]))


@contextlib.contextmanager
def recording(into: Statements | None = None) -> Iterator[Statements]:
    """Record what every psycopg cursor executes or copies (SQLAlchemy's and the raw ones), and what
    the coordinator sends on to the workers for it (on connections first used while recording).

    :param into: record into this (fresh: a new one).
    """
    record = into if into is not None else Statements()
    execute, copy = psycopg.AsyncCursor.execute, psycopg.AsyncCursor.copy
    # taken off when the recording ends: pooled connections outlive it, and would go on noting into it
    handlers: list[tuple[Any, Any]] = []

    async def recorded_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if id(self.connection) not in record.watched:
            record.watched.add(id(self.connection))
            handlers.append((self.connection, lambda d: _noted(record, d)))
            self.connection.add_notice_handler(handlers[-1][1])
            await execute(self, "SET citus.log_remote_commands = on")
        record.sent.append((str(query), params))
        record.servers.append(f"{self.connection.info.host}:{self.connection.info.port}")
        return await execute(self, query, params, **kw)

    def recorded_copy(self: Any, statement: Any, params: Any = None, **kw: Any) -> Any:
        record.sent.append((str(statement), params))
        record.servers.append(f"{self.connection.info.host}:{self.connection.info.port}")
        return copy(self, statement, params, **kw)

    psycopg.AsyncCursor.execute = recorded_execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.copy = recorded_copy  # type: ignore[method-assign]
    try:
        yield record
    finally:
        psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
        psycopg.AsyncCursor.copy = copy  # type: ignore[method-assign]
        for connection, handler in handlers:
            connection.remove_notice_handler(handler)
        record.watched.clear()  # recorded into again, the connections get their handler again


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
_SHARD = re.compile(rf"\b(?:{'|'.join(DISTRIBUTED)})_(\d{{6,}})\b")


async def foreign_shards(url: str, bank_id: str, remote: list[str]) -> list[str]:
    """The worker commands that name a shard not holding ``bank_id`` (executed, not planned)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await (await conn.execute(
            "SELECT get_shard_id_for_distribution_column(logicalrelid, CAST(%s AS text)) FROM pg_dist_partition "
            "WHERE partmethod = 'h'", (bank_id,))).fetchall()
    mine = {r[0] for r in rows}
    return [c for c in remote if {int(n) for n in _SHARD.findall(c)} - mine]


def first_word(statement: str) -> str:
    """The statement's first keyword, upper-cased (``SELECT`` for a parenthesised union)."""
    return statement.lstrip(" (").split(None, 1)[0].upper() if statement.strip() else ""


async def explain_all(url: str, schema: str, statements: list[tuple[str, Any]]) -> Verdict:
    """``EXPLAIN`` every statement with its parameters on a connection set up as the engine's are.

    Temporary staging tables the engine created are created here too, so statements reading them plan.
    """
    verdict = Verdict()
    options = f'-c search_path="{schema}",public -c plan_cache_mode=force_custom_plan'
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, options=options) as conn:
        await register_vector(conn)  # vectors bound as parameters (numpy arrays) plan again too
        for statement, params in statements:
            word = first_word(statement)
            if word == "CREATE" and " TEMP " in statement.upper():
                await conn.execute(statement)
                continue
            if word == "COPY":
                target = statement.split()[1]
                if target in _STAGING:
                    verdict.local.append(statement)
                else:
                    assert "bank_id" in statement, f"COPY into a distributed table without its bank_id: {statement}"
                    verdict.copied.append(statement)
                continue
            if word not in _EXPLAINABLE:
                verdict.local.append(statement)
                continue
            # recall's arms send ``$n`` placeholders with positional parameters, through a raw cursor
            raw = isinstance(params, (list, tuple)) and "$1" in statement
            async with psycopg.AsyncRawCursor(conn) if raw else conn.cursor() as cursor:
                await cursor.execute(f"EXPLAIN {statement}", params)
                rows = await cursor.fetchall()
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


def check_one_worker(record: Statements, what: str, max_commands: int | None = None) -> None:
    """Fail when the recorded commands went to more than one worker, or number more than ``max_commands``.

    :raises AssertionError: listing every command with its worker.
    """
    nodes = sorted({c.node for c in record.commands})
    if len(nodes) > 1:
        raise AssertionError(f"{what}: commands went to {len(nodes)} workers ({', '.join(nodes)}):\n"
                             f"{record.listing()}")
    if max_commands is not None and len(record.commands) > max_commands:
        raise AssertionError(f"{what}: {len(record.commands)} remote commands, more than {max_commands}:\n"
                             f"{record.listing()}")


async def check_routed(
    engine: Any, bank_id: str, call: Awaitable[T], what: str, *, max_commands: int | None = None,
    record: Statements | None = None,
) -> tuple[T, Verdict]:
    """Run ``call``; fail if one of its statements plans, or one of its worker commands ran, off the
    shards that hold ``bank_id``.

    :param engine: an open engine on a Citus coordinator.
    :param bank_id: the one bank the call is about.
    :param call: the call, not yet awaited (e.g. ``engine.recall(bank, "...")``).
    :param what: names the call in failure messages.
    :param max_commands: also fail when the call's commands number more.
    :param record: a :class:`Statements` to record into (the caller reads the commands afterwards).
    :raises AssertionError: naming the first statement that would run on more than one shard (with
        its plan), the first worker command on another bank's shard, or listing the commands that
        went to a second worker or past ``max_commands``.
    """
    with recording(record) as record:
        result = await call
    url = driver_url(engine)
    coordinator = make_url(url)
    here = f"{coordinator.host}:{coordinator.port}"
    # statements sent straight to a worker (a recall's reads, on the bank's shards) count as its commands
    for (statement, _), server in zip(record.sent, record.servers, strict=True):
        if server != here:
            record.commands.append(RemoteCommand(server, statement))
            record.remote.append(statement)
    on_coordinator = [sent for sent, server in zip(record.sent, record.servers, strict=True) if server == here]
    verdict = await explain_all(url, engine.settings.database_schema, on_coordinator)
    if verdict.fan_out:
        statement, plan = verdict.fan_out[0]
        raise AssertionError(f"{what}: {len(verdict.fan_out)} statement(s) run on more than one shard; the "
                             f"first:\n{statement}\n--- plan ---\n{plan}")
    # what ran, too: INSERT ... SELECT from a staging table and COPY plan no task; their rows find their shard
    elsewhere = await foreign_shards(url, bank_id, record.remote)
    if elsewhere:
        raise AssertionError(f"{what}: a worker ran a command on another bank's shard: {elsewhere[0]}")
    if not any(_SHARD.search(c) for c in record.remote):
        raise AssertionError(f"{what}: no command reached a shard")
    check_one_worker(record, what, max_commands)
    return result, verdict
