"""The command line, run as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hindsight_recall import Engine, InvalidRequest


def cli(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir),
        "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
        **env,
    }
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
    plain = cli(
        "recall", "Alice", "--bank", "cli-bank", "--tags", "work", "--tags-match", "all_strict", data_dir=cli_dir
    )
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
    result = cli(
        "bank", "config", "cfg-bank", "RECALL_BUDGET_FIXED_MID=25", "enable_graph_retrieval=false", data_dir=cli_dir
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"recall_budget_fixed_mid": 25, "enable_graph_retrieval": False}
    shown = cli("bank", "config", "cfg-bank", data_dir=cli_dir)
    assert json.loads(shown.stdout)["recall_budget_fixed_mid"] == 25
    assert cli("bank", "config", "cfg-bank", "database_url=x", data_dir=cli_dir).returncode != 0


def test_recall_limit_keeps_the_top_results(cli_dir: Path, tmp_path: Path) -> None:
    memories = tmp_path / "limit.jsonl"
    memories.write_text("\n".join(json.dumps({"id": f"m{i}", "text": f"Alice visited Lisbon, trip number {i}."})
                                  for i in range(3)) + "\n")
    assert cli("retain", str(memories), "--bank", "cli-limit", data_dir=cli_dir).returncode == 0
    result = cli("recall", "Alice Lisbon trip", "--bank", "cli-limit", "--limit", "2", "--json", data_dir=cli_dir)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["results"]) == 2


def test_recall_limit_must_be_positive(cli_dir: Path) -> None:
    result = cli("recall", "x", "--bank", "b", "--limit", "0", data_dir=cli_dir)
    assert result.returncode == 2 and "--limit" in result.stderr


#: Modules of the model stack: seconds to import, needed only to embed, rerank or read dates (and the MCP SDK,
#: needed only to serve).
MODEL_STACK = ("torch", "sentence_transformers", "transformers", "dateparser", "mcp")


@pytest.mark.parametrize("args", [["--help"], ["recall", "--help"], ["bank", "--help"], ["plugins"],
                                  ["mcp", "--help"]],
                         ids=" ".join)
def test_cheap_commands_do_not_import_the_model_stack(args: list[str]) -> None:
    # standalone_mode=False: click returns instead of exiting, so the module list can be printed after.
    script = (
        "import sys, json\n"
        "from hindsight_recall.cli import main\n"
        f"main({args!r}, standalone_mode=False)\n"
        f"print(json.dumps([m for m in {MODEL_STACK!r} if m in sys.modules]), file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HINDSIGHT_API_RERANKER_PROVIDER": "local"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stderr.strip().splitlines()[-1]) == []


def test_a_new_process_recalls_without_the_date_finder_or_a_new_calibration(cli_dir: Path, tmp_path: Path) -> None:
    """A one-shot recall whose date the rules read leaves the date finder unloaded, and the floors'
    calibration is computed by the first process only: later ones read it from disk."""
    memories = tmp_path / "m.jsonl"
    memories.write_text(json.dumps({"id": "hike", "text": "Tomasz hiked in the Tatras.",
                                    "occurred_at": "2024-04-10T00:00:00Z"}) + "\n")
    assert cli("retain", str(memories), "--bank", "fresh-process", data_dir=cli_dir).returncode == 0
    script = (
        "import json, sys\n"
        "from hindsight_recall.recall import floors\n"
        "calls = []\n"
        "computed = floors.calibrate\n"
        "async def counted(*args, **kwargs):\n"
        "    calls.append(1)\n"
        "    return await computed(*args, **kwargs)\n"
        "floors.calibrate = counted\n"
        "from hindsight_recall.cli import main\n"
        "main(['recall', 'What did Tomasz do last spring?', '--bank', 'fresh-process', '--query-timestamp',\n"
        "      '2024-06-01T00:00:00Z'], standalone_mode=False)\n"
        "print(json.dumps({'dateparser': 'dateparser' in sys.modules, 'calibrations': len(calls)}), file=sys.stderr)\n"
    )
    env = {**os.environ, "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(cli_dir), "HINDSIGHT_API_RERANKER_PROVIDER": "rrf"}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0 and "hike" in done.stdout, done.stderr
        runs.append(json.loads(done.stderr.strip().splitlines()[-1]))
    assert [r["dateparser"] for r in runs] == [False, False]
    assert runs[0]["calibrations"] <= 1 and runs[1]["calibrations"] == 0


def test_the_command_line_imports_httpx_only_to_call_a_service() -> None:
    code = "import sys, hindsight_recall.cli; print('httpx' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() \
        == ["False"]


async def test_library_limit_is_top_k_after_packing(engine: Engine, alice: str) -> None:
    query = "Where does Alice work?"
    every = await engine.recall(alice, query, max_tokens=4096)
    assert len(every["results"]) > 2
    limited = await engine.recall(alice, query, max_tokens=4096, limit=2, trace=True)
    assert [r["id"] for r in limited["results"]] == [r["id"] for r in every["results"]][:2]
    phase = next(p for p in limited["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "token_filtering")
    assert phase["details"]["limit"] == 2 and phase["details"]["results_selected"] == 2
    # The token budget applies first: a budget that fits one result gives one, whatever the limit.
    tight = await engine.recall(alice, query, max_tokens=1, limit=5)
    assert len(tight["results"]) == 1


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
async def test_library_limit_rejects_non_positive_integers(engine: Engine, alice: str, bad: object) -> None:
    with pytest.raises(InvalidRequest, match="limit"):
        await engine.recall(alice, "Alice", limit=bad)


def test_demo_legend_names_every_arm_abbreviation() -> None:
    from hindsight_recall.demo import ARMS, legend

    text = legend()
    assert all(f"{arm[:3]} = {arm}" in text for arm in ARMS) and "arm#rank" in text


@pytest.mark.parametrize(("kind", "folder"), [("text_search", "backends"), ("reranker", "rerankers")])
def test_missing_plugin_says_how_to_install_it_from_the_repository(kind: str, folder: str) -> None:
    from hindsight_recall import BackendNotFound, get_plugin_manager

    with pytest.raises(BackendNotFound) as err:
        get_plugin_manager(load_entry_points=False).get(kind, "nope")
    assert f"pip install -e {folder}/nope" in str(err.value)
    assert f"#subdirectory={folder}/nope" in str(err.value)


@pytest.mark.parametrize("long_lived", [False, True])
async def test_only_a_long_lived_command_warms_the_date_finder(long_lived: bool, make_settings: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from hindsight_recall import cli_engine, settings
    from hindsight_recall import engine as engine_module

    warmed: list[bool] = []
    monkeypatch.setattr(engine_module, "warm_date_parser", lambda: warmed.append(True))
    monkeypatch.setattr(settings, "load_settings", lambda: make_settings())
    engine = cli_engine.open_engine(long_lived=long_lived)
    async with engine:
        assert warmed == ([True] if long_lived else [])
    async with Engine(make_settings()):  # a library's engine, as the service's, warms it
        assert warmed[-1:] == [True]
