"""Each remote reranker is selectable by its environment value in ``hindsight-recall recall``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hindsight_recall.testing.http_server import FixtureServer, Reply, cohere_routes, jina_routes, tei_routes

MEMORIES = [{"id": "tea", "text": "Alice likes green tea."}, {"id": "job", "text": "Alice works at Helios Robotics."},
            {"id": "run", "text": "Alice runs every morning in the park."}]


def favour(word: str) -> Callable[[str, str], float]:
    """A server-side scorer that prefers documents containing ``word``, whatever the query."""
    return lambda query, text: 5.0 if word in text else -5.0


PROVIDERS: dict[str, tuple[Callable[..., Any], Callable[[str], dict[str, str]]]] = {
    "tei": (tei_routes, lambda url: {"HINDSIGHT_API_RERANKER_TEI_URL": url}),
    "cohere": (cohere_routes, lambda url: {"HINDSIGHT_API_RERANKER_COHERE_BASE_URL": url + "/v2/rerank",
                                           "HINDSIGHT_API_RERANKER_COHERE_API_KEY": "k"}),
    "jina": (jina_routes, lambda url: {"HINDSIGHT_API_RERANKER_JINA_BASE_URL": url,
                                       "HINDSIGHT_API_RERANKER_JINA_API_KEY": "k"}),
}


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {**os.environ, "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(tmp_path_factory.mktemp("remote") / "pg"),
           "HINDSIGHT_API_RERANKER_PROVIDER": "rrf"}
    memories = tmp_path_factory.mktemp("m") / "m.jsonl"
    memories.write_text("\n".join(json.dumps(m) for m in MEMORIES))
    subprocess.run([sys.executable, "-m", "hindsight_recall.cli", "retain", str(memories), "--bank", "remote"],
                   env=env, check=True, capture_output=True, timeout=300)
    return env


def recall(env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-m", "hindsight_recall.cli", "recall", "Alice", "--bank", "remote",
                             "--json", "--trace"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def reranking(body: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")["details"]


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_selected_by_environment_and_order_follows_server(provider: str, cli_env: dict[str, str]) -> None:
    routes, settings = PROVIDERS[provider]
    with FixtureServer(routes(score=favour("park"))) as server:
        body = recall({**cli_env, "HINDSIGHT_API_RERANKER_PROVIDER": provider, **settings(server.url)})
    assert reranking(body)["reranker_type"] == provider and "fallback" not in reranking(body)
    assert body["results"][0]["id"] == "run" and body["results"][0]["scores"]["reranker"] == pytest.approx(
        0.9933, abs=1e-3
    )
    assert any(r.path.endswith("rerank") for r in server.requests)


def test_server_errors_fall_back_with_the_reason(cli_env: dict[str, str]) -> None:
    with FixtureServer(tei_routes()) as server:
        server.script("POST", "/rerank", *[Reply(503, {"error": "overloaded"})] * 4)
        body = recall(
            {**cli_env, "HINDSIGHT_API_RERANKER_PROVIDER": "tei", "HINDSIGHT_API_RERANKER_TEI_URL": server.url}
        )
    details = reranking(body)
    assert details["fallback"].startswith("fallback: ") and "503" in details["fallback"]
    assert len(body["results"]) == 3 and all(r["scores"]["reranker"] is None for r in body["results"])


def test_raise_mode_fails_the_recall(cli_env: dict[str, str]) -> None:
    with FixtureServer(tei_routes()) as server:
        server.script("POST", "/rerank", Reply(200, {"not": "a list"}))
        result = subprocess.run(
            [sys.executable, "-m", "hindsight_recall.cli", "recall", "Alice", "--bank", "remote"],
            env={**cli_env, "HINDSIGHT_API_RERANKER_PROVIDER": "tei", "HINDSIGHT_API_RERANKER_TEI_URL": server.url,
                 "HINDSIGHT_API_RERANKER_ON_ERROR": "raise"}, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr


def test_missing_url_is_a_startup_error_naming_the_variable(cli_env: dict[str, str]) -> None:
    result = subprocess.run([sys.executable, "-m", "hindsight_recall.cli", "recall", "Alice", "--bank", "remote"],
                            env={**cli_env, "HINDSIGHT_API_RERANKER_PROVIDER": "tei"}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0 and "HINDSIGHT_API_RERANKER_TEI_URL" in result.stderr




async def test_a_hung_server_costs_one_reranker_timeout_per_recall(make_settings: Callable[..., Any],
                                                                   bank: str) -> None:
    import dataclasses

    from hindsight_recall import Engine

    rerank = tei_routes()[("POST", "/rerank")]
    with FixtureServer(tei_routes()) as server:
        server.route("POST", "/rerank", lambda request: dataclasses.replace(rerank(request), delay=30))
        settings = make_settings(reranker_provider="tei", reranker_timeout=0.5,
                                 plugins={"reranker": {"tei": {"url": server.url}}})
        async with Engine(settings) as engine:
            await engine.retain(bank, MEMORIES)
            for _ in range(2):
                body = await engine.recall(bank, "Alice", trace=True)
                phase = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")
                assert "HINDSIGHT_API_RERANKER_TIMEOUT=0.5 s" in phase["details"]["fallback"]
                assert phase["duration_seconds"] < 3 and len(body["results"]) == 3
        assert server.requests_to("POST", "/rerank")  # the request did reach the server
