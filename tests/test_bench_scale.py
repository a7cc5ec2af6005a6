"""The scale benchmark: a deterministic generator, a smoke run of ``bench scale`` end to end, and runs on
another server (``--database-url``), spread over banks and beside the embedded server."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hindsight_recall.bench._report import markdown
from hindsight_recall.bench._rerank_cost import DEFAULT_SHAPE, random_cross_encoder
from hindsight_recall.bench._scale_banks import round_robin, spread
from hindsight_recall.bench.scale import TABLES, ScaleOptions, int_list, percentiles, phase_seconds
from hindsight_recall.bench.synthetic import DIMENSIONS, generate, queries
from hindsight_recall.cli import main
from hindsight_recall.store import banks
from hindsight_recall.store.citus import DISTRIBUTED
from hindsight_recall.testing.citus import driver_url
from hindsight_recall.time.window import resolve_window
from sqlalchemy import text


def test_generator_is_deterministic() -> None:
    a, b, other = generate(400, seed=3), generate(400, seed=3), generate(400, seed=4)
    assert a.memories == b.memories and np.array_equal(a.vectors, b.vectors)
    assert a.memories != other.memories
    assert [q.text for q in queries(a, 9)] == [q.text for q in queries(b, 9)]


def test_generator_looks_like_a_memory_bank() -> None:
    bank = generate(2000, seed=1)
    assert bank.vectors.shape == (2000, DIMENSIONS)
    assert np.allclose(np.linalg.norm(bank.vectors, axis=1), 1.0, atol=1e-5)
    ids = {m.id for m in bank.memories}
    assert len(ids) == 2000
    assert all(set(m.causes) <= ids and set(m.source_ids) <= ids for m in bank.memories)
    assert sum(bool(m.causes) for m in bank.memories) > 0
    assert {m.type for m in bank.memories} == {"world", "experience", "observation"}
    assert all(m.entities and m.entities[0] in m.text for m in bank.memories)
    # clustered like real embeddings: a few close neighbours each, far from random vectors
    sims = bank.vectors[:300] @ bank.vectors.T
    np.fill_diagonal(sims[:, :300], -1)
    assert 2 < (sims >= 0.7).sum(axis=1).mean() < 30
    kinds = {q.kind for q in queries(bank, 12)}
    assert kinds == {"plain", "entity", "temporal"}
    assert all(q.window and q.window[0] < q.window[1] for q in queries(bank, 12) if q.kind == "temporal")


def test_helpers() -> None:
    assert int_list("10k, 2M,300") == [10_000, 2_000_000, 300]
    with pytest.raises(ValueError):
        int_list("0")
    assert percentiles([0.001, 0.002, 0.003])["p50"] == 2.0
    body = {"trace": {"summary": {"phase_metrics": [
        {"phase_name": "retrieval_semantic", "duration_seconds": 0.01},
        {"phase_name": "retrieval_semantic", "duration_seconds": 0.01},
        {"phase_name": "rrf_merge", "duration_seconds": 0.001},
    ]}}}
    assert phase_seconds(body) == {"retrieval_semantic": 0.01, "rrf_merge": 0.001}


def test_bench_scale_smoke_at_10k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HINDSIGHT_API_DATABASE_URL", raising=False)
    monkeypatch.setenv("HINDSIGHT_API_EMBEDDED_DATA_DIR", str(tmp_path / "pg"))
    monkeypatch.setenv("HINDSIGHT_API_RERANKER_MAX_CANDIDATES", "20")  # keeps the cross-encoder pass short
    plot = importlib.util.find_spec("matplotlib") is not None
    out = tmp_path / "out"
    args = ["bench", "scale", "--sizes", "10k", "--concurrency", "1,2", "--queries", "6",
            "--budget", "low,mid", "--out", str(out), "--plot" if plot else "--no-plot"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "scale.json").read_text())
    (size,) = report["sizes"]
    assert size["memories"] == 10_000 and size["ingest"]["per_second_without_embedding"] > 0
    assert size["database"]["bytes_per_memory"] > 0 and size["ingest"]["links_per_memory"] > 0
    assert set(size["recall"]) == {"all arms", "semantic + keyword"}
    mid = size["recall"]["all arms"]["mid"]
    assert mid["n"] == 6 and mid["p50"] > 0 and {"semantic", "keyword"} <= set(mid["arms"])
    assert mid["mean_results"] > 0
    # CPU per recall: this process and the embedded server, by phase and by arm
    assert mid["cpu_ms_per_recall"]["process_ms"] > 0 and mid["cpu_ms_per_recall"]["server_ms"] > 0
    assert mid["cpu"]["recalls"] == 6 and mid["cpu"]["phases"]["parallel_retrieval"]["server"] > 0
    assert "keyword" in mid["cpu"]["arms"]
    assert size["load_average_before"] and "CPU per recall holds under load" in result.output
    # no window is passed: the temporal arm runs because the date finder read the questions' dates
    assert "temporal" in mid["arms"]
    reranker = size["reranker"]
    assert 0 < reranker["mean_candidates_reranked"] <= 20 and reranker["cap"] == 20
    assert reranker["recall"]["n"] == 6 and reranker["reranking_phase"]["p50"] > 0
    assert "default cross-encoder" in (out / "scale.md").read_text()
    assert (tmp_path / "pg" / "random-cross-encoder" / "config.json").exists()  # built once, kept for reruns
    assert [r["concurrency"] for r in size["concurrency"]] == [1, 2]
    assert all(not r["errors"] for r in size["concurrency"])
    assert all(r["cpu_ms_per_recall"]["total_ms"] > 0 for r in size["concurrency"])
    assert "| 10k |" in (out / "scale.md").read_text()
    assert (out / "scale.png").exists() == plot
    assert not (tmp_path / "pg" / "scale-10000").exists()  # the size's database is removed


def test_temporal_questions_name_their_window_in_the_text() -> None:
    bank = generate(500, seed=2)
    temporal = [q for q in queries(bank, 30) if q.kind == "temporal"]
    assert temporal
    for q in temporal:
        found = resolve_window(q.text, datetime(2030, 1, 1, tzinfo=UTC))
        assert found is not None and q.window is not None, q.text
        assert found.start.date() == q.window[0].date() and found.end.date() >= q.window[1].date() - timedelta(days=1)


def test_random_cross_encoder_has_the_default_shape_and_is_cached(tmp_path: Path) -> None:
    from hindsight_recall._safetensors import read
    from hindsight_recall_reranker_local import LocalReranker, LocalSettings

    path = random_cross_encoder(tmp_path / "ce")
    config = json.loads((path / "config.json").read_text())
    assert {k: config[k] for k in DEFAULT_SHAPE if k != "num_labels"} == {
        k: v for k, v in DEFAULT_SHAPE.items() if k != "num_labels"}
    assert config["id2label"] and len(config["id2label"]) == 1
    weights = read(path / "model.safetensors")
    assert weights["bert.encoder.layer.5.intermediate.dense.weight"].shape == (1536, 384)
    assert weights["classifier.weight"].shape == (1, 384)
    stamp = (path / "config.json").stat().st_mtime_ns
    assert random_cross_encoder(tmp_path / "ce") == path and (path / "config.json").stat().st_mtime_ns == stamp
    reranker = LocalReranker(None, LocalSettings(model=str(path)))
    assert len(asyncio.run(reranker.score("a question", ["a passage", "another one"]))) == 2


def test_markdown_reports_the_reranker_only_when_measured() -> None:
    row = {"p50": 1.0, "p95": 2.0, "p99": 3.0, "mean": 1.0, "n": 3}
    size = {"memories": 10_000, "database": {"bytes_per_memory": 1.0},
            "ingest": {"load_seconds": 1.0, "link_seconds": 1.0, "index_seconds": 1.0, "links_per_memory": 1.0,
                       "per_second_without_embedding": 1.0, "per_second_with_embedding": 1.0},
            "recall": {"all arms": {"mid": {**row, "arms": ["semantic"], "phases": {}}}}, "concurrency": []}
    assert "cross-encoder" not in markdown({"sizes": [size]})
    size["reranker"] = {"mean_candidates_reranked": 300, "recall": row, "reranking_phase": row}
    assert "| 10k | 300 | 1.0 / 2.0 | 1.0 / 2.0 | 1.0 |" in markdown({"sizes": [size]})


def test_bad_query_vectors_choice_is_refused() -> None:
    result = CliRunner().invoke(main, ["bench", "scale", "--sizes", "10k", "--query-vectors", "random"])
    assert result.exit_code == 2 and "--query-vectors" in result.output


# --- on another server, spread over banks, beside the embedded server ----------------------------------------

#: a run small enough for a test: 300 memories, a few questions, no cross-encoder and no plot
TINY = ["bench", "scale", "--sizes", "300", "--queries", "3", "--budget", "mid", "--concurrency", "1,2",
        "--no-reranker", "--no-plot", "--embeddings", "random", "--query-vectors", "synthetic"]


async def _leftovers(engine: Any, prefix: str) -> dict[str, int]:
    """Rows of banks named ``prefix...`` in every table that holds banks' rows."""
    out = {}
    async with engine.db.connect() as conn:
        for table in DISTRIBUTED:
            if await conn.scalar(text("SELECT to_regclass(:t)"), {"t": table}) is None:
                continue
            quoted = conn.dialect.identifier_preparer.quote(table)
            out[table] = int(await conn.scalar(
                text(f"SELECT count(*) FROM {quoted} WHERE starts_with(bank_id, :p)"), {"p": prefix}))
    return {t: n for t, n in out.items() if n}


