"""Operating the service: API key, size limits, timeout, backpressure, errors, metrics, access log, readiness."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall.errors import DatabaseError
from hindsight_recall.service.errors import classify, error_response
from hindsight_recall.service.metrics import ServiceMetrics
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.settings import load_settings
from hindsight_recall.testing.service import ServerThread

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    """Our service with a key, small limits and the JSON access log."""
    return serve(own_database=True, service_api_key=KEY, service_max_body_bytes=20_000, service_max_query_bytes=200,
                 service_max_recalls_in_flight=4, service_access_log="json", recall_max_query_tokens=50)


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers={**AUTH, **EXTRAS}, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def bank(http: httpx.Client) -> str:
    bank_id = f"ops-{uuid.uuid4().hex[:8]}"
    response = http.post(f"/v1/default/banks/{bank_id}/memories",
                         json={"items": [{"content": "Alice works at Helios Robotics."}]})
    assert response.status_code == 200, response.text
    return bank_id


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["message"] and body["detail"] == body["message"]
    assert "Traceback" not in response.text
    return body  # type: ignore[no-any-return]


def recall_path(bank: str) -> str:
    return f"/v1/default/banks/{bank}/memories/recall"


# ---- authentication ------------------------------------------------------------------------------

def test_requests_without_the_key_are_refused(server: Any, bank: str) -> None:
    assert_error(httpx.post(server.url + recall_path(bank), json={"query": "Alice"}, headers=EXTRAS), 401,
                 "unauthorized")
    wrong = {"Authorization": "Bearer nope", **EXTRAS}
    assert_error(httpx.get(server.url + "/v1/default/banks", headers=wrong), 401, "unauthorized")


def test_probes_need_no_key(server: Any) -> None:
    for path in ("/health", "/health/live", "/health/ready", "/version"):
        assert httpx.get(server.url + path).status_code == 200


def test_the_key_opens_the_api(http: httpx.Client, bank: str) -> None:
    assert http.post(recall_path(bank), json={"query": "Where does Alice work?"}).json()["results"]


# ---- sizes and bad input -------------------------------------------------------------------------

def test_body_over_the_limit_is_413(http: httpx.Client, bank: str) -> None:
    body = {"items": [{"content": "x" * 30_000}]}
    assert_error(http.post(f"/v1/default/banks/{bank}/memories", json=body), 413, "body_too_large")


def test_chunked_body_over_the_limit_is_413(http: httpx.Client, bank: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"query": "'
        for _ in range(30):
            yield b"a" * 1000
        yield b'"}'

    assert_error(http.post(recall_path(bank), content=chunks()), 413, "body_too_large")


def test_query_string_over_the_limit_is_413(http: httpx.Client, bank: str) -> None:
    response = http.get(f"/v1/default/banks/{bank}/memories/list", params={"q": "x" * 500})
    assert_error(response, 413, "query_string_too_large")


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{not json", 400, "malformed_json"),
    (b'{"query": "Alice", "max_token": 10}', 422, "invalid_request"),  # a misspelt field is never ignored
    (b'{"query": "Alice", "budget": "huge"}', 422, "invalid_request"),
    (b'{"query": "   "}', 422, "invalid_request"),
    (b'{"query": "&|!():*<>\'\\\\"}', 422, "invalid_request"),
    (b'{"query": "Alice", "max_tokens": 0}', 422, "invalid_request"),
    (b'{"query": "Alice", "query_timestamp": "yesterday"}', 400, "bad_request"),
    (b'{"query": "Alice", "tag_groups": [{"tags": ["a"]}]}', 400, "unsupported_field"),
    (b'{"query": "' + b"word " * 80 + b'"}', 400, "query_too_long"),
    (b'{"query": "Alice", "types": ["opinionated"]}', 422, "invalid_request"),
])
def test_bad_recalls_get_a_clear_error(http: httpx.Client, bank: str, body: bytes, status: int, code: str) -> None:
    assert_error(http.post(recall_path(bank), content=body, headers={"content-type": "application/json"}),
                 status, code)


def test_nul_bytes_in_a_query_are_spaces(http: httpx.Client, bank: str) -> None:
    assert http.post(recall_path(bank), json={"query": "Alice\x00works"}).status_code == 200


@pytest.mark.parametrize(("item", "code"), [
    ({"content": ""}, "invalid_memory"),
    ({"content": "ok", "timestamp": "not a date"}, "invalid_memory"),
    ({"content": "ok", "strategy": "deep"}, "unsupported_field"),
    ({"content": [{"type": "image", "source": {}}]}, "unsupported_content"),
    ({"content": "ok", "colour": "red"}, "invalid_request"),
])
def test_bad_retains_get_a_clear_error(http: httpx.Client, bank: str, item: dict[str, Any], code: str) -> None:
    response = http.post(f"/v1/default/banks/{bank}/memories", json={"items": [item]})
    assert response.status_code in (400, 422) and response.json()["code"] == code, response.text


def test_unknown_things_are_404_and_405(http: httpx.Client, bank: str) -> None:
    assert_error(http.post(recall_path("no-such-bank"), json={"query": "x"}), 404, "bank_not_found")
    assert_error(http.get(f"/v1/default/banks/{bank}/memories/nope"), 404, "memory_not_found")
    assert_error(http.get("/v2/nothing"), 404, "not_found")
    assert_error(http.put(recall_path(bank)), 405, "method_not_allowed")


def test_no_leak_across_banks(http: httpx.Client, bank: str) -> None:
    other = f"ops-{uuid.uuid4().hex[:8]}"
    http.post(f"/v1/default/banks/{other}/memories", json={"items": [{"content": "Zed keeps a secret diary."}]})
    assert all("Zed" not in r["text"] for r in http.post(recall_path(bank), json={"query": "Zed diary"}).json()[
        "results"])
    memory_id = http.get(f"/v1/default/banks/{other}/memories/list").json()["items"][0]["id"]
    assert http.get(f"/v1/default/banks/{bank}/memories/{memory_id}").status_code == 404


# ---- backpressure, timeout, defects --------------------------------------------------------------

def test_recalls_beyond_the_bound_get_503_with_retry_after(server: Any, http: httpx.Client, bank: str) -> None:
    state = server.app.state
    state.recalls_in_flight = 4  # as if four recalls were running
    try:
        response = http.post(recall_path(bank), json={"query": "Alice"})
    finally:
        state.recalls_in_flight = 0
    assert_error(response, 503, "overloaded")
    assert response.headers["Retry-After"] == "1"
    assert http.post(recall_path(bank), json={"query": "Alice"}).status_code == 200


def test_a_request_over_the_timeout_is_504(server: Any, http: httpx.Client, bank: str) -> None:
    guard = server.app
    guard.timeout = 1e-6
    try:
        response = http.post(recall_path(bank), json={"query": "Alice"})
    finally:
        guard.timeout = None
    assert_error(response, 504, "timeout")


def test_a_defect_is_a_json_500_without_secrets(server: Any, http: httpx.Client,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: Any) -> None:
        raise RuntimeError("lost postgresql://app:hunter2@db.internal/mem")

    monkeypatch.setattr(server.engine, "bank_stats", broken)
    body = assert_error(http.get("/v1/default/banks/any/stats"), 500, "internal_error")
    assert "hunter2" not in json.dumps(body) and "postgresql://" not in json.dumps(body)


def test_database_errors_are_503_and_redacted() -> None:
    error = classify(DatabaseError("cannot connect to postgresql://app:hunter2@db/mem"))
    assert (error.status, error.code) == (503, "database_unavailable")
    response = error_response(error, {})
    assert b"hunter2" not in response.body


# ---- metrics and the access log ------------------------------------------------------------------

def test_metrics(server: Any, http: httpx.Client, bank: str) -> None:
    for _ in range(2):  # the second question's embedding comes from the cache
        http.post(recall_path(bank), json={"query": "Where does Alice work?"})
    text = httpx.get(server.url + "/metrics", headers=AUTH).text
    route = "/v1/default/banks/{bank_id}/memories/recall"
    assert f'hindsight_http_requests_total{{method="POST",route="{route}",status="200"}}' in text
    assert f'hindsight_http_request_duration_seconds_bucket{{le="0.001",method="POST",route="{route}"' in text
    assert 'hindsight_recall_phase_duration_seconds_count{phase="generate_query_embedding"}' in text
    assert "hindsight_db_pool_checked_out" in text and "hindsight_reranker_fallbacks_total 0.0" in text
    hits = re.search(r'^hindsight_query_embedding_cache_lookups_total\{result="hit"\} (\S+)$', text, re.M)
    assert hits and float(hits.group(1)) >= 1
    assert bank not in text  # bank ids never become labels


def test_reranker_fallbacks_are_counted() -> None:
    metrics = ServiceMetrics()
    metrics.record_phases([{"phase_name": "reranking", "duration_seconds": 0.01, "details": {"fallback": "x"}},
                           {"phase_name": "reranking", "duration_seconds": 0.01, "details": {}}])
    assert b"hindsight_reranker_fallbacks_total 1.0" in metrics.render()


def test_one_access_log_line_per_request(http: httpx.Client, bank: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="hindsight_recall.access"):
        http.post(recall_path(bank), json={"query": "Alice"})
        deadline = time.monotonic() + 5  # the line is written once the response has gone out
        while time.monotonic() < deadline and not any(r.name == "hindsight_recall.access" for r in caplog.records):
            time.sleep(0.05)
        time.sleep(0.2)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hindsight_recall.access"]
    assert len(lines) == 1
    assert lines[0]["method"] == "POST" and lines[0]["status"] == 200 and lines[0]["bank"] == bank
    assert lines[0]["path"] == recall_path(bank) and lines[0]["ms"] > 0


# ---- readiness -----------------------------------------------------------------------------------

async def test_not_ready_until_the_engine_is_loaded(tmp_path: Path) -> None:
    """Without its lifespan the app never loads the engine: probes say so, memory routes answer 503."""
    from hindsight_recall.service.app import create_app

    app = create_app(load_settings(embedded_data_dir=tmp_path / "never-started", reranker_provider="rrf"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", headers=EXTRAS) as c:
        assert (await c.get("/health/live")).status_code == 200
        ready = await c.get("/health/ready")
        assert ready.status_code == 503 and ready.headers["Retry-After"]
        assert_error(await c.get("/v1/default/banks"), 503, "not_ready")


def test_defaults_bind_loopback_without_a_key() -> None:
    settings = load_settings()
    assert settings.host == "127.0.0.1" and settings.port == 8888 and settings.service_api_key is None


# ---- fields accepted without effect are reported, ours are checked ----------------------------------

def test_profile_fields_are_stored_and_llm_fields_named(http: httpx.Client) -> None:
    bank_id = f"ops-{uuid.uuid4().hex[:8]}"
    response = http.put(f"/v1/default/banks/{bank_id}", json={"name": "Alice", "mission": "help",
                                                                "retain_mission": "x", "enable_reranking": False,
                                                                "retain_structured_chunk_size": 900})
    assert response.status_code == 200
    assert response.headers["X-Hindsight-Ignored-Fields"] == "retain_structured_chunk_size"
    assert response.json()["name"] == "Alice" and response.json()["mission"] == "help"
    assert http.get(f"/v1/default/banks/{bank_id}/config").json()["overrides"] == {"enable_reranking": False,
                                                                                   "retain_mission": "x"}
    assert_error(http.patch(f"/v1/default/banks/{bank_id}/config", json={"updates": {"retain_chunk_size": 9}}),
                 422, "invalid_request")
    # one trait changes alone; the others keep their values
    http.put(f"/v1/default/banks/{bank_id}", json={"disposition_empathy": 5})
    profile = http.get(f"/v1/default/banks/{bank_id}/profile").json()
    assert profile == {"bank_id": bank_id, "name": "Alice", "mission": "help", "background": "help",
                       "disposition": {"skepticism": 3, "literalism": 3, "empathy": 5}}
    listed = http.get("/v1/default/banks", params={"q": bank_id}).json()["banks"]
    assert [(b["name"], b["mission"]) for b in listed] == [("Alice", "help")] and listed[0]["updated_at"]
    assert_error(http.put(f"/v1/default/banks/{bank_id}", json={"disposition_empathy": 9}), 422, "invalid_request")
    assert_error(http.put(f"/v1/default/banks/{bank_id}", json={"mission": "a\x00b"}), 422, "invalid_request")


def test_async_retain_is_queued_and_answered_with_its_operation(http: httpx.Client) -> None:
    bank_id = f"ops-{uuid.uuid4().hex[:8]}"
    response = http.post(f"/v1/default/banks/{bank_id}/memories", json={"items": [{"content": "x y"}], "async": True})
    body = response.json()
    assert body["async"] is True and body["items_count"] == 1 and uuid.UUID(body["operation_id"])
    path = f"/v1/default/banks/{bank_id}/operations/{body['operation_id']}"
    deadline = time.monotonic() + 60
    while http.get(path).json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert http.get(f"/v1/default/banks/{bank_id}/memories/list").json()["total"] == 1


def test_import_needs_a_bank_on_every_memory(http: httpx.Client) -> None:
    body = {"memories": [{"id": "a", "text": "no bank here"}]}
    assert_error(http.post("/v1/default/memories/import", json=body), 422, "invalid_memory")
    body = {"memories": [{"id": "a", "text": "t", "bank": "b", "type": "opinion"}]}
    assert_error(http.post("/v1/default/memories/import", json=body), 422, "invalid_memory")


def test_a_recall_beyond_the_bound_waits_for_a_slot_that_comes_free(server: Any, http: httpx.Client,
                                                                     bank: str) -> None:
    """Within Retry-After a freed slot admits it: clients that retry at once are paced, not spun."""
    import threading

    state = server.app.state
    state.recalls_in_flight = 4  # as if four recalls were running
    other: list[int] = []

    def one_ends_and_another_runs() -> None:  # the other's end hands its slot on to the waiting recall
        time.sleep(0.5)
        state.recalls_in_flight -= 1
        with httpx.Client(base_url=http.base_url, headers=http.headers, timeout=60) as client:
            other.append(client.post(recall_path(bank), json={"query": "Alice"}).status_code)

    ending = threading.Thread(target=one_ends_and_another_runs)
    ending.start()
    try:
        started = time.monotonic()
        response = http.post(recall_path(bank), json={"query": "Alice"})
        waited = time.monotonic() - started
    finally:
        ending.join()
        state.recalls_in_flight = 0
    assert response.status_code == 200 and other == [200], response.text
    assert waited > 0.4
