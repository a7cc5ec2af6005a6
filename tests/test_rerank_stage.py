"""The reranking stage with the real local cross-encoder plugin, and its fallback."""

from __future__ import annotations

import asyncio
import time
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


def local(model: Path, **overrides: Any) -> dict[str, Any]:
    """Settings that select the local reranker with ``model`` (``HINDSIGHT_API_RERANKER_LOCAL_MODEL``)."""
    return {"reranker_provider": "local", "plugins": {"reranker": {"local": {"model": str(model)}}}, **overrides}


async def test_local_cross_encoder_scores_the_candidates(make_settings: Any, tiny_model: Path, bank: str) -> None:
    async with Engine(make_settings(**local(tiny_model))) as engine:
        await engine.retain(bank, [{"id": f"m{i}", "text": f"Alice fact number {i} about running"} for i in range(40)])
        body = await engine.recall(bank, "Alice running", trace=True)
    details = reranking_phase(body)
    assert details["reranker_type"] == "local" and "fallback" not in details
    assert details["candidates_reranked"] == 40
    scores = [r["scores"]["reranker"] for r in body["results"]]
    assert all(s is not None and 0.0 <= s <= 1.0 for s in scores)
    components = body["trace"]["reranked"][0]["score_components"]
    assert components["cross_encoder_score"] is not None


async def test_unloadable_model_falls_back_with_the_reason(make_settings: Any, bank: str, tmp_path: Path) -> None:
    async with Engine(make_settings(**local(tmp_path / "no-model-here"))) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice runs."}, {"id": "b", "text": "Alice swims."}])
        body = await engine.recall(bank, "Alice", trace=True)
        details = reranking_phase(body)
        assert details["fallback"].startswith("fallback: ") and details["passthrough"] is True
        assert [r["scores"]["reranker"] for r in body["results"]] == [None, None]
        assert body["results"][0]["scores"]["final"] > body["results"][1]["scores"]["final"] * 0.5


async def test_on_error_raise(make_settings: Any, bank: str, tmp_path: Path) -> None:
    async with Engine(make_settings(**local(tmp_path / "no-model-here", reranker_on_error="raise"))) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice runs."}])
        with pytest.raises(RerankerError, match="failed to start"):
            await engine.recall(bank, "Alice")
        # Not only once: every recall raises while the reranker cannot start.
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


