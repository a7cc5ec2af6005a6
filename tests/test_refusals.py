"""A refused request changes nothing and never answers 5xx: every write route with bad input, every
bank-keyed table compared before and after; oversized bodies refused before they are read; a request
cut by shutdown answers 503 with Retry-After."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.service import ServerThread

MAX_BODY = 8_000_000


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True, service_max_body_bytes=MAX_BODY, service_max_sync_retain_items=50)


@pytest.fixture
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120, headers=EXTRAS) as c:
        yield c


@pytest.fixture
def bank(http: httpx.Client) -> str:
    """A bank with a document of four items, loose memories with links, an observation and an
    invalidated memory."""
    bank = f"rf-{uuid.uuid4().hex[:10]}"
    items = [{"content": f"Line {i} of the ferry timetable.", "document_id": "timetable"} for i in range(4)]
    http.post(f"/v1/default/banks/{bank}/memories", json={"items": items}).raise_for_status()
    memories = [
        {"id": "a", "text": "Alice takes the morning ferry.", "entities": ["Alice"], "bank": bank},
        {"id": "b", "text": "The morning ferry was late.", "causes": ["a"], "bank": bank},
        {"id": "o", "text": "Ferries run late.", "type": "observation", "sources": ["b"], "bank": bank},
        {"id": "gone", "text": "The ferry is free.", "bank": bank},
    ]
    http.post("/v1/default/memories/import", json={"memories": memories}).raise_for_status()
    http.patch(f"/v1/default/banks/{bank}/memories/gone", json={"state": "invalidated"}).raise_for_status()
    return bank


def tables(server: Any, *banks: str) -> Any:
    from hindsight_recall.testing.snapshot import read_bank_rows

    return read_bank_rows(server.engine.db.url, banks)


def memories_path(bank: str) -> str:
    return f"/v1/default/banks/{bank}/memories"


#: (method, path under the bank, json body or None, params, expected status): each must change nothing
REFUSALS: list[tuple[str, str, Any, dict[str, str], int]] = [
    ("POST", "/memories", {"items": [{"content": "ok", "document_id": "timetable"}, {"content": ""}]}, {}, 422),
    ("POST", "/memories", {"items": [{"content": "ok"}, {"content": "x", "timestamp": "not a date"}]}, {}, 422),
    ("POST", "/memories", {"items": [{"content": "x" * 10, "document_id": "timetable"}] * 51}, {}, 413),
    ("POST", "/memories", {"items": [{"content": "\u0000"}]}, {}, 422),
    ("POST", "/memories", {"items": [{"content": "x", "strategy": "llm"}]}, {}, 400),
    ("POST", "/memories", {"items": "nope"}, {}, 422),
    ("POST", "/memories", {"items": [{"content": "ok"}], "async": True, "operation_id": "not-a-uuid"}, {}, 422),
    ("PATCH", "/memories/a", {"text": ""}, {}, 400),
    ("PATCH", "/memories/a", {"occurred_start": "last tuesday"}, {}, 400),
    ("PATCH", "/memories/a", {"text": "x" * 2_000_000}, {}, 400),
    ("PATCH", "/memories/o", {"text": "edited observation"}, {}, 400),
    ("PATCH", "/memories/nobody", {"text": "x"}, {}, 404),
    ("PATCH", "/memories/gone", {"state": "valid", "occurred_end": "never"}, {}, 400),
    ("PATCH", "/memories/a", {"state": "sideways"}, {}, 422),
    ("DELETE", "/memories/nobody", None, {}, 404),
    ("DELETE", "/memories", None, {"type": "rumour"}, 400),
    ("DELETE", "/documents/nodoc", None, {}, 404),
    ("PATCH", "/documents/timetable", {"tags": ["\u0000"]}, {}, 400),
    ("PATCH", "/documents/nodoc", {"tags": ["x"]}, {}, 404),
    ("POST", "/clone", None, {}, 422),
    ("POST", "/clone", None, {"target_bank_id": "{bank}"}, 400),
    ("POST", "/transfer/import", None, {"mode": "sideways"}, 400),
    ("POST", "/transfer/import", None, {}, 422),
    ("POST", "/document-transfer", None, {"on_conflict": "merge"}, 400),
    ("PATCH", "/config", {"updates": {"recall_budget_fixed_mid": -1}}, {}, 422),
    ("PATCH", "/config", {"updates": {"no_such_setting": 1}}, {}, 422),
    ("PUT", "", {"disposition": {"empathy": 9}}, {}, 422),
]


@pytest.mark.parametrize(("method", "path", "body", "params", "status"), REFUSALS,
                         ids=[f"{m} {p} {i}" for i, (m, p, *_rest) in enumerate(REFUSALS)])
def test_a_refused_write_changes_nothing(server: Any, http: httpx.Client, bank: str, method: str, path: str,
                                         body: Any, params: dict[str, str], status: int) -> None:
    other = f"{bank}-other"
    before = tables(server, bank, other)
    params = {k: v.replace("{bank}", bank) for k, v in params.items()}
    response = http.request(method, f"/v1/default/banks/{bank}{path}", json=body, params=params)
    assert response.status_code < 500, response.text
    assert response.status_code == status, response.text
    from hindsight_recall.testing.snapshot import differences

    assert differences(before, tables(server, bank, other)) == []


def test_an_archive_refused_for_a_bad_fact_changes_nothing(server: Any, http: httpx.Client, bank: str) -> None:
    import io
    import json
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"schema_version": 1, "source_bank_id": bank, "archive_type": "bank"}))
        zf.writestr("documents/000000.json", json.dumps({"id": "timetable", "facts": [{"text": "v2"}, {"text": 5}]}))
    before = tables(server, bank, f"{bank}-r")
    for params in ({"mode": "merge", "document_conflict": "replace"}, {"target_bank_id": f"{bank}-r"}):
        response = http.post(f"/v1/default/banks/{bank}/transfer/import", params=params,
                             files={"file": ("a.zip", buf.getvalue())})
        assert response.status_code == 400 and "facts[1].text" in response.json()["message"]
    assert tables(server, bank, f"{bank}-r") == before


def _raw_request(url: str, head: bytes, body_parts: list[bytes], pause: float = 0.0) -> tuple[int, float]:
    """Send ``head`` then the body parts (``pause`` apart) on a socket of our own; (status, seconds until
    the status line arrived, counted from the end of the head)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        started = time.perf_counter()
        answer = b""
        sock.setblocking(False)
        parts = list(body_parts)
        while b"\r\n" not in answer:
            try:
                answer += sock.recv(4096)
            except BlockingIOError:
                if parts:
                    try:
                        sock.sendall(parts.pop(0))
                    except OSError:
                        parts = []
                time.sleep(pause or 0.001)
            except ConnectionResetError:
                break
            assert time.perf_counter() - started < 20, "no answer"
        return int(answer.split(b" ", 2)[1]), time.perf_counter() - started


