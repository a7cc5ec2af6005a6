"""The scale benchmark: a deterministic generator and a smoke run of ``bench scale`` end to end."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hindsight_recall.bench.scale import int_list, percentiles, phase_seconds
from hindsight_recall.bench.synthetic import DIMENSIONS, generate, queries
from hindsight_recall.cli import main


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
    assert mid["mean_results"] > 0  # synthetic query vectors land near their topic
    assert [r["concurrency"] for r in size["concurrency"]] == [1, 2]
    assert all(not r["errors"] for r in size["concurrency"])
    assert "| 10k |" in (out / "scale.md").read_text()
    assert (out / "scale.png").exists() == plot
    assert not (tmp_path / "pg" / "scale-10000").exists()  # the size's database is removed
