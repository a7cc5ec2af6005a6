"""``bench retain``: ``serve`` retains through a stand-in model with a delay, then without; every item's facts
are stored, the calls in flight stay within ``RETAIN_LLM_MAX_CONCURRENT`` and the overlap is reported."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hindsight_recall import Engine
from hindsight_recall.bench.retain import (
    RetainOptions,
    conversation,
    expected_facts,
    failures,
    overlap,
    run_retain,
    workload,
)
from hindsight_recall.cli import main


def test_a_tiny_run_stores_every_item_through_the_model(tmp_path: Path) -> None:
    out = tmp_path / "retain.json"
    result = CliRunner().invoke(main, ["bench", "retain", "--items", "20", "--batch", "5", "--clients", "2",
                                       "--model-delay", "0.05", "--max-concurrent", "4", "--out", str(out),
                                       "--log", str(tmp_path / "server.log")],
                                env={"HF_HUB_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["options"]["items"] == 20 and report["options"]["database"] == "embedded"
    assert len(report["load_average_start"]) == 3 and report["cpus"] >= 1
    delayed, plain = report["runs"]
    assert (delayed["model_delay"], plain["model_delay"]) == (0.05, 0.0)
    expected = expected_facts(workload(RetainOptions(items=20)))
    for run in report["runs"]:
        assert run["errors"] == {} and run["requests"] == 4 and run["items_acknowledged"] == 20
        # counted through the API's memory list: every item's facts, no more
        assert run["memories_stored"] == run["memories_acknowledged"] == run["memories_expected"] == expected >= 20
        assert run["facts_per_item"] == expected / 20 and 1 <= run["facts_per_item"] <= 3
        assert run["model_calls"] >= 20 and run["calls_per_item"] >= 1
        assert 1 <= run["max_in_flight_at_model"] <= 4  # RETAIN_LLM_MAX_CONCURRENT holds
        assert run["items_per_second"] > 0 and run["wall_seconds"] > 0
    assert delayed["max_in_flight_at_model"] == 4  # 2 requests of 5 items wait on the model at once
    assert report["items_per_second"] == delayed["items_per_second"]
    assert report["calls_per_item"] == delayed["calls_per_item"] >= 1
    o = report["overlap"]
    assert o["calls_in_flight_ceiling"] == 4
    assert o["model_bound_seconds"] == pytest.approx(delayed["model_calls"] * 0.05 / 4, abs=1e-3)
    assert o["wall_with_delay_seconds"] == delayed["wall_seconds"] >= o["model_bound_seconds"]
    assert o["ratio"] > 0 and 0.5 <= o["complete_overlap_ratio"] < 1
    assert failures(report) == []
    for line in ("load average", "items/s", "memories per item", "model calls per item", "in flight", "overlap:"):
        assert line in result.output


async def test_on_a_database_url_its_banks_are_deleted_afterwards(engine: Engine, tmp_path: Path) -> None:
    before = {b["bank_id"] for b in await engine.list_banks()}
    options = RetainOptions(items=6, batch=3, clients=1, model_delay=0.01, max_concurrent=2,
                            database_url=engine.db.url, log=tmp_path / "server.log")
    report = await run_retain(options, echo=lambda line: None)
    assert report["options"]["database"] == "url" and report["options"]["database_url"] is None
    assert failures(report) == [] and [r["memories_stored"] for r in report["runs"]] == [expected_facts(
        workload(options))] * 2
    assert max(r["max_in_flight_at_model"] for r in report["runs"]) <= 2 and (tmp_path / "server.log").exists()
    assert {b["bank_id"] for b in await engine.list_banks()} == before


def test_items_are_chats_of_one_to_three_sentences_the_same_for_a_seed() -> None:
    rng = random.Random(3)
    texts = [conversation(rng) for _ in range(200)]
    assert {len(re.findall(r"\.(?: |$)", t)) for t in texts} == {1, 2, 3}
    assert all(re.match(r"[A-Z][a-z]+: [A-Z]", t) for t in texts)
    items = workload(RetainOptions(items=30, seed=5))
    assert items == workload(RetainOptions(items=30, seed=5)) != workload(RetainOptions(items=30, seed=6))
    assert expected_facts(items) == sum(len(re.findall(r"\.(?: |$)", i["content"])) for i in items)


def test_overlap_against_the_model_alone_plus_the_run_without_delay() -> None:
    options = RetainOptions(items=1000, batch=50, clients=4, max_concurrent=32)
    got = overlap(options, {"model_calls": 1000, "model_delay": 0.2, "wall_seconds": 9.0}, {"wall_seconds": 3.0})
    assert got["model_bound_seconds"] == 6.25 and got["calls_in_flight_ceiling"] == 32
    assert got["ratio"] == round(9.0 / 9.25, 3) and got["complete_overlap_ratio"] == round(6.25 / 9.25, 3)
    few = overlap(RetainOptions(batch=2, clients=3, max_concurrent=32), {"model_calls": 12, "model_delay": 0.5,
                                                                         "wall_seconds": 1.0}, {"wall_seconds": 1.0})
    assert few["calls_in_flight_ceiling"] == 6 and few["model_bound_seconds"] == 1.0


def test_a_missing_memory_or_a_failed_retain_is_a_failure() -> None:
    run = {"model_delay": 0.2, "items": 10, "items_acknowledged": 8, "errors": {"status 503": 1},
           "memories_stored": 15, "memories_acknowledged": 16, "memories_expected": 16}
    assert failures({"runs": [run]}) == ["model delay 0.2 s: 1 retains failed with status 503",
                                         "model delay 0.2 s: 8 of 10 items acknowledged",
                                         "model delay 0.2 s: 15 memories stored, 16 acknowledged, 16 expected"]


@pytest.mark.parametrize("bad", [{"items": 0}, {"batch": 0}, {"clients": 0}, {"max_concurrent": 0},
                                 {"model_delay": -0.1}])
def test_options_out_of_range_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetainOptions(**bad)  # type: ignore[arg-type]
