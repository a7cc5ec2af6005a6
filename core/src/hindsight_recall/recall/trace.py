"""Phase timings and details for the recall trace."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from . import cost

#: Phases that overlap others; they are reported but not part of the additive total.
DIAGNOSTIC_PREFIXES = ("retrieval_", "semaphore_wait", "connection_wait")

#: A caller that wants every recall's phases without asking for the trace (the HTTP service's
#: metrics) sets this; it receives the phase list when the trace stops.
phase_sink: ContextVar[Callable[[list[dict[str, Any]]], None] | None] = ContextVar("phase_sink", default=None)


class Trace:
    """Collects phases in order; cheap enough to run on every recall."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.finished: float | None = None
        self.phases: list[dict[str, Any]] = []
        self.sections: dict[str, Any] = {}
        self.meter = cost.meter.get()  # a benchmark's: each phase's CPU seconds too

    @contextmanager
    def phase(self, name: str, **details: Any) -> Iterator[dict[str, Any]]:
        """Time a phase; the yielded dict collects its details."""
        clocks = self.meter.clocks() if self.meter is not None else None
        start = time.perf_counter()
        try:
            yield details
        finally:
            duration = time.perf_counter() - start
            cpu = self.meter.since(clocks) if self.meter is not None and clocks is not None else None
            self.add(name, duration, details, cpu)

    def add(self, name: str, duration: float, details: dict[str, Any] | None = None,
            cpu: dict[str, float] | None = None) -> None:
        """Record a phase; ``cpu``: CPU seconds per clock, when a benchmark meters the recall."""
        entry = {"phase_name": name, "duration_seconds": round(duration, 6), "details": details or {}}
        if cpu is not None:
            entry["cpu_seconds"] = cpu
        self.phases.append(entry)

    def finish(self) -> None:
        """Stop the clock: what follows (assembling JSON) is not part of the measured recall."""
        self.finished = time.perf_counter()
        sink = phase_sink.get()
        if sink is not None:
            sink(self.phases)

    def summary(self, results_returned: int) -> dict[str, Any]:
        end = self.finished or time.perf_counter()
        return {
            "total_duration_seconds": round(end - self.started, 6),
            "results_returned": results_returned,
            "phase_metrics": self.phases,
        }