class FlakyStart:
    """Fails to start ``failures`` times, then starts; scores by document length."""

    name = "flaky"
    passthrough = False

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0

    async def start(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionError(f"service down (attempt {self.attempts})")

    async def score(self, query: str, documents: list[str], *, bank_id: str | None = None) -> list[float]:
        return [float(len(d)) for d in documents]


DOCS = [{"id": "short", "text": "Alice ran."}, {"id": "long", "text": "Alice ran a long marathon in Hamburg."}]


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
async def test_a_failed_start_is_retried_with_backoff_until_it_succeeds(make_settings: Any, bank: str,
                                                                         on_error: str) -> None:
    from hindsight_recall.recall.rerank import Backoff

    reranker = FlakyStart(failures=2)
    now = [0.0]
    async with Engine(make_settings(reranker_on_error=on_error), reranker=reranker) as engine:
        engine.rerank.backoff = Backoff(base=10, cap=15)
        engine.rerank.clock = lambda: now[0]
        await engine.retain(bank, DOCS)

        async def recall() -> dict[str, Any]:
            if on_error == "raise":
                with pytest.raises(RerankerError, match="service down"):
                    await engine.recall(bank, "Alice ran", trace=True)
                details: dict[str, Any] = {}
            else:
                details = reranking_phase(await engine.recall(bank, "Alice ran", trace=True))
            if engine.rerank.starting is not None:  # a retry runs in the background: let it finish
                await engine.rerank.starting
            return details

        first = await recall()
        assert reranker.attempts == 1
        second = await recall()  # inside the pause: no new attempt, the same outcome
        assert reranker.attempts == 1
        if on_error == "fallback":
            assert "service down (attempt 1)" in first["fallback"] and second["fallback"] == first["fallback"]
        now[0] = 10.0  # the first pause (10 s) is over
        await recall()  # the second attempt fails too
        assert reranker.attempts == 2
        now[0] = 19.0  # the second pause doubled to 20 s
        await recall()
        assert reranker.attempts == 2
        now[0] = 30.0
        await recall()  # the third attempt starts in the background; this recall does not wait for it
        assert reranker.attempts == 3
        body = await engine.recall(bank, "Alice ran", trace=True)
        assert "fallback" not in reranking_phase(body)
        assert [r["id"] for r in body["results"]] == ["long", "short"]
        await engine.recall(bank, "Alice ran")
        assert reranker.attempts == 3  # started once for good


def test_backoff_doubles_up_to_its_cap() -> None:
    from hindsight_recall.recall.rerank import Backoff

    assert [Backoff(base=1, cap=5).delay(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]


class Hangs:
    """Never answers."""

    name = "hangs"

    async def score(self, query: str, documents: list[str], *, bank_id: str | None = None) -> list[float]:
        await asyncio.sleep(3600)
        return []


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
async def test_every_score_call_is_bounded_by_the_reranker_timeout(make_settings: Any, bank: str,
                                                                   on_error: str) -> None:
    async with Engine(make_settings(reranker_timeout=0.2, reranker_on_error=on_error), reranker=Hangs()) as engine:
        await engine.retain(bank, DOCS)
        for _ in range(2):
            began = time.perf_counter()
            if on_error == "raise":
                with pytest.raises(RerankerError, match="HINDSIGHT_API_RERANKER_TIMEOUT=0.2 s"):
                    await engine.recall(bank, "Alice ran")
            else:
                details = reranking_phase(await engine.recall(bank, "Alice ran", trace=True))
                assert "did not answer within HINDSIGHT_API_RERANKER_TIMEOUT=0.2 s" in details["fallback"]
            assert time.perf_counter() - began < 5


async def test_offline_the_default_hub_model_falls_back_at_once_saying_how_to_fix_it(
    make_settings: Any, bank: str, caplog: pytest.LogCaptureFixture
) -> None:
    from huggingface_hub import constants

    assert constants.HF_HUB_OFFLINE  # tests run offline (conftest), as a new user without network does
    async with Engine(make_settings(reranker_provider="local")) as engine:  # the default hub model
        await engine.retain(bank, DOCS)
        body = await engine.recall(bank, "Alice ran", trace=True)
    phase = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")
    assert phase["duration_seconds"] < 5
    assert "HINDSIGHT_API_RERANKER_PROVIDER=rrf" in phase["details"]["fallback"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "reranker" in r.getMessage()]
    assert len(warnings) == 1 and "HINDSIGHT_API_RERANKER_LOCAL_MODEL" in warnings[0]


async def test_a_hung_reranker_start_is_bounded_and_recalls_do_not_wait_for_its_retries(
    make_settings: Any, bank: str
) -> None:
    from hindsight_recall.recall.rerank import Backoff
    from hindsight_recall.testing.http_server import FixtureServer, Reply, tei_routes

    routes = tei_routes()
    routes[("GET", "/info")] = lambda request: Reply(body={"model_id": "x"}, delay=3600)  # never answers
    with FixtureServer(routes) as server:
        settings = make_settings(reranker_provider="tei", reranker_timeout=5,
                                 plugins={"reranker": {"tei": {"url": server.url}}})
        async with Engine(settings) as engine:
            engine.rerank.backoff = Backoff(base=0, cap=0)  # every recall may start another attempt
            await engine.retain(bank, DOCS)
            body = await engine.recall(bank, "Alice ran", trace=True)
            first = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")
            # before: bounded by MODEL_INIT_TIMEOUT and four 30 s reads, 124.7 s with the defaults
            assert first["duration_seconds"] < 5 + 10
            assert "HINDSIGHT_API_RERANKER_TIMEOUT=5" in first["details"]["fallback"]
            if engine.rerank.starting is not None:
                await engine.rerank.starting
            # a retry starts now, in the background, and hangs like the first: no recall waits for it
            bodies = await asyncio.gather(*(engine.recall(bank, "Alice ran", trace=True) for _ in range(4)))
            phases = [next(p for p in b["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")
                      for b in bodies]
            assert all(p["duration_seconds"] < 2.5 and "fallback" in p["details"] for p in phases), phases
            assert engine.rerank.starting is not None  # still hanging on GET /info
            assert [r["id"] for r in bodies[0]["results"]]
        assert len(server.requests_to("GET", "/info")) == 2
