"""The audit log over ``serve``: every write to a bank recorded with who, what and when, read back with
upstream's filters, its stats and one entry whole; kept after the bank is deleted; off by setting."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hindsight_recall import Engine
from hindsight_recall.errors import ConfigError
from hindsight_recall.service.audit import ACTIONS
from hindsight_recall.service.routes import api_routes
from hindsight_recall.service.unserved import UNSERVED
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.settings import Settings, load_settings
from hindsight_recall.testing.service import ServerThread

#: reads sent as POST (and the model's probe): not recorded
READS = {("POST", f"/v1/default/banks/{{bank_id}}/{p}")
         for p in ("memories/recall", "reflect", "health/llm", "memories/dry-run-extract", "prompts/preview")}
#: answered 410 whatever is asked (upstream's deprecated route): nothing is written
GONE = {("POST", "/v1/default/banks/{bank_id}/entities/{entity_id}/regenerate")}


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve()


@pytest.fixture
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers={**EXTRAS, "User-Agent": "audit-test/1"}) as c:
        yield c


def entries(http: httpx.Client, b: str, **params: Any) -> list[dict[str, Any]]:
    answer = http.get(f"{b}/audit-logs", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]  # type: ignore[no-any-return]


def test_every_write_route_names_its_action() -> None:
    unserved = {(m, p) for p, methods, _ in UNSERVED for m in methods}
    writes = {(m, r.path) for r in api_routes() for m in r.methods or () if m not in ("GET", "HEAD")
              and r.path.startswith("/v1/default/banks/{bank_id}")}
    assert writes - unserved - READS - GONE == set(ACTIONS)


def test_writes_are_recorded_with_who_what_and_when(http: httpx.Client) -> None:
    b = f"/v1/default/banks/audit-{uuid.uuid4().hex[:8]}"
    before = datetime.now(UTC) - timedelta(seconds=1)
    assert http.put(b, json={"name": "Audited"}).status_code == 200
    assert http.post(f"{b}/memories", json={"items": [{"content": "Alice runs.", "document_id": "d"}]}).status_code \
        == 200
    assert http.post(f"{b}/memories", json={"items": [{}]}).status_code == 422
    assert http.patch(f"{b}/config", json={"updates": {"recall_rrf_k": 40}}).status_code == 200
    http.post(f"{b}/memories/recall", json={"query": "Alice"})
    http.get(f"{b}/stats")
    listed = entries(http, b)
    assert [e["action"] for e in listed] == ["update_bank_config", "retain", "retain", "create_bank"]
    failed, retained = listed[1], listed[2]
    assert failed["metadata"]["status_code"] == 422 and retained["metadata"]["status_code"] == 200
    assert retained["transport"] == "http" and retained["metadata"]["user_agent"] == "audit-test/1"
    assert retained["metadata"]["client"] == "127.0.0.1" and retained["metadata"]["method"] == "POST"
    assert datetime.fromisoformat(retained["started_at"]) >= before
    assert retained["ended_at"] >= retained["started_at"] and retained["duration_ms"] >= 0
    whole = http.get(f"{b}/audit-logs/{retained['id']}").json()
    assert whole["request"]["items"][0]["content"] == "Alice runs."
    assert whole["response"]["success"] is True
    assert [e["action"] for e in entries(http, b, action="retain")] == ["retain", "retain"]
    assert entries(http, b, transport="mcp") == []
    assert len(entries(http, b, limit=1, offset=1)) == 1
    assert entries(http, b, start_date=(datetime.now(UTC) + timedelta(hours=1)).isoformat()) == []
    stats = http.get(f"{b}/audit-logs/stats", params={"period": "1d"}).json()
    assert stats["trunc"] == "day" and stats["period"] == "1d"
    assert sum(bucket["total"] for bucket in stats["buckets"]) == 4
    assert stats["buckets"][-1]["actions"]["retain"] == 2
    assert http.get(f"{b}/audit-logs/stats", params={"action": "create_bank"}).json()["buckets"][0]["total"] == 1


def test_a_deleted_banks_log_is_kept(http: httpx.Client) -> None:
    b = f"/v1/default/banks/audit-{uuid.uuid4().hex[:8]}"
    http.put(b, json={})
    assert http.delete(b).status_code == 200
    assert [e["action"] for e in entries(http, b)] == ["delete_bank", "create_bank"]
    assert http.get(f"{b}/stats").status_code == 404


def test_the_api_key_is_kept_as_a_fingerprint(make_settings: Callable[..., Settings]) -> None:
    key = "audit-key-0123456789"
    with (ServerThread(make_settings(service_api_key=key)) as server,
          httpx.Client(base_url=server.url, timeout=60, headers={**EXTRAS, "Authorization": f"Bearer {key}"}) as http):
        b = f"/v1/default/banks/audit-{uuid.uuid4().hex[:8]}"
        http.put(b, json={})
        (entry,) = entries(http, b)
        assert entry["metadata"]["api_key"].startswith("sha256:") and key not in str(entry)
        whole = http.get(f"{b}/audit-logs/{entry['id']}").json()
        assert key not in str(whole)


def test_bad_reads_of_the_log(http: httpx.Client) -> None:
    b = f"/v1/default/banks/audit-{uuid.uuid4().hex[:8]}"
    assert http.get(f"{b}/audit-logs").status_code == 404
    http.put(b, json={})
    assert http.get(f"{b}/audit-logs/{uuid.uuid4()}").status_code == 404
    assert http.get(f"{b}/audit-logs/not-an-id").status_code == 404
    assert http.get(f"{b}/audit-logs", params={"limit": "501"}).status_code == 400
    assert http.get(f"{b}/audit-logs", params={"transport": "carrier-pigeon"}).status_code == 400
    assert http.get(f"{b}/audit-logs", params={"start_date": "soon"}).status_code == 400
    assert http.get(f"{b}/audit-logs/stats", params={"period": "2y"}).json()["period"] == "7d"


def test_switched_off_nothing_is_recorded(make_settings: Callable[..., Settings]) -> None:
    with (ServerThread(make_settings(audit_log_enabled=False)) as server,
          httpx.Client(base_url=server.url, timeout=60, headers=EXTRAS) as http):
        b = f"/v1/default/banks/audit-{uuid.uuid4().hex[:8]}"
        http.put(b, json={})
        assert entries(http, b) == []
        assert http.get("/version").json()["features"]["audit_log"] is False


def _entry(bank_id: str, action: str, days_ago: float) -> dict[str, Any]:
    at = datetime.now(UTC) - timedelta(days=days_ago)
    return {"bank_id": bank_id, "action": action, "transport": "http", "started_at": at, "ended_at": at,
            "request": None, "response": None, "metadata": {}}


async def _actions(engine: Engine, bank_id: str) -> list[str]:
    found, _ = await engine.audit.page(bank_id, action=None, transport=None, start=None, end=None, limit=50,
                                       offset=0)
    return [e["action"] for e in found]


async def test_entries_older_than_the_retention_are_pruned(engine: Engine, bank: str) -> None:
    for action, days in (("retain", 45), ("create_bank", 31), ("delete_document", 29), ("update_bank", 0)):
        await engine.audit.record(_entry(bank, action, days))
    assert await engine.audit.prune() == 0  # AUDIT_LOG_RETENTION_DAYS=-1 (the default) keeps every entry
    assert len(await _actions(engine, bank)) == 4
    assert await engine.audit.prune(days=30) >= 2
    assert await _actions(engine, bank) == ["update_bank", "delete_document"]
    with pytest.raises(ValueError, match="at least 1"):
        await engine.audit.prune(days=0)


async def test_the_service_prunes_the_log_in_the_background(engine: Engine, bank: str,
                                                            make_settings: Callable[..., Settings]) -> None:
    await engine.audit.record(_entry(bank, "retain", 8))
    await engine.audit.record(_entry(bank, "create_bank", 6))
    with ServerThread(make_settings(audit_log_retention_days=7)):
        deadline = time.monotonic() + 30
        while await _actions(engine, bank) != ["create_bank"] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    assert await _actions(engine, bank) == ["create_bank"]


@pytest.mark.parametrize("raw", ["0", "-2", "soon", "1.5"])
def test_the_retention_is_a_number_of_days_or_minus_one(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    assert load_settings().audit_log_retention_days == -1
    monkeypatch.setenv("HINDSIGHT_API_AUDIT_LOG_RETENTION_DAYS", "90")
    assert load_settings().audit_log_retention_days == 90
    monkeypatch.setenv("HINDSIGHT_API_AUDIT_LOG_RETENTION_DAYS", raw)
    with pytest.raises(ConfigError, match="HINDSIGHT_API_AUDIT_LOG_RETENTION_DAYS"):
        load_settings()


async def test_a_server_without_workers_prunes_the_log_too(engine: Engine, bank: str,
                                                          make_settings: Callable[..., Settings]) -> None:
    await engine.audit.record(_entry(bank, "retain", 3))
    with ServerThread(make_settings(audit_log_retention_days=2, service_operation_workers=0)):
        deadline = time.monotonic() + 30
        while await _actions(engine, bank) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    assert await _actions(engine, bank) == []
