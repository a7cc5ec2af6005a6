"""The command line, run as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def cli(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir), "HINDSIGHT_API_RERANKER_PROVIDER": "rrf", **env}
    return subprocess.run([sys.executable, "-m", "hindsight_recall.cli", *args], capture_output=True, text=True,
                          env=environ, timeout=300)


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli") / "pg"


def test_unknown_backend_exits_non_zero_listing_installed(cli_dir: Path) -> None:
    result = cli("recall", "x", "--bank", "b", data_dir=cli_dir, HINDSIGHT_API_TEXT_SEARCH_EXTENSION="nope")
    assert result.returncode != 0
    assert "Installed choices:" in result.stderr and "native" in result.stderr and "Traceback" not in result.stderr


def test_invalid_setting_exits_with_the_variable(cli_dir: Path) -> None:
    result = cli("recall", "x", "--bank", "b", data_dir=cli_dir, HINDSIGHT_API_SEMANTIC_MIN_SIMILARITY="7")
    assert result.returncode != 0 and "HINDSIGHT_API_SEMANTIC_MIN_SIMILARITY" in result.stderr


def test_retain_then_recall_json(cli_dir: Path, tmp_path: Path) -> None:
    memories = tmp_path / "m.jsonl"
    memories.write_text("\n".join(json.dumps(m) for m in [
        {"id": "job", "text": "Alice works at Helios Robotics.", "entities": ["Alice"], "tags": ["work"]},
        {"id": "tea", "text": "Alice likes green tea.", "bank": "other-bank"},
    ]) + "\n")
    retained = cli("retain", str(memories), "--bank", "cli-bank", data_dir=cli_dir)
    assert retained.returncode == 0, retained.stderr
    assert "retained 2 memories in 2 bank(s)" in retained.stdout and "memories/s" in retained.stdout
    result = cli("recall", "Where does Alice work?", "--bank", "cli-bank", "--json", "--trace", data_dir=cli_dir)
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert [r["id"] for r in body["results"]] == ["job"]
    assert {"results", "results_truncated", "entities", "chunks", "trace"} <= set(body)
    plain = cli("recall", "Alice", "--bank", "cli-bank", "--tags", "work", "--tags-match", "all_strict", data_dir=cli_dir)
    assert plain.returncode == 0 and "job: Alice works at Helios Robotics." in plain.stdout


def test_retain_reports_bad_lines(cli_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": "x", "type": "gossip"}\n')
    result = cli("retain", str(bad), "--bank", "cli-bad", data_dir=cli_dir)
    assert result.returncode != 0 and "line 2: type" in result.stderr


def test_recall_rejects_bad_enum_and_timestamp(cli_dir: Path) -> None:
    assert cli("recall", "x", "--bank", "b", "--budget", "huge", data_dir=cli_dir).returncode == 2
    result = cli("recall", "x", "--bank", "b", "--query-timestamp", "soon", data_dir=cli_dir)
    assert result.returncode != 0 and "query_timestamp" in result.stderr


def test_bank_config_set_and_show(cli_dir: Path) -> None:
    result = cli("bank", "config", "cfg-bank", "RECALL_BUDGET_FIXED_MID=25", "enable_graph_retrieval=false", data_dir=cli_dir)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"recall_budget_fixed_mid": 25, "enable_graph_retrieval": False}
    shown = cli("bank", "config", "cfg-bank", data_dir=cli_dir)
    assert json.loads(shown.stdout)["recall_budget_fixed_mid"] == 25
    assert cli("bank", "config", "cfg-bank", "database_url=x", data_dir=cli_dir).returncode != 0