def test_an_oversized_body_is_refused_before_it_is_read(server: Any, http: httpx.Client) -> None:
    path = "/v1/default/banks/big/memories"
    # a Content-Length over the limit: 413 before a byte of the body is sent
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {MAX_BODY * 50}\r\n\r\n").encode()
    status, seconds = _raw_request(server.url, head, [])
    assert status == 413 and seconds < 1
    # no Content-Length: cut off while it streams in, at the limit
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b" " * 500_000
    parts = [f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(20)]
    status, seconds = _raw_request(server.url, head, parts)
    assert status == 413 and seconds < 1
    # a synchronous retain of far too many items: refused from their count, before any is validated
    import json

    items = json.dumps({"items": [{"content": f"item {i}"} for i in range(200_000)]}).encode()
    assert MAX_BODY > len(items) > 5_000_000
    started = time.perf_counter()
    response = http.post(path, content=items, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["code"] == "too_many_items"
    assert time.perf_counter() - started < 1, time.perf_counter() - started
    assert http.get("/v1/default/banks/big/stats").status_code == 404


@pytest.mark.slow
def test_a_request_cut_by_shutdown_answers_503_with_retry_after_and_writes_nothing(tmp_path: Path) -> None:
    from hindsight_recall.testing.service import ServeProcess
    from hindsight_recall.testing.snapshot import read_bank_rows

    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_API_")}
    env.update({"HINDSIGHT_API_EMBEDDED_DATA_DIR": str(tmp_path / "pg" / "data"),
                "HINDSIGHT_API_RERANKER_PROVIDER": "rrf", "HINDSIGHT_API_SERVICE_SHUTDOWN_TIMEOUT": "1"})
    log = tmp_path / "serve.log"
    server = ServeProcess(env, log.open("w")).start()
    url = server.url
    items = [{"content": f"Memory {i} about the lighthouse keeper's log and ship {i * 7}.", "document_id": "log"}
             for i in range(2000)]
    answer: dict[str, Any] = {}

    def retain() -> None:
        try:
            answer["response"] = httpx.post(f"{url}/v1/default/banks/cut/memories", json={"items": items},
                                            headers=EXTRAS, timeout=120)
        except httpx.HTTPError as exc:
            answer["response"] = exc

    try:
        worker = threading.Thread(target=retain)
        worker.start()
        while worker.is_alive() and "hindsight_http_requests_in_flight 2.0" not in httpx.get(f"{url}/metrics").text:
            time.sleep(0.05)
        database = httpx.get(f"{url}/health").json()
        assert database["status"] == "healthy"
        server.process.send_signal(signal.SIGTERM)
        worker.join(timeout=120)
    finally:
        server.stop()
    response = answer["response"]
    assert isinstance(response, httpx.Response), repr(response)
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] and response.json()["code"] == "shutting_down"
    text = log.read_text()
    assert "CancelledError" not in text and "Traceback" not in text, text[-3000:]
    # nothing of the cut retain was kept (the data dir outlives the process)
    from hindsight_recall.store import embedded

    data_dir = tmp_path / "pg" / "data"
    url_db = embedded.start(data_dir)
    try:
        assert read_bank_rows(url_db, ["cut"]).get("memory_units", []) == []
    finally:
        embedded.stop(data_dir)
