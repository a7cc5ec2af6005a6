"""What a recall costs the machine in CPU, by phase and by arm, read only when a benchmark installs a
:class:`Meter` (``meter.set(...)``); with none, every hook here is one context-variable lookup.

Wall time on a shared machine says how busy the machine was; CPU seconds say what the work cost. The
meter reads this process's CPU (all its threads) and the database server's (its postmaster and every
process the postmaster started, from ``/proc``: a local server only) around each trace phase; each arm
statement's own backend before and after it runs; and the Python time an arm spends turning rows into
objects. Phases overlap nothing but the arms that start early (see ``recall/pipeline.py``), so with
one recall at a time a phase's process and server CPU are its own.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); None if unreadable."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user and system, all threads) ``pid`` has used; None if ``/proc`` does not show it."""
    fields = _stat(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICK


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (a backend's is its postmaster); None if ``/proc`` does not show it."""
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def task_cpu(pid: int) -> float | None:
    """CPU seconds of a single-threaded process (a PostgreSQL backend), to the nanosecond
    (``/proc/<pid>/schedstat``; ``stat`` counts in ticks of 10 ms)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def server_cpu(postmaster: int) -> float | None:
    """CPU seconds of a PostgreSQL server: its postmaster, every running child (backends, workers,
    background processes) and the children that ended (counted when the postmaster reaps them)."""
    fields = _stat(postmaster)
    if fields is None:
        return None
    ended = (int(fields[13]) + int(fields[14])) / _TICK
    try:
        children = [int(p) for p in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()]
    except OSError:
        children = []
    return (task_cpu(postmaster) or 0.0) + ended + sum(task_cpu(c) or 0.0 for c in children)


class Meter:
    """CPU clocks of one process and one database server, and what each arm spent.

    :param postmaster: the database server's postmaster pid, or those of a cluster's servers (a Citus
        coordinator and its workers), summed (None: a remote server, not measured).
    :param process: the measured process (None: this one, read with :func:`time.process_time`).
    """

    def __init__(self, postmaster: int | Sequence[int] | None = None, process: int | None = None) -> None:
        pids = () if postmaster is None else (postmaster,) if isinstance(postmaster, int) else postmaster
        self.postmasters = tuple(pids)
        self.process = process
        self.arms: dict[str, dict[str, float]] = {}

    def clocks(self) -> dict[str, float]:
        """CPU seconds so far: ``process`` and, for a local server, ``server``. The process is read
        last here and first in :meth:`since`, so reading the server's clock is not charged to it."""
        out = self._server()
        return {**out, **self._process()}

    def since(self, before: dict[str, float]) -> dict[str, float]:
        """CPU seconds used since ``before`` (a :meth:`clocks` reading), per clock."""
        now = self._process()
        now.update(self._server())
        return {k: round(now[k] - v, 6) for k, v in before.items() if k in now}

    def _process(self) -> dict[str, float]:
        own = time.process_time() if self.process is None else process_cpu(self.process)
        return {} if own is None else {"process": own}

    def _server(self) -> dict[str, float]:
        servers = [server_cpu(pid) for pid in self.postmasters]
        return {} if not servers or None in servers else {"server": sum(s for s in servers if s is not None)}

    def add(self, arm: str, clock: str, seconds: float) -> None:
        entry = self.arms.setdefault(arm, {})
        entry[clock] = entry.get(clock, 0.0) + seconds


#: the meter of the running recall; none outside benchmarks
meter: ContextVar[Meter | None] = ContextVar("hindsight_recall_cpu_meter", default=None)


@asynccontextmanager
async def statement(conn: Any, arm: str) -> AsyncIterator[None]:
    """Charge the CPU the connection's backend spends inside the block to ``arm`` (as ``server``)."""
    m = meter.get()
    if m is None:
        yield
        return
    raw = await conn.get_raw_connection()
    pid = raw.driver_connection.info.backend_pid
    before = task_cpu(pid)
    yield
    after = task_cpu(pid)
    if before is not None and after is not None:
        m.add(arm, "server", after - before)


@contextmanager
def python(arm: str) -> Iterator[None]:
    """Charge the CPU this thread spends inside the (synchronous) block to ``arm`` (as ``python``)."""
    m = meter.get()
    if m is None:
        yield
        return
    started = time.thread_time()
    yield
    m.add(arm, "python", time.thread_time() - started)
