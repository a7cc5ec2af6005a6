"""The TEI reranker against a real HTTP server speaking the TEI protocol."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hindsight_recall.errors import MissingSetting, RerankerError, RerankerHTTPError
from hindsight_recall.protocols import Reranker
from hindsight_recall.settings import Settings
from hindsight_recall.testing.http_server import FixtureServer, Reply, tei_routes
from hindsight_recall_reranker_tei import RETRY, TEIReranker, TEISettings, register_rerankers

QUERY = "quick brown fox"
DOCS = ["a lazy dog", "the quick brown fox", "a brown fox", "nothing here"]


def make(server: FixtureServer, settings: Settings | None = None, **config: object) -> TEIReranker:
    reranker = TEIReranker(settings or Settings(), TEISettings(url=server.url, **config))
    # The declared retry count stays; only the waits shrink, to keep tests fast.
    reranker._http.retry = dataclasses.replace(RETRY, base_delay=0.01)
    return reranker


def slow(delay: float) -> object:
    rerank = tei_routes()[("POST", "/rerank")]
    return lambda request: dataclasses.replace(rerank(request), delay=delay)


async def test_request_json_and_headers(tei_server: FixtureServer) -> None:
    reranker = make(tei_server, Settings(reranker_send_bank_as_header=True))
    await reranker.score(QUERY, DOCS, bank_id="bank-7")
    [request] = tei_server.requests_to("POST", "/rerank")
    assert request.body == {"query": QUERY, "texts": DOCS, "return_text": False}
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-hindsight-bank-id"] == "bank-7"
    await reranker.close()


async def test_no_bank_header_unless_enabled(tei_server: FixtureServer) -> None:
    reranker = make(tei_server)
    await reranker.score(QUERY, DOCS, bank_id="bank-7")
    assert "x-hindsight-bank-id" not in tei_server.requests[0].headers
    await reranker.close()


async def test_scores_follow_the_server_in_input_order(tei_server: FixtureServer) -> None:
    table = {"a lazy dog": -2.5, "the quick brown fox": 9.0, "a brown fox": 3.25, "nothing here": 0.5}
    tei_server.routes.update(tei_routes(score=lambda q, t: table[t]))
    reranker = make(tei_server)
    scores = await reranker.score(QUERY, DOCS)
    assert scores == [table[d] for d in DOCS]
    ranked = sorted(DOCS, key=lambda d: -scores[DOCS.index(d)])
    assert ranked == ["the quick brown fox", "a brown fox", "nothing here", "a lazy dog"]
    await reranker.close()


async def test_empty_documents_send_nothing(tei_server: FixtureServer) -> None:
    reranker = make(tei_server)
    assert await reranker.score(QUERY, []) == []
    assert tei_server.requests == []


async def test_start_reads_model_id(tei_server: FixtureServer) -> None:
    tei_server.routes.update(tei_routes(model_id="BAAI/bge-reranker-base"))
    reranker = make(tei_server)
    await reranker.start()
    assert reranker.model_id == "BAAI/bge-reranker-base"
    assert tei_server.requests[0].method == "GET"
    await reranker.close()


async def test_start_is_bounded_by_the_reranker_timeout(tei_server: FixtureServer) -> None:
    tei_server.script("GET", "/info", Reply(body={"model_id": "x"}, delay=2.0))
    reranker = make(tei_server, Settings(reranker_timeout=0.2))
    with pytest.raises(RerankerError, match="HINDSIGHT_API_RERANKER_TIMEOUT=0.2"):
        await reranker.start()
    await reranker.close()


async def test_start_rejects_info_without_model_id(tei_server: FixtureServer) -> None:
    tei_server.script("GET", "/info", Reply(body={"version": "1.5"}))
    reranker = make(tei_server)
    with pytest.raises(RerankerHTTPError, match="model_id"):
        await reranker.start()
    await reranker.close()


async def test_batches_respect_size_and_in_flight_limit(tei_server: FixtureServer) -> None:
    tei_server.route("POST", "/rerank", slow(0.05))
    docs = [f"doc {i} fox" if i % 3 else f"doc {i}" for i in range(95)]
    reranker = make(tei_server, batch_size=10, max_concurrent=3)
    scores = await reranker.score("fox", docs)
    sizes = sorted(len(r.body["texts"]) for r in tei_server.requests_to("POST", "/rerank"))
    assert sizes == [5] + [10] * 9
    assert tei_server.max_in_flight == 3
    assert scores == [0.0 if i % 3 == 0 else 1.0 for i in range(95)]
    await reranker.close()


async def test_in_flight_limit_is_shared_across_instances(tei_server: FixtureServer) -> None:
    tei_server.route("POST", "/rerank", slow(0.05))
    docs = [f"doc {i}" for i in range(40)]
    first, second = (make(tei_server, batch_size=5, max_concurrent=2) for _ in range(2))
    await asyncio.gather(first.score("doc", docs), second.score("doc", docs))
    assert len(tei_server.requests) == 16
    assert tei_server.max_in_flight == 2
    await first.close()
    await second.close()


async def test_default_batch_size_is_128(tei_server: FixtureServer) -> None:
    reranker = make(tei_server)
    await reranker.score("doc", [f"doc {i}" for i in range(300)])
    assert sorted(len(r.body["texts"]) for r in tei_server.requests) == [44, 128, 128]
    await reranker.close()


async def test_retries_429_honouring_retry_after(tei_server: FixtureServer) -> None:
    tei_server.script("POST", "/rerank", Reply(429, {"error": "busy"}, headers={"Retry-After": "1"}))
    reranker = make(tei_server)
    started = time.monotonic()
    assert await reranker.score(QUERY, DOCS) == [0.0, 1.0, 2 / 3, 0.0]
    assert time.monotonic() - started >= 0.95
    assert len(tei_server.requests) == 2
    await reranker.close()


async def test_retries_503_then_succeeds(tei_server: FixtureServer) -> None:
    tei_server.script("POST", "/rerank", Reply(503, {"error": "loading"}), Reply(503, {"error": "loading"}))
    reranker = make(tei_server)
    assert len(await reranker.score(QUERY, DOCS)) == 4
    assert len(tei_server.requests) == 3
    await reranker.close()


async def test_gives_up_after_three_retries(tei_server: FixtureServer) -> None:
    tei_server.script("POST", "/rerank", *[Reply(503, {"error": "down"})] * 4)
    reranker = make(tei_server)
    with pytest.raises(RerankerHTTPError, match=r"HTTP 503 after 4 attempt\(s\)"):
        await reranker.score(QUERY, DOCS)
    assert len(tei_server.requests) == 4
    await reranker.close()


async def test_client_errors_are_not_retried(tei_server: FixtureServer) -> None:
    tei_server.script("POST", "/rerank", Reply(413, {"error": "batch too large"}))
    reranker = make(tei_server)
    with pytest.raises(RerankerHTTPError, match="HTTP 413 after 1 attempt"):
        await reranker.score(QUERY, DOCS)
    assert len(tei_server.requests) == 1
    await reranker.close()


async def test_read_timeout_is_retried_then_reported(tei_server: FixtureServer) -> None:
    tei_server.route("POST", "/rerank", slow(1.0))
    reranker = make(tei_server, http_timeout=0.2)
    with pytest.raises(RerankerHTTPError, match=r"timed out \(ReadTimeout, timeout 0.2 s, 4 attempt"):
        await reranker.score(QUERY, DOCS)
    assert len(tei_server.requests) == 4
    await reranker.close()


async def test_timeout_then_success(tei_server: FixtureServer) -> None:
    tei_server.script("POST", "/rerank", Reply(body=[], delay=1.0))
    reranker = make(tei_server, http_timeout=0.3)
    assert len(await reranker.score(QUERY, DOCS)) == 4
    await reranker.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(raw=b"<html>gateway</html>"), "not JSON"),
        (Reply(body={"results": []}), "expected a JSON list"),
        (Reply(body=[{"index": 0, "score": "high"}] * 4), "malformed result"),
        (Reply(body=[{"index": 0, "score": 1.0}]), "sent 4 documents but got 1 scores"),
        (Reply(body=[{"index": i % 2, "score": 1.0} for i in range(4)]), "appears more than once"),
        (Reply(body=[{"index": i + 1, "score": 1.0} for i in range(4)]), "index 4 is out of range 0..3"),
    ],
)
async def test_bad_bodies_raise_clear_errors(tei_server: FixtureServer, reply: Reply, message: str) -> None:
    tei_server.script("POST", "/rerank", reply)
    reranker = make(tei_server)
    with pytest.raises(RerankerHTTPError, match=message):
        await reranker.score(QUERY, DOCS)
    assert len(tei_server.requests) == 1
    await reranker.close()


async def test_one_failed_batch_fails_the_call(tei_server: FixtureServer) -> None:
    tei_server.script("POST", "/rerank", Reply(400, {"error": "bad"}))
    reranker = make(tei_server, batch_size=2)
    with pytest.raises(RerankerHTTPError, match="HTTP 400"):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


async def test_unreachable_server_names_the_url() -> None:
    with FixtureServer() as server:
        url = server.url
    reranker = TEIReranker(Settings(), TEISettings(url=url))
    with pytest.raises(RerankerHTTPError, match=f"POST {url}/rerank failed"):
        await reranker.score(QUERY, DOCS)
    await reranker.close()


async def test_close_then_reuse(tei_server: FixtureServer) -> None:
    reranker = make(tei_server)
    await reranker.score(QUERY, DOCS)
    await reranker.close()
    assert reranker._http._client is None
    assert len(await reranker.score(QUERY, DOCS)) == 4
    await reranker.close()


def test_missing_url_names_the_variable() -> None:
    with pytest.raises(MissingSetting, match="HINDSIGHT_API_RERANKER_TEI_URL"):
        TEIReranker(Settings(), TEISettings(url=None))


def test_settings_defaults_and_prefix() -> None:
    config = TEISettings(url="http://tei:8080/")
    assert TEISettings.model_config["env_prefix"] == "HINDSIGHT_API_RERANKER_TEI_"
    assert (config.batch_size, config.max_concurrent, config.http_timeout) == (128, 8, 30)
    reranker = TEIReranker(None, config)
    assert reranker._http.url == "http://tei:8080/rerank"
    assert (reranker._http.batch_size, reranker._http.max_concurrent, reranker._http.timeout) == (128, 8, 30)
    assert reranker._http.send_bank_header is False
    assert reranker.init_timeout == 30
    assert RETRY.retries == 3 and RETRY.base_delay == 0.5 and RETRY.max_delay == 5 and RETRY.jitter == 0.5


def test_settings_read_their_variables(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text(
        "HINDSIGHT_API_RERANKER_TEI_URL=http://tei\nHINDSIGHT_API_RERANKER_TEI_BATCH_SIZE=64\n"
        "HINDSIGHT_API_RERANKER_TEI_MAX_CONCURRENT=2\nHINDSIGHT_API_RERANKER_TEI_HTTP_TIMEOUT=5\n"
    )
    config = TEISettings(_env_file=env)  # type: ignore[call-arg]
    assert config.model_dump() == {
        "url": "http://tei",
        "batch_size": 64,
        "max_concurrent": 2,
        "http_timeout": 5,
    }


def test_registers_a_reranker_class() -> None:
    registered: list[object] = []
    register_rerankers(registered.append)
    assert registered == [TEIReranker]
    assert isinstance(TEIReranker, Reranker)
    assert TEIReranker.name == "tei" and TEIReranker.passthrough is False


def test_import_is_cheap() -> None:
    code = (
        "import sys, hindsight_recall_reranker_tei; "
        "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
