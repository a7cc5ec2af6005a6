"""The reranking stage with the real local cross-encoder plugin, and its fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hindsight_recall import Engine, RerankerError


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hindsight_recall.testing.models import build_tiny_cross_encoder

    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce"))


def reranking_phase(body: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")["details"]


async def test_local_cross_encoder_scores_the_candidates(make_settings: Any, tiny_model: Path, bank: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_RERANKER_LOCAL_MODEL", str(tiny_model))
    async with Engine(make_settings(reranker_provider="local")) as engine:
        await engine.retain(bank, [{"id": f"m{i}", "text": f"Alice fact number {i} about running"} for i in range(40)])
        body = await engine.recall(bank, "Alice running", trace=True)
    details = reranking_phase(body)
    assert details["reranker_type"] == "local" and "fallback" not in details
    assert details["candidates_reranked"] == 40
    scores = [r["scores"]["reranker"] for r in body["results"]]
    assert all(s is not None and 0.0 <= s <= 1.0 for s in scores)
    components = body["trace"]["reranked"][0]["score_components"]
    assert components["cross_encoder_score"] is not None


async def test_unloadable_model_falls_back_with_the_reason(make_settings: Any, bank: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_RERANKER_LOCAL_MODEL", str(tmp_path / "no-model-here"))
    async with Engine(make_settings(reranker_provider="local")) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice runs."}, {"id": "b", "text": "Alice swims."}])
        body = await engine.recall(bank, "Alice", trace=True)
        details = reranking_phase(body)
        assert details["fallback"].startswith("fallback: ") and details["passthrough"] is True
        assert [r["scores"]["reranker"] for r in body["results"]] == [None, None]
        assert body["results"][0]["scores"]["final"] > body["results"][1]["scores"]["final"] * 0.5


async def test_on_error_raise(make_settings: Any, bank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_RERANKER_LOCAL_MODEL", str(tmp_path / "no-model-here"))
    async with Engine(make_settings(reranker_provider="local", reranker_on_error="raise")) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice runs."}])
        with pytest.raises(RerankerError, match="failed to start"):
            await engine.recall(bank, "Alice")


class FailingReranker:
    """Always fails, to exercise the fallback."""

    name = "failing"
    passthrough = False

    def __init__(self, settings: Any = None) -> None:
        pass

    async def score(self, query: str, documents: list[str], *, bank_id: str | None = None) -> list[float]:
        return [1.0]  # wrong count


async def test_wrong_score_count_falls_back(make_settings: Any, bank: str) -> None:
    from hindsight_recall import get_plugin_manager, hookimpl

    class Plugin:
        @hookimpl
        def register_rerankers(self, register: Any) -> None:
            register(FailingReranker)

    manager = get_plugin_manager()
    manager.register_plugin(Plugin(), "failing", "test", "0")
    async with Engine(make_settings(reranker_provider="failing"), plugins=manager) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice runs."}, {"id": "b", "text": "Alice swims."}])
        body = await engine.recall(bank, "Alice", trace=True)
    assert "returned 1 scores for 2 documents" in reranking_phase(body)["fallback"]
