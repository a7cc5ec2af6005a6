"""The Jina reranker against a real HTTP server speaking the Jina rerank protocol."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hindsight_recall.errors import MissingSetting, RerankerHTTPError
from hindsight_recall.protocols import Reranker
from hindsight_recall.settings import Settings
from hindsight_recall.testing.http_server import FixtureServer, Reply, jina_routes
from hindsight_recall_reranker_jina import JinaReranker, JinaSettings, register_rerankers
from pydantic import SecretStr

API_KEY = "test-jina-key"
QUERY = "quick brown fox"
DOCS = ["a lazy dog", "the quick brown fox", "a brown fox", "nothing here"]


def make(server: FixtureServer, settings: Settings | None = None, **config: object) -> JinaReranker:
    values: dict[str, object] = {"api_key": SecretStr(API_KEY), "base_url": server.url, **config}
    return JinaReranker(settings or Settings(), JinaSettings(**values))


async def test_request_json_and_headers(jina_server: FixtureServer) -> None:
    reranker = make(jina_server, Settings(reranker_send_bank_as_header=True))
    await reranker.score(QUERY, DOCS, bank_id="bank-7")
    [request] = jina_server.requests_to("POST", "/v1/rerank")
    assert request.body == {
        "model": "jina-reranker-v2-base-multilingual",
        "query": QUERY,
        "documents": DOCS,
        "top_n": 4,
        "return_documents": False,
    }
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-hindsight-bank-id"] == "bank-7"
    await reranker.close()


async def test_no_bank_header_unless_enabled(jina_server: FixtureServer) -> None:
    reranker = make(jina_server)
    await reranker.score(QUERY, DOCS, bank_id="bank-7")
    assert "x-hindsight-bank-id" not in jina_server.requests[0].headers
    await reranker.close()


async def test_scores_follow_the_server_in_input_order(jina_server: FixtureServer) -> None:
    table = {"a lazy dog": 0.02, "the quick brown fox": 0.97, "a brown fox": 0.61, "nothing here": 0.1}
    jina_server.routes.update(jina_routes(api_key=API_KEY, score=lambda q, t: table[t]))
    reranker = make(jina_server)
    assert await reranker.score(QUERY, DOCS) == [table[d] for d in DOCS]
    await reranker.close()


async def test_all_documents_go_in_one_request(jina_server: FixtureServer) -> None:
    reranker = make(jina_server)
    scores = await reranker.score("doc", [f"doc {i}" for i in range(300)])
    assert len(scores) == 300 and len(jina_server.requests) == 1
    assert jina_server.requests[0].body["top_n"] == 300
    await reranker.close()


async def test_model_and_base_url_with_trailing_slash(jina_server: FixtureServer) -> None:
    reranker = make(jina_server, model="jina-reranker-m0", base_url=f"{jina_server.url}/")
    await reranker.score(QUERY, DOCS)
    assert jina_server.requests[0].path == "/v1/rerank"
    assert jina_server.requests[0].body["model"] == "jina-reranker-m0"
    await reranker.close()


async def test_wrong_key_is_reported(jina_server: FixtureServer) -> None:
    reranker = make(jina_server, api_key=SecretStr("wrong"))
    with pytest.raises(RerankerHTTPError, match="HTTP 401 .*check the API key"):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


@pytest.mark.parametrize(
    "reply",
    [Reply(429, {"detail": "rate limited"}, headers={"Retry-After": "1"}), Reply(503, {"detail": "down"})],
)
async def test_no_retries(jina_server: FixtureServer, reply: Reply) -> None:
    jina_server.script("POST", "/v1/rerank", reply)
    reranker = make(jina_server)
    with pytest.raises(RerankerHTTPError, match=f"HTTP {reply.status} after 1 attempt"):
        await reranker.score(QUERY, DOCS)
    assert len(jina_server.requests) == 1
    await reranker.close()


async def test_timeout(jina_server: FixtureServer) -> None:
    rerank = jina_server.routes[("POST", "/v1/rerank")]
    jina_server.route("POST", "/v1/rerank", lambda r: dataclasses.replace(rerank(r), delay=1.0))
    reranker = make(jina_server, timeout=0.2)
    with pytest.raises(RerankerHTTPError, match=r"timed out \(ReadTimeout, timeout 0.2 s, 1 attempt"):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(raw=b"{truncated"), "not JSON"),
        (Reply(body={"data": []}), "expected an object with a 'results' list"),
        (Reply(body={"results": [{"relevance_score": 1.0}] * 4}), "expected integer 'index'"),
        (Reply(body={"results": [{"index": 0, "relevance_score": 0.5}] * 5}), "sent 4 documents but got 5"),
        (Reply(body={"results": [{"index": -1, "relevance_score": 0.5}] * 4}), "index -1 is out of range"),
    ],
)
async def test_bad_bodies_raise_clear_errors(jina_server: FixtureServer, reply: Reply, message: str) -> None:
    jina_server.script("POST", "/v1/rerank", reply)
    reranker = make(jina_server)
    with pytest.raises(RerankerHTTPError, match=message):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


@pytest.mark.parametrize("key", [None, SecretStr("")])
def test_missing_key_names_the_variable(key: SecretStr | None) -> None:
    with pytest.raises(MissingSetting, match="HINDSIGHT_API_RERANKER_JINA_API_KEY"):
        JinaReranker(Settings(), JinaSettings(api_key=key))


def test_empty_base_url_names_the_variable() -> None:
    with pytest.raises(MissingSetting, match="HINDSIGHT_API_RERANKER_JINA_BASE_URL"):
        JinaReranker(Settings(), JinaSettings(api_key=SecretStr("k"), base_url=""))


def test_settings_defaults_and_prefix() -> None:
    config = JinaSettings(api_key=SecretStr("secret-value"))
    assert JinaSettings.model_config["env_prefix"] == "HINDSIGHT_API_RERANKER_JINA_"
    assert (config.model, config.base_url, config.timeout) == (
        "jina-reranker-v2-base-multilingual",
        "https://api.jina.ai",
        60,
    )
    assert "secret-value" not in repr(config)
    reranker = JinaReranker(None, config)
    assert reranker._http.url == "https://api.jina.ai/v1/rerank"
    assert reranker._http.timeout == 60 and reranker._http.retry.retries == 0
    assert reranker._http.batch_size is None and reranker._http.send_bank_header is False


def test_settings_read_their_variables(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text(
        "HINDSIGHT_API_RERANKER_JINA_API_KEY=k\nHINDSIGHT_API_RERANKER_JINA_MODEL=m\n"
        "HINDSIGHT_API_RERANKER_JINA_BASE_URL=http://jina\nHINDSIGHT_API_RERANKER_JINA_TIMEOUT=7\n"
    )
    config = JinaSettings(_env_file=env)  # type: ignore[call-arg]
    assert config.api_key is not None and config.api_key.get_secret_value() == "k"
    assert (config.model, config.base_url, config.timeout) == ("m", "http://jina", 7)


def test_registers_a_reranker_class() -> None:
    registered: list[object] = []
    register_rerankers(registered.append)
    assert registered == [JinaReranker]
    assert isinstance(JinaReranker, Reranker)
    assert JinaReranker.name == "jina" and JinaReranker.passthrough is False


def test_import_is_cheap() -> None:
    code = (
        "import sys, hindsight_recall_reranker_jina; "
        "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
