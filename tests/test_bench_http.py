"""The HTTP benchmark runs end to end on a tiny split (ours only: upstream needs its own multi-GB venv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hindsight_recall.bench.http import data_dir, main, table

MEMORIES = [
    {"bank": "tiny", "id": "job", "text": "Priya works at Orbital Foods as a pastry chef."},
    {"bank": "tiny", "id": "pet", "text": "Priya adopted a grey cat called Miso."},
    {"bank": "tiny", "id": "trip", "text": "Priya flew to Lisbon in May 2023.", "occurred_at": "2023-05-10T00:00:00Z"},
]
QUESTIONS = [
    {"qid": "q1", "bank": "tiny", "question": "Where does Priya work?", "evidence": ["job"]},
    {"qid": "q2", "bank": "tiny", "question": "What is the name of Priya's cat?", "evidence": ["pet"]},
    {"qid": "q3", "bank": "tiny", "question": "Where did Priya travel in May?", "evidence": ["trip"]},
]


def test_bench_http_on_a_tiny_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the service and the in-process engine open this one data directory
    monkeypatch.setenv("HINDSIGHT_API_EMBEDDED_DATA_DIR", str(tmp_path / "pg"))
    data = tmp_path / "split"
    data.mkdir()
    (data / "memories.jsonl").write_text("\n".join(json.dumps(m) for m in MEMORIES) + "\n")
    (data / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n")
    out = tmp_path / "out"
    assert main(["--data", str(data), "--rounds", "1", "--block", "2", "--concurrency", "2", "--seconds", "1",
                 "--out", str(out)]) == 0
    report = json.loads((out / "http.json").read_text())
    assert set(report["systems"]) == {"ours-http", "ours-inprocess"}
    assert report["systems"]["ours-http"]["latency_ms"]["n"] == 3
    assert report["systems"]["ours-inprocess"]["latency_ms"]["n"] == 3
    # milliseconds: a three-memory recall takes well under 10 s, and more than a microsecond
    assert 0.001 < report["systems"]["ours-http"]["latency_ms"]["p50"] < 10_000
    run = report["systems"]["ours-http"]["throughput"][0]
    assert run["clients"] == 2 and run["recalls"] > 0 and run["errors"] == 0
    # from wrk in its own process: its latencies and its own CPU, apart from the server's
    assert run["load_generator"] == "wrk" and run["by_status"] == {"200": run["recalls"]}
    assert 0 < run["latency_ms"]["p50"] <= run["latency_ms"]["p99"] and run["wrk_cpu_ms_per_recall"] >= 0
    assert isinstance(report["http_overhead_ms_p50"], float)
    assert (tmp_path / "pg" / "PG_VERSION").exists()
    # CPU per recall: our server process and the database, one at a time and at each concurrency
    for name in ("ours-http", "ours-inprocess"):
        cpu = report["systems"][name]["cpu_ms_per_recall"]
        assert cpu["process_ms"] > 0 and cpu["server_ms"] > 0
    assert run["cpu_ms_per_recall"]["total_ms"] > 0
    assert report["cpu_inprocess"]["recalls"] == 3 and report["cpu_inprocess"]["phases"]["parallel_retrieval"]
    assert report["load_average_before"] and report["load_average_after"]


def test_data_dir_is_the_variables_else_the_work_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HINDSIGHT_API_EMBEDDED_DATA_DIR", raising=False)
    assert data_dir(tmp_path) == tmp_path / "ours-pg"
    monkeypatch.setenv("HINDSIGHT_API_EMBEDDED_DATA_DIR", str(tmp_path / "given"))
    assert data_dir(tmp_path / "work") == (tmp_path / "given").resolve()


def test_missing_split_is_a_clear_exit(tmp_path: Path) -> None:
    assert main(["--data", str(tmp_path / "nowhere")]) == 2


def test_missing_wrk_is_a_clear_exit_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "split"
    data.mkdir()
    (data / "memories.jsonl").write_text(json.dumps(MEMORIES[0]) + "\n")
    (data / "queries.jsonl").write_text(json.dumps(QUESTIONS[0]) + "\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["--data", str(data)]) == 2
    assert "apt-get install wrk" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--data", str(data), "--load-generator", "ab"])


def test_table_lists_every_system_and_concurrency() -> None:
    report = {"concurrency": [8, 32], "http_overhead_ms_p50": 1.2, "systems": {
        "ours-http": {"latency_ms": {"p50": 5.0, "p95": 9.0},
                      "throughput": [{"clients": 8, "per_second": 100.0, "errors": 0}]},
        "ours-inprocess": {"latency_ms": {"p50": 3.8, "p95": 7.0}}}}
    report["systems"]["ours-http"]["cpu_ms_per_recall"] = {"server_ms": 4.5, "process_ms": 6.0, "total_ms": 10.5}
    report["load_average_before"] = [5.1, 4.0, 3.2]
    text = table(report)
    assert "| ours-http | 5.0 | 9.0 | 6.0 + 4.5 | 100.0 (0 err) | - |" in text
    assert "| ours-inprocess | 3.8 | 7.0 | - | - | - |" in text
    assert "1.2 ms" in text and "Load average [5.1, 4.0, 3.2]" in text
