"""``bench soak`` runs ``serve`` under recalls and retains, samples its RSS and checks what was stored."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hindsight_recall import Engine
from hindsight_recall.bench import soak
from hindsight_recall.bench.soak import SoakOptions, failures, growth, memory_rss, query, run_soak, sentence
from hindsight_recall.cli import main


def test_a_short_soak_on_its_own_embedded_database(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    result = CliRunner().invoke(main, ["bench", "soak", "--minutes", "0.2", "--clients", "2", "--banks", "3",
                                       "--seed-memories", "2", "--sample-seconds", "4", "--checks", "6",
                                       "--recall-share", "0.5", "--out", str(out), "--flat-within", "500"],
                           env={"HF_HUB_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["options"]["database"] == "embedded" and report["options"]["clients"] == 2
    assert report["requests"]["errors"] == 0 and report["requests"]["retains"] > 0 < report["requests"]["recalls"]
    assert report["acknowledged"] == report["stored"] >= 6 and report["banks_short"] == {}
    assert report["recall_checks"] == 6 and report["recalled"] == 6
    assert len(report["samples"]) >= 3 and all(s["rss_mb"] > 50 for s in report["samples"])
    assert [s["minute"] for s in report["samples"]] == sorted(s["minute"] for s in report["samples"])
    assert "RSS:" in result.output and "acknowledged" in result.output


async def test_on_a_database_url_its_banks_are_deleted_afterwards(engine: Engine, tmp_path: Path) -> None:
    before = {b["bank_id"] for b in await engine.list_banks()}
    options = SoakOptions(minutes=0.1, clients=1, banks=2, seed_memories=1, sample_seconds=3, checks=2,
                          database_url=engine.db.url, log=tmp_path / "server.log")
    report = await run_soak(options, echo=lambda line: None)
    assert report["options"]["database"] == "url" and report["acknowledged"] == report["stored"] >= 2
    assert report["recalled"] == 2 and (tmp_path / "server.log").exists()
    assert {b["bank_id"] for b in await engine.list_banks()} == before


@pytest.mark.parametrize("bad", [dict(minutes=0), dict(clients=0), dict(recall_share=1.5), dict(sample_seconds=0),
                                 dict(checks=-1), dict(max_items=0)])
def test_options_out_of_range_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SoakOptions(**bad)  # type: ignore[arg-type]


def test_server_env_must_be_name_value() -> None:
    result = CliRunner().invoke(main, ["bench", "soak", "--server-env", "MALLOC_ARENA_MAX"])
    assert result.exit_code == 2 and "NAME=VALUE" in result.output


def test_growth_over_the_last_window() -> None:
    samples = [{"minute": m, "rss_mb": 100 + m} for m in range(0, 31)]
    assert growth(samples, 10) == pytest.approx(100 * (130 - 120) / 120, abs=0.01)
    assert growth(samples, 30) == 30.0
    assert growth(samples[:1], 10) is None
    assert growth(samples, 10, in_mb=True) == 10.0


def passing_report(**changes: object) -> dict[str, object]:
    report: dict[str, object] = {"rss_growth_second_half_mb": 4.0, "requests": {"errors": 0}, "errors_by_kind": {},
                                 "acknowledged": 90, "stored": 90}
    return {**report, **changes}


def test_what_fails_a_soak() -> None:
    assert failures(passing_report(), 10) == []
    assert failures(passing_report(rss_growth_second_half_mb=10.0), 10) == []
    assert failures(passing_report(rss_growth_second_half_mb=10.1), 10) == [
        "RSS grew by 10.1 MB over the second half, more than 10 MB"]
    assert "too few samples" in failures(passing_report(rss_growth_second_half_mb=None), 10)[0]
    assert failures(passing_report(requests={"errors": 2}, errors_by_kind={"recall 500": 2}), 10) == [
        "2 requests failed: {'recall 500': 2}"]
    assert failures(passing_report(stored=89), 10) == ["90 memories acknowledged, 89 stored"]


def test_flat_within_fails_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    async def grown(options: SoakOptions, echo: object) -> dict[str, object]:
        return passing_report(rss_growth_second_half_mb=25.0)

    monkeypatch.setattr(soak, "run_soak", grown)
    result = CliRunner().invoke(main, ["bench", "soak", "--flat-within", "10"])
    assert result.exit_code == 1 and "RSS grew by 25.0 MB over the second half, more than 10 MB" in result.output
    assert CliRunner().invoke(main, ["bench", "soak", "--flat-within", "30"]).exit_code == 0
    assert CliRunner().invoke(main, ["bench", "soak", "--flat-within", "-1"]).exit_code == 2


def test_rss_of_this_process_and_texts() -> None:
    import random

    rss = memory_rss(os.getpid())
    assert rss["rss_mb"] > 10 and rss["peak_mb"] >= rss["rss_mb"] and rss["threads"] >= 1
    rng = random.Random(1)
    texts = [sentence(rng, f"s{i}") for i in range(50)]
    assert len(set(texts)) == 50 and all(t.endswith(f"(note s{i})") for i, t in enumerate(texts))
    assert 2 <= len(query(rng).split()) <= 14
