"""CPU seconds per recall for the benchmarks: the recalling process and its PostgreSQL server, per
recall, per phase and per arm (the clocks are ``recall/cost.py``'s).

CPU time barely moves with other work on the machine, where wall time does: these numbers can be
compared between runs on a busy machine that latency and throughput cannot.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ..recall import cost
from ..recall.trace import phase_sink


def postmaster_of_backend(pid: int) -> int | None:
    """The postmaster of server process ``pid`` (a backend, a checkpointer) if it runs on this machine
    (``/proc`` shows a ``postgres`` parent), else None: a remote server's CPU is not measured."""
    parent = cost.parent_pid(pid)
    if parent is None:
        return None
    try:
        name = Path(f"/proc/{parent}/comm").read_text().strip()
    except OSError:
        return None
    return parent if name.startswith("postgres") else None


async def postmaster(engine: Any) -> tuple[int, ...] | None:
    """The postmaster pids of the engine's database servers when they all run on this machine: its server
    and, on Citus, every worker's (a recall reads on the workers). None when one of them is remote."""
    found = [postmaster_of_backend(pid) for pid in await engine.diagnostics.server_pids()]
    return None if None in found else tuple(pid for pid in found if pid is not None)


def postmaster_of_data_dir(path: Path) -> int | None:
    """The postmaster pid written in a data directory's ``postmaster.pid``; None if it cannot be read."""
    try:
        return int((path / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages of the machine."""
    return [round(x, 2) for x in os.getloadavg()]


class Stretch:
    """CPU milliseconds per recall over a stretch of recalls (opened with the clocks read)."""

    def __init__(self, meter: cost.Meter) -> None:
        self.meter, self.before = meter, meter.clocks()

    def per_recall(self, recalls: int) -> dict[str, float]:
        """``process_ms``, ``server_ms`` (a local server only) and ``total_ms`` per recall."""
        used = self.meter.since(self.before)
        out = {f"{clock}_ms": round(seconds * 1000 / max(recalls, 1), 2) for clock, seconds in used.items()}
        out["total_ms"] = round(sum(out.values()), 2)
        return out


class PhaseCpu:
    """Recalls one at a time with a fresh :class:`~hindsight_recall.recall.cost.Meter` each; the mean
    CPU milliseconds per recall of every phase and every arm.

    :param postmaster: the server's postmaster pid, or a cluster's (None: only this process is measured).
    """

    def __init__(self, postmaster: int | Sequence[int] | None) -> None:
        self.postmaster = postmaster
        self.phases: dict[str, dict[str, list[float]]] = {}
        self.arms: dict[str, dict[str, float]] = {}
        self.totals: dict[str, list[float]] = {}
        self.recalls = 0

    async def recall(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``call`` (one recall) metered; its phases and arms are added to the means."""
        meter = cost.Meter(self.postmaster)
        phases: list[dict[str, Any]] = []
        tokens = cost.meter.set(meter), phase_sink.set(phases.extend)
        try:
            before = meter.clocks()
            body = await call()
            total = meter.since(before)
        finally:
            phase_sink.reset(tokens[1])
            cost.meter.reset(tokens[0])
        self.recalls += 1
        for clock, seconds in total.items():
            self.totals.setdefault(clock, []).append(seconds)
        for phase in phases:
            for clock, seconds in phase.get("cpu_seconds", {}).items():
                self.phases.setdefault(phase["phase_name"], {}).setdefault(clock, []).append(seconds)
        for arm, clocks in meter.arms.items():
            for clock, seconds in clocks.items():
                self.arms.setdefault(arm, {})[clock] = self.arms.get(arm, {}).get(clock, 0.0) + seconds
        return body

    def summary(self) -> dict[str, Any]:
        """Milliseconds per recall: ``total`` (with the meter's own reads), ``phases``, ``arms`` and
        ``outside_phases`` (the total less the phases: request, response and the meter's reads)."""
        n = max(self.recalls, 1)

        def ms(values: list[float]) -> float:
            return round(sum(values) * 1000 / n, 3)

        total = {clock: ms(v) for clock, v in self.totals.items()}
        phases = {name: {clock: ms(v) for clock, v in clocks.items()} for name, clocks in self.phases.items()}
        outside = {clock: round(value - sum(p.get(clock, 0.0) for p in phases.values()), 3)
                   for clock, value in total.items()}
        arms = {arm: {clock: round(s * 1000 / n, 3) for clock, s in clocks.items()}
                for arm, clocks in self.arms.items()}
        return {"recalls": self.recalls, "total": total, "phases": phases, "outside_phases": outside, "arms": arms,
                "median_total": {c: round(statistics.median(v) * 1000, 3) for c, v in self.totals.items()}}


def describe(summary: dict[str, Any], top: int = 8) -> str:
    """Lines for the console: the total, the costliest phases and every arm, in ms of CPU per recall."""
    def clocks(values: dict[str, float]) -> str:
        return ", ".join(f"{clock} {ms:.1f}" for clock, ms in values.items())

    phases = sorted(summary["phases"].items(), key=lambda kv: -sum(kv[1].values()))[:top]
    lines = [f"CPU ms per recall (metered pass): {clocks(summary['total'])}",
             "  phases: " + "; ".join(f"{name} {clocks(v)}" for name, v in phases),
             "  arms: " + "; ".join(f"{arm} {clocks(v)}" for arm, v in summary["arms"].items())]
    return "\n".join(lines)
