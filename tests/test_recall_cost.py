"""CPU per recall: the meter's clocks read this process and the real embedded server, by phase and by arm."""

from __future__ import annotations

import os
import time
from typing import Any

from hindsight_recall.bench._cpu import PhaseCpu, Stretch, describe, postmaster, postmaster_of_backend
from hindsight_recall.recall import cost
from hindsight_recall.recall.trace import Trace


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_proc_readers_see_this_process_and_refuse_a_missing_one() -> None:
    assert cost.parent_pid(os.getpid()) == os.getppid()
    assert (cost.process_cpu(os.getpid()) or 0.0) >= 0.0 and (cost.task_cpu(os.getpid()) or 0.0) > 0.0
    missing = 2**22 + 7  # above the kernel's largest pid
    assert cost.process_cpu(missing) is None and cost.task_cpu(missing) is None and cost.parent_pid(missing) is None
    assert cost.server_cpu(missing) is None
    assert postmaster_of_backend(os.getpid()) is None  # this process's parent is not a postgres


def test_a_phase_is_charged_the_cpu_it_spent_and_nothing_without_a_meter() -> None:
    bare = Trace()
    with bare.phase("work"):
        _busy(0.01)
    assert "cpu_seconds" not in bare.phases[0]
    token = cost.meter.set(cost.Meter())
    try:
        trace = Trace()
        with trace.phase("work"):
            _busy(0.03)
        with trace.phase("idle"):
            time.sleep(0.03)
    finally:
        cost.meter.reset(token)
    work, idle = (p["cpu_seconds"]["process"] for p in trace.phases)
    assert 0.03 <= work < 0.06 and idle < 0.01
    assert "server" not in trace.phases[0]["cpu_seconds"]  # no postmaster given


def test_a_cluster_meter_sums_its_servers_and_counts_none_when_one_is_unreadable() -> None:
    me = os.getpid()
    one, two = cost.Meter(me).clocks(), cost.Meter([me, me]).clocks()
    assert two["server"] >= 2 * one["server"] > 0.0
    assert "server" not in cost.Meter([me, 2**22 + 7]).clocks()  # a server it cannot see: not measured at all


def test_stretch_divides_by_the_recalls() -> None:
    stretch = Stretch(cost.Meter())
    _busy(0.04)
    got = stretch.per_recall(4)
    assert 10 <= got["process_ms"] < 20 and got["total_ms"] == got["process_ms"]


async def test_a_metered_recall_costs_server_and_process_cpu_by_phase_and_arm(engine: Any, alice: str) -> None:
    pids = await postmaster(engine)
    # one server, or on Citus the coordinator and every active worker: all on this machine in the tests
    workers = (await engine.diagnostics.server([])).get("workers", 0) if engine.diagnostics.citus else 0
    assert pids is not None and len(pids) == 1 + workers and len(set(pids)) == len(pids)
    assert all((cost.server_cpu(pid) or 0.0) > 0.0 for pid in pids)
    metered = PhaseCpu(pids)
    for query in ("Where does Alice work?", "What did Alice do in June 2023?"):
        body = await metered.recall(lambda query=query: engine.recall(alice, query, budget="mid"))
        assert body["results"]
    summary = metered.summary()
    assert summary["recalls"] == 2 and summary["total"]["process"] > 0 and summary["total"]["server"] > 0
    assert summary["phases"]["parallel_retrieval"]["server"] > 0
    assert {"rrf_merge", "combined_scoring", "token_filtering"} <= set(summary["phases"])
    # the SQL arms' own backends and their row mapping
    assert any(clocks.get("server", 0) > 0 for clocks in summary["arms"].values())
    assert any("python" in clocks for clocks in summary["arms"].values())
    assert "keyword" in summary["arms"] and any("semantic" in arm for arm in summary["arms"])
    assert "CPU ms per recall" in describe(summary)
    assert cost.meter.get() is None  # the meter ends with the recall


async def test_an_unmetered_recall_reports_no_cpu(engine: Any, alice: str) -> None:
    body = await engine.recall(alice, "Where does Alice work?", budget="mid", trace=True)
    assert all("cpu_seconds" not in p for p in body["trace"]["summary"]["phase_metrics"])
