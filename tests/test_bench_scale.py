"""The scale benchmark: a deterministic generator and a smoke run of ``bench scale`` end to end."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hindsight_recall.bench._report import markdown
from hindsight_recall.bench._rerank_cost import DEFAULT_SHAPE, random_cross_encoder
from hindsight_recall.bench.scale import int_list, percentiles, phase_seconds
from hindsight_recall.bench.synthetic import DIMENSIONS, generate, queries
from hindsight_recall.cli import main
from hindsight_recall.time.window import resolve_window


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
    # no window is passed: the temporal arm runs because the date finder read the questions' dates
    assert "temporal" in mid["arms"]
    reranker = size["reranker"]
    assert 0 < reranker["mean_candidates_reranked"] <= 20 and reranker["cap"] == 20
    assert reranker["recall"]["n"] == 6 and reranker["reranking_phase"]["p50"] > 0
    assert "default cross-encoder" in (out / "scale.md").read_text()
    assert (tmp_path / "pg" / "random-cross-encoder" / "config.json").exists()  # built once, kept for reruns
    assert [r["concurrency"] for r in size["concurrency"]] == [1, 2]
    assert all(not r["errors"] for r in size["concurrency"])
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
    from sentence_transformers import CrossEncoder
    from transformers import AutoConfig

    path = random_cross_encoder(tmp_path / "ce")
    config = AutoConfig.from_pretrained(path).to_dict()
    assert {k: config[k] for k in DEFAULT_SHAPE if k != "num_labels"} == {
        k: v for k, v in DEFAULT_SHAPE.items() if k != "num_labels"}
    assert config["id2label"] and len(config["id2label"]) == 1
    stamp = (path / "config.json").stat().st_mtime_ns
    assert random_cross_encoder(tmp_path / "ce") == path and (path / "config.json").stat().st_mtime_ns == stamp
    scores = CrossEncoder(str(path), device="cpu").predict([("a question", "a passage"), ("q", "another one")])
    assert len(scores) == 2


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