async def _table_bytes(engine: Any) -> int:
    async with engine.db.connect() as conn:
        return int(await conn.scalar(text(
            "SELECT sum(pg_total_relation_size(to_regclass(t))) FROM unnest(CAST(:t AS text[])) AS t"),
            {"t": list(TABLES)}))


async def _bank_stats(engine: Any, bank_id: str) -> dict[str, Any] | None:
    async with engine.db.connect() as conn:
        return await banks.bank_stats(conn, bank_id)


def _invoke(args: list[str]) -> Any:
    """The command line in a thread: it runs its own event loop, which this test's loop cannot host."""
    return CliRunner().invoke(main, args)


async def test_database_url_run_spreads_compares_and_leaves_the_server_as_found(
        engine: Any, alice: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_EMBEDDED_DATA_DIR", str(tmp_path / "pg"))  # the embedded side of the run
    before = await _bank_stats(engine, alice)
    out = tmp_path / "out"
    result = await asyncio.to_thread(_invoke, [*TINY, "--database-url", driver_url(engine), "--banks", "3",
                                               "--compare-embedded", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "scale.json").read_text())
    prefix = report["run"]
    assert prefix.startswith("bench-scale-") and f"banks {prefix}-<size>-<n>" in result.output
    (measured,), (embedded,) = report["sizes"], report["embedded"]["sizes"]
    assert (measured["target"], embedded["target"]) == ("server", "embedded")
    assert measured["banks"] == embedded["banks"] == 3 and "retained into 3 banks" in result.output
    # the same data on both: the same links and rows
    assert measured["database"]["links"] == embedded["database"]["links"] > 0
    assert measured["database"]["shared_with_other_banks"] and not embedded["database"]["shared_with_other_banks"]
    assert measured["database"]["bytes_per_memory"] > 0 and embedded["database"]["bytes_per_memory"] > 0
    # the run's share of tables the server's other banks (alice's, at least) also fill
    assert measured["database"]["total_bytes"] < await _table_bytes(engine)
    for size in (measured, embedded):
        assert size["recall"]["all arms"]["mid"]["n"] == 3 and size["recall"]["all arms"]["mid"]["mean_results"] > 0
        assert [r["concurrency"] for r in size["concurrency"]] == [1, 2]
        assert all(not r["errors"] for r in size["concurrency"])
    (row,) = report["comparison"]
    mid = next(r for r in row["recall"] if r["config"] == "all arms")
    assert mid["p50_ratio"] == round(mid["p50_ms"] / mid["embedded_p50_ms"], 3)
    assert [t["concurrency"] for t in row["throughput"]] == [1, 2]
    assert "server / embedded: p50 (all arms, mid)" in result.output and "2 concurrent" in row["line"]
    md = (out / "scale.md").read_text()
    assert "## On the embedded single node" in md and "### Side by side: server / embedded" in md
    assert await _leftovers(engine, prefix) == {}
    assert await _bank_stats(engine, alice) == before
    assert not (tmp_path / "pg" / "scale-300").exists()


async def test_a_failed_or_interrupted_run_deletes_its_banks(engine: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import hindsight_recall.bench._scale_recall as timed
    import hindsight_recall.bench.scale as scale

    prefix = f"bench-scale-t{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(scale, "run_prefix", lambda: prefix)
    seen: dict[str, int] = {}

    async def broken(*args: Any, **kwargs: Any) -> None:
        seen["rows"] = sum((await _leftovers(engine, prefix)).values())
        raise RuntimeError("the latency pass broke")

    monkeypatch.setattr(timed, "latency", broken)
    result = await asyncio.to_thread(_invoke, [*TINY, "--database-url", driver_url(engine), "--banks", "2",
                                               "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "the latency pass broke" in result.output
    assert seen["rows"] > 300 and await _leftovers(engine, prefix) == {}

    # Ctrl-C: the command in a process of its own, interrupted while it times recalls
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hindsight_recall.cli", *TINY, "--queries", "400", "--budget", "low,mid,high",
        "--database-url", driver_url(engine), "--banks", "2", "--out", str(tmp_path / "out2"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
        # a run started in the background inherits SIGINT ignored, and Python then keeps ignoring it:
        # Ctrl-C as a terminal sends it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdout is not None
    lines = []
    while not lines or "bytes per memory" not in lines[-1]:
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line, "".join(lines)
        lines.append(line)
    interrupted = lines[0].split("banks ", 1)[1].split("-<size>")[0]
    assert sum((await _leftovers(engine, interrupted)).values()) > 300
    process.send_signal(signal.SIGINT)
    rest = (await asyncio.wait_for(process.communicate(), 60))[0].decode()
    assert process.returncode != 0 and "wrote" not in rest, rest
    assert await _leftovers(engine, interrupted) == {}


def test_spread_slices_the_bank_and_recalls_take_turns() -> None:
    bank = generate(300, seed=0)
    parts = spread(bank, 3, "p")
    assert list(parts) == ["p-00000", "p-00001", "p-00002"]
    assert [len(m) for m, _ in parts.values()] == [100, 100, 100]
    assert [m.id for m, _ in parts.values() for m in m] == [m.id for m in bank.memories]
    assert all(len(m) == len(v) for m, v in parts.values())
    assert parts["p-00001"][0][0].text == bank.memories[100].text
    (whole,) = spread(bank, 1, "p").values()
    assert whole[0] is bank.memories  # one bank: the generated list itself, not a copy
    assert len(spread(generate(10, seed=0), 6, "p")) == 5  # slices of two: the sixth would be empty
    asked = round_robin(list(parts), 60)
    assert set(asked[:3]) == set(parts) and {asked.count(b) for b in parts} == {20}


@pytest.mark.parametrize(("extra", "problem"), [
    (["--banks", "0"], "--banks"),
    (["--banks", "301"], "more than the smallest size (300 memories)"),
    (["--database-url", "not a url"], "is not a PostgreSQL URL"),
    (["--database-url", "mysql://u:secret@host/db"], "is not a PostgreSQL URL"),
    (["--database-url", "postgresql://u@host:port/db"], "is not a PostgreSQL URL"),
    (["--compare-embedded"], "--compare-embedded needs --database-url"),
])
def test_bad_scale_options_are_refused(extra: list[str], problem: str) -> None:
    result = CliRunner().invoke(main, [*TINY, *extra])
    assert result.exit_code == 2 and problem in result.output, result.output
    assert "secret" not in result.output


def test_scale_options_are_checked_in_code_too() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ScaleOptions(sizes=[300], banks=0).check()
    with pytest.raises(ValueError, match="smallest size"):
        ScaleOptions(sizes=[1000, 300], banks=500).check()
    ScaleOptions(sizes=[300], banks=300, database_url="postgresql://u:p@127.0.0.1:5432/db").check()


def test_nox_has_the_citus_benchmark() -> None:
    noxfile = Path(__file__).parent.parent / "noxfile.py"
    tree = ast.parse(noxfile.read_text())
    (session,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "bench_citus"]
    decorator = ast.unparse(session.decorator_list[0])
    assert decorator.startswith("nox.session(") and "default=False" in decorator and ast.get_docstring(session)
    body = ast.unparse(session)
    assert "hindsight_recall.testing.with_citus" in body and "pgserver" in body and "{url}" in body
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    if not Path(nox).exists():
        pytest.skip("nox is not installed here: the session was only parsed")
    listed = subprocess.run([nox, "-l", "-f", str(noxfile)], capture_output=True, text=True, check=True).stdout
    assert "- bench_citus ->" in listed


def test_with_citus_refuses_a_command_line_without_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    from hindsight_recall.testing.with_citus import main as with_citus

    assert with_citus([]) == 2 and with_citus(["hindsight-recall"]) == 2 and with_citus(["--"]) == 2
    assert "{url}" in capsys.readouterr().err


def test_the_side_by_side_plot_draws_each_size_and_concurrency(tmp_path: Path) -> None:
    from hindsight_recall.bench._report import plot_comparison

    recall = {"config": "all arms", "budget": "mid", "p50_ms": 40.0, "p95_ms": 60.0, "embedded_p50_ms": 30.0,
              "embedded_p95_ms": 50.0, "p50_ratio": 1.33, "p95_ratio": 1.2}
    rows = [{"memories": n, "banks": 50, "target": "citus", "recall": [recall],
             "throughput": [{"concurrency": c, "per_s": 20.0, "embedded_per_s": 25.0, "ratio": 0.8} for c in (1, 8)]}
            for n in (10_000, 50_000)]
    plot_comparison({"comparison": rows, "machine": {"cores": 2, "cpu": "test"}}, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
