"""The Cohere reranker against a real HTTP server speaking the Cohere v2 rerank protocol."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hindsight_recall.errors import MissingSetting, RerankerHTTPError
from hindsight_recall.protocols import Reranker
from hindsight_recall.settings import Settings
from hindsight_recall.testing.http_server import FixtureServer, Reply, cohere_routes
from hindsight_recall_reranker_cohere import DEFAULT_URL, CohereReranker, CohereSettings, register_rerankers
from pydantic import SecretStr

API_KEY = "test-cohere-key"
QUERY = "quick brown fox"
DOCS = ["a lazy dog", "the quick brown fox", "a brown fox", "nothing here"]


def make(server: FixtureServer, settings: Settings | None = None, **config: object) -> CohereReranker:
    values: dict[str, object] = {
        "api_key": SecretStr(API_KEY),
        "base_url": f"{server.url}/v2/rerank",
        **config,
    }
    return CohereReranker(settings or Settings(), CohereSettings(**values))


async def test_request_json_and_headers(cohere_server: FixtureServer) -> None:
    reranker = make(cohere_server, Settings(reranker_send_bank_as_header=True))
    await reranker.score(QUERY, DOCS, bank_id="bank-7")
    [request] = cohere_server.requests_to("POST", "/v2/rerank")
    assert request.body == {"model": "rerank-english-v3.0", "query": QUERY, "documents": DOCS}
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-hindsight-bank-id"] == "bank-7"
    await reranker.close()


async def test_no_bank_header_unless_enabled(cohere_server: FixtureServer) -> None:
    reranker = make(cohere_server)
    await reranker.score(QUERY, DOCS, bank_id="bank-7")
    assert "x-hindsight-bank-id" not in cohere_server.requests[0].headers
    await reranker.close()


async def test_scores_follow_the_server_in_input_order(cohere_server: FixtureServer) -> None:
    table = {"a lazy dog": 0.02, "the quick brown fox": 0.97, "a brown fox": 0.61, "nothing here": 0.1}
    cohere_server.routes.update(cohere_routes(api_key=API_KEY, score=lambda q, t: table[t]))
    reranker = make(cohere_server)
    scores = await reranker.score(QUERY, DOCS)
    assert scores == [table[d] for d in DOCS]
    await reranker.close()


async def test_all_documents_go_in_one_request(cohere_server: FixtureServer) -> None:
    reranker = make(cohere_server)
    scores = await reranker.score("doc", [f"doc {i}" for i in range(300)])
    assert len(scores) == 300 and len(cohere_server.requests) == 1
    await reranker.close()


async def test_model_and_base_url_are_used_as_given() -> None:
    with FixtureServer(cohere_routes(api_key=API_KEY, path="/compat/v1/rerank")) as server:
        reranker = make(server, model="rerank-v3.5", base_url=f"{server.url}/compat/v1/rerank")
        await reranker.score(QUERY, DOCS)
        assert server.requests[0].path == "/compat/v1/rerank"
        assert server.requests[0].body["model"] == "rerank-v3.5"
        await reranker.close()


async def test_wrong_key_is_reported(cohere_server: FixtureServer) -> None:
    reranker = make(cohere_server, api_key=SecretStr("wrong"))
    with pytest.raises(RerankerHTTPError, match="HTTP 401 .*check the API key"):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


@pytest.mark.parametrize(
    "reply",
    [Reply(429, {"message": "slow down"}, headers={"Retry-After": "1"}), Reply(503, {"message": "down"})],
)
async def test_no_retries(cohere_server: FixtureServer, reply: Reply) -> None:
    cohere_server.script("POST", "/v2/rerank", reply)
    reranker = make(cohere_server)
    with pytest.raises(RerankerHTTPError, match=f"HTTP {reply.status} after 1 attempt"):
        await reranker.score(QUERY, DOCS)
    assert len(cohere_server.requests) == 1
    await reranker.close()


async def test_timeout(cohere_server: FixtureServer) -> None:
    rerank = cohere_server.routes[("POST", "/v2/rerank")]
    cohere_server.route("POST", "/v2/rerank", lambda r: dataclasses.replace(rerank(r), delay=1.0))
    reranker = make(cohere_server, timeout=0.2)
    with pytest.raises(RerankerHTTPError, match=r"timed out \(ReadTimeout, timeout 0.2 s, 1 attempt"):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(raw=b"Internal error"), "not JSON"),
        (Reply(body=[{"index": 0, "relevance_score": 1.0}] * 4), "expected an object with a 'results' list"),
        (Reply(body={"results": [{"index": 0, "score": 1.0}] * 4}), "numeric 'relevance_score'"),
        (Reply(body={"results": [{"index": 0, "relevance_score": 0.5}] * 3}), "sent 4 documents but got 3"),
    ],
)
async def test_bad_bodies_raise_clear_errors(
    cohere_server: FixtureServer, reply: Reply, message: str
) -> None:
    cohere_server.script("POST", "/v2/rerank", reply)
    reranker = make(cohere_server)
    with pytest.raises(RerankerHTTPError, match=message):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


@pytest.mark.parametrize("key", [None, SecretStr("")])
def test_missing_key_names_the_variable(key: SecretStr | None) -> None:
    with pytest.raises(MissingSetting, match="HINDSIGHT_API_RERANKER_COHERE_API_KEY"):
        CohereReranker(Settings(), CohereSettings(api_key=key))


def test_settings_defaults_and_prefix() -> None:
    config = CohereSettings(api_key=SecretStr("secret-value"))
    assert CohereSettings.model_config["env_prefix"] == "HINDSIGHT_API_RERANKER_COHERE_"
    assert (config.model, config.base_url, config.timeout) == ("rerank-english-v3.0", None, 60)
    assert "secret-value" not in repr(config)
    reranker = CohereReranker(None, config)
    assert reranker._http.url == DEFAULT_URL == "https://api.cohere.com/v2/rerank"
    assert reranker._http.timeout == 60 and reranker._http.retry.retries == 0
    assert reranker._http.batch_size is None and reranker._http.send_bank_header is False


def test_settings_read_their_variables(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text(
        "HINDSIGHT_API_RERANKER_COHERE_API_KEY=k\nHINDSIGHT_API_RERANKER_COHERE_MODEL=rerank-v3.5\n"
        "HINDSIGHT_API_RERANKER_COHERE_BASE_URL=http://co/rerank\nHINDSIGHT_API_RERANKER_COHERE_TIMEOUT=7\n"
    )
    config = CohereSettings(_env_file=env)  # type: ignore[call-arg]
    assert config.api_key is not None and config.api_key.get_secret_value() == "k"
    assert (config.model, config.base_url, config.timeout) == ("rerank-v3.5", "http://co/rerank", 7)


def test_registers_a_reranker_class() -> None:
    registered: list[object] = []
    register_rerankers(registered.append)
    assert registered == [CohereReranker]
    assert isinstance(CohereReranker, Reranker)
    assert CohereReranker.name == "cohere" and CohereReranker.passthrough is False


def test_import_is_cheap() -> None:
    code = (
        "import sys, hindsight_recall_reranker_cohere; "
        "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
