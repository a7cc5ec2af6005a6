"""``bench load``: 64 and 256 clients at once from ``wrk`` in its own process. Every answer is 200, or
503/429 with Retry-After where the server sheds load on purpose; no socket error; p99 and memory bounded.

``nox -s faults`` runs each client count for 2 minutes (HINDSIGHT_LOAD_SECONDS=120); the suite for 10 s.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hindsight_recall.bench.load import LoadOptions, failures, script
from hindsight_recall.cli import main
from hindsight_recall.testing.plugin import REQUIRED_ENV

SECONDS = float(os.environ.get("HINDSIGHT_LOAD_SECONDS") or 10)


@pytest.fixture
def wrk() -> None:
    if shutil.which("wrk") is None:
        if os.environ.get(REQUIRED_ENV):
            pytest.fail("wrk is not installed (apt-get install wrk)")
        pytest.skip("wrk is not installed (apt-get install wrk)")


@pytest.mark.slow
def test_64_and_256_clients_get_answers_or_a_retry_after(wrk: None, tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    result = CliRunner().invoke(main, ["bench", "load", "--clients", "64,256", "--seconds", f"{SECONDS:g}",
                                       "--out", str(out)], env={"HF_HUB_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    print(json.dumps(report["runs"]))
    for run in report["runs"]:
        assert failures(run) == [], run
        assert run["by_status"].get("200", 0) > 0 and run["requests"] > 0
        assert run["latency_ms"]["p99"] < 30_000, run["latency_ms"]  # shed, not queued without end
        assert run["rss_mb"]["peak"] - run["rss_mb"]["start"] < 256, run["rss_mb"]
    assert [r["clients"] for r in report["runs"]] == [64, 256]
    assert "p99" in result.output and "wrk CPU" in result.output


def test_every_shed_answer_without_retry_after_and_every_other_error_is_a_failure() -> None:
    run = {"by_status": {"200": 90, "503": 5, "429": 2, "500": 1}, "without_retry_after": 3,
           "socket_errors": {"connect": 0, "read": 1, "write": 0, "timeout": 2, "status": 8}}
    assert failures(run) == ["1 answers of 500", "3 shed answers without Retry-After", "1 socket read errors",
                             "2 socket timeout errors"]


def test_the_script_mixes_recalls_and_retains_over_the_banks() -> None:
    lua = script(LoadOptions(retain_every=4), ["a", "b"])
    assert lua.count("/memories/recall") == 192 and lua.count('/memories"') == 64
    assert '/banks/a/' in lua and '/banks/b/' in lua and "SERIAL" in lua


@pytest.mark.parametrize("bad", [{"clients": ()}, {"clients": (0,)}, {"seconds": 0}, {"retain_every": 0}])
def test_bad_options_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LoadOptions(**bad)  # type: ignore[arg-type]


def test_the_cli_refuses_a_bad_client_list() -> None:
    result = CliRunner().invoke(main, ["bench", "load", "--clients", "x"])
    assert result.exit_code == 2 and "comma list" in result.output
