"""Every answer of ``serve`` as a strict client generated from upstream's OpenAPI document decodes it.

``upstream_openapi_1.1.0.json`` holds upstream Hindsight 1.1.0's operations and schemas. Each answer here,
success and error, is validated against the schema its operation declares for its status (an
undeclared error against FastAPI's ``{"detail": "..."}``) with every object closed to fields the
schema does not name (``additionalProperties: false``, as a client with ``DisallowUnknownFields``
decodes) and every optional field refused when it is null (upstream leaves those out; its row
models, which keep them, excepted). A scenario drives every upstream route this server serves, and
the test fails if one was not answered with a success at least once.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from hindsight_recall.service.unserved import UNSERVED
from hindsight_recall.service.wire import EXTRAS, ROWS_KEEP_NULLS, encode, schemas, shape
from hindsight_recall.testing.http_server import FixtureServer, Reply
from hindsight_recall.testing.llm_server import STAND_IN_KEY
from hindsight_recall.testing.service import ServerThread

UPSTREAM = json.loads((Path(__file__).parent / "upstream_openapi_1.1.0.json").read_text())
#: FastAPI's body for an HTTPException: what upstream answers for an error its operation does not declare
ERROR = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
KEY = STAND_IN_KEY


def strict(node: Any, table: dict[str, Any], name: str = "") -> Any:
    """``node`` as a strict client reads it: objects closed, optional fields never null (rows excepted)."""
    if isinstance(node, list):
        return [strict(item, table) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value, table) for key, value in node.items() if key != "properties"}
    if "$ref" in node:
        out["$ref"] = node["$ref"].replace("#/components/schemas/", "#/$defs/")
    if "properties" in node:
        required = set(node.get("required", ()))
        out["properties"] = {
            key: strict(value, table) if key in required or name in ROWS_KEEP_NULLS
            else {"allOf": [strict(value, table), {"not": {"type": "null"}}]}
            for key, value in node["properties"].items()}
        out.setdefault("additionalProperties", False)
    return out


STRICT = {name: strict(schema, UPSTREAM["schemas"], name) for name, schema in UPSTREAM["schemas"].items()}
def _segment(match: re.Match[str]) -> str:
    """A path parameter's pattern: document ids may hold ``/``."""
    return ".+" if match.group(0) in ("{document_id}", "{key}") else "[^/]+"


#: upstream's operations as (method, path regex, template); literal segments first, as a router matches
OPERATIONS = sorted(
    ((method.upper(), re.compile("^" + re.sub(r"\{[^}]+\}", _segment, path) + "$"), path)
     for path, methods in UPSTREAM["paths"].items() for method in methods),
    key=lambda op: (op[2].count("{"), -len(op[2])))


def operation(method: str, path: str) -> str | None:
    for verb, pattern, template in OPERATIONS:
        if verb == method and pattern.match(path):
            return template
    return None


def validate(method: str, template: str, status: int, body: Any) -> None:
    declared = UPSTREAM["paths"][template][method.lower()]["responses"].get(str(status))
    schema = declared if declared is not None else ERROR if status >= 400 else None
    if schema is None:
        return
    full = {**strict(schema, UPSTREAM["schemas"]), "$defs": STRICT}
    jsonschema.validate(body, full, cls=jsonschema.Draft202012Validator)


class Checked:
    """The operations answered and checked so far: (method, template) -> statuses."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], set[int]] = {}

    def hook(self, response: httpx.Response) -> None:
        request = response.request
        template = operation(request.method, request.url.path)
        if template is None:
            return
        response.read()
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else None
        try:
            validate(request.method, template, response.status_code, body)
        except jsonschema.ValidationError as exc:
            raise AssertionError(f"{request.method} {request.url.path} {response.status_code}: {exc.message} at "
                                 f"{list(exc.absolute_path)}\n{json.dumps(body)[:2000]}") from None
        self.seen.setdefault((request.method, template), set()).add(response.status_code)


#: upstream's operations answered 410, here as there (removed or deprecated)
REMOVED = {("GET", "/v1/default/banks/{bank_id}/document-transfer"),
           ("POST", "/v1/default/banks/{bank_id}/entities/{entity_id}/regenerate")}
#: the operations never answered with a success: the 410s, and the Prometheus text (not JSON)
GONE = REMOVED | {("GET", "/metrics")}


#: served routes that read or remove a mental model, a knowledge page or an attachment by id: none is ever
#: kept (writing one is a model's work; retain stores text only), so they answer 404, checked like every answer
NEVER_FOUND = {(m, f"/v1/default/banks/{{bank_id}}/{p}") for m, p in (
    ("GET", "attachments/{attachment_id}"), ("GET", "mental-models/{mental_model_id}"),
    ("PATCH", "mental-models/{mental_model_id}"),
    ("DELETE", "mental-models/{mental_model_id}"), ("GET", "mental-models/{mental_model_id}/history"),
    ("POST", "mental-models/{mental_model_id}/clear"), ("GET", "knowledge-base/pages/{page_id}"),
    ("PATCH", "knowledge-base/nodes/{node_id}"), ("DELETE", "knowledge-base/nodes/{node_id}"))}


def served() -> set[tuple[str, str]]:
    """Upstream's operations this server serves (every one not answered 501 or 410)."""
    unserved = {(m, p) for p, methods, _ in UNSERVED for m in methods}
    return {(m.upper(), p) for p, methods in UPSTREAM["paths"].items() for m in methods
            if (m.upper(), p) not in unserved | GONE}


@pytest.fixture(scope="module")
def server(llm: FixtureServer, serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(llm_provider="openai", llm_base_url=llm.url + "/v1", llm_api_key=KEY, llm_model="stub-model",
                 llm_max_retries=1, llm_timeout=5,
                 service_operation_workers=0)  # no worker: queued operations stay pending, to be cancelled and retried


#: every answer checked in this module, by operation (the last test reads it)
CHECKED = Checked()


def strict_client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=120, event_hooks={"response": [CHECKED.hook]})


def test_every_served_route_answers_upstreams_exact_shape(server: Any) -> None:
    with strict_client(server.url) as http:
        scenario(http, f"wire-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def working(llm: FixtureServer, serve: Callable[..., ServerThread]) -> ServerThread:
    """``serve`` with its queue worker, for what completed operations show; on a database of its own, so
    no operation another module left queued runs before its own."""
    return serve(own_database=True, llm_provider="openai", llm_base_url=llm.url + "/v1", llm_api_key=KEY,
                 llm_model="stub-model", llm_max_retries=0, llm_timeout=5)


def retained(http: httpx.Client, b: str, items: list[dict[str, Any]]) -> str:
    """Queue an async retain and wait for it to complete; its operation id."""
    operation_id: str = http.post(f"{b}/memories", json={"items": items, "async": True}).json()["operation_id"]
    deadline = time.monotonic() + 60
    while http.get(f"{b}/operations/{operation_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return operation_id


def test_document_history_audit_log_templates_and_the_model_probe(working: Any, llm: FixtureServer) -> None:
    b = f"/v1/default/banks/wire-h-{uuid.uuid4().hex[:8]}"
    with strict_client(working.url) as http:
        first = retained(http, b, [{"content": "Ann sails.", "document_id": "log"},
                                   {"content": "Ann rows.", "document_id": "log"}])
        added = retained(http, b, [{"content": "Ann swims.", "document_id": "log", "update_mode": "append"}])
        replaced = retained(http, b, [{"content": "Ann rests.", "document_id": "log"}])
        history = http.get(f"{b}/documents/log/history").json()
        assert history["total"] == 3
        assert [(e["operation_id"], e["kind"], e["facts_added"], e["facts_removed"]) for e in history["items"]] == [
            (replaced, "retain", 1, 3), (added, "append", 1, 0), (first, "retain", 2, 0)]
        assert len(http.get(f"{b}/documents/log/history", params={"limit": 1, "offset": 1}).json()["items"]) == 1
        assert http.get(f"{b}/documents/nope/history").status_code == 404
        assert http.get(f"{b}/documents/log/history", params={"limit": 0}).status_code == 400
        schema = http.get("/v1/bank-template-schema").json()
        jsonschema.validate(http.get(f"{b}/export").json(), schema)
        assert {"version", "bank"} <= set(schema["properties"])
        assert http.get(f"{b}/attachments/a1").status_code == 404
        assert http.get(f"{b}-nope/attachments/a1").status_code == 404
        entries = http.get(f"{b}/audit-logs").json()["items"]
        assert entries and http.get(f"{b}/audit-logs/{entries[0]['id']}").status_code == 200
        assert http.get(f"{b}/audit-logs/stats").status_code == 200
        assert http.get(f"{b}/audit-logs/{uuid.uuid4()}").status_code == 404
        assert http.get(f"{b}-nope/audit-logs").status_code == 404
        probe = http.post(f"{b}/health/llm").json()
        assert probe["operations"][0]["ok"] and probe["operations"][0]["status"] == "connected"
        llm.script("POST", "/v1/chat/completions", Reply(401, {"error": "bad key"}))
        assert http.post(f"{b}/health/llm").json()["operations"][0]["status"] == "auth_failed"
        llm.script("POST", "/v1/chat/completions", Reply(500, {"error": "down"}))
        assert http.post(f"{b}/health/llm").json()["operations"][0]["status"] == "unreachable"
        assert http.post(f"{b}-nope/health/llm").status_code == 404


def test_every_served_route_was_checked() -> None:
    missing = sorted(op for op in served() if not any(s < 400 or op in NEVER_FOUND and s == 404
                                                      for s in CHECKED.seen.get(op, ())))
    assert not missing, f"served routes never answered with a success: {missing}"
    errors = sum(1 for statuses in CHECKED.seen.values() for s in statuses if s >= 400)
    assert errors >= 25


def scenario(http: httpx.Client, bank: str) -> None:
    """Every served upstream route, with success and error answers."""
    b = f"/v1/default/banks/{bank}"
    for probe in ("/health", "/health/ready", "/health/live"):
        assert http.get(probe).status_code == 200
    assert http.get("/version").status_code == 200
    assert http.put(b, json={"name": "Wire", "mission": "Remember.", "disposition": {"empathy": 4}}).status_code == 200
    assert http.patch(b, json={"name": "Wire bank"}).status_code == 200
    assert http.patch(f"{b}-nope", json={"name": "x"}).status_code == 404
    assert http.put(b, json={"name": 3}).status_code == 422
    traits = {"skepticism": 2, "literalism": 3, "empathy": 4}
    assert http.put(f"{b}/profile", json={"disposition": traits}).status_code == 200
    assert http.get(f"{b}/profile").status_code == 200
    assert http.post(f"{b}/background", json={"content": "Keeps notes."}).status_code == 200
    items = [
        {"content": "Alice works at Helios Robotics in Munich.", "timestamp": "2024-01-10T00:00:00Z",
         "document_id": "diary", "tags": ["work"], "entities": [{"text": "Alice"}, {"text": "Helios"}],
         "context": "chat", "metadata": {"source": "test"}},
        {"content": "Alice ran a marathon in Hamburg.", "timestamp": "2024-02-10T00:00:00Z", "document_id": "diary",
         "entities": [{"text": "Alice"}]},
        {"content": "Bob cooks pasta.", "document_id": "kitchen"},
    ]
    assert http.post(f"{b}/memories", json={"items": items}).status_code == 200
    assert http.post(f"{b}/memories", json={"items": [{"nope": 1}]}).status_code == 422
    assert http.post(f"{b}/memories", content=b"{not json").status_code == 400
    queued = http.post(f"{b}/memories", json={"items": [{"content": "Carol paints."}], "async": True}).json()
    files = f"{b}/files/retain"
    note = ("files", ("note.md", b"# Note\n\nDora sails.", "text/markdown"))
    assert len(http.post(files, data={"request": "{}"}, files=[note]).json()["operation_ids"]) == 1
    assert http.post(files, data={"request": "{}"}, files=[("files", ("a.docx", b"PK", "application/x"))]
                     ).status_code == 415
    assert http.post(files, data={"request": "{nope"}, files=[note]).status_code == 400
    assert http.post(files, data={"request": "{}"}).status_code == 422
    assert http.get("/v1/default/banks", params={"q": "wire"}).status_code == 200
    assert http.get("/v1/default/banks", params={"limit": "x"}).status_code == 400
    for body in ({"query": "Where does Alice work?"},
                 {"query": "Alice", "trace": True, "include": {"chunks": {}, "entities": {}, "source_facts": {}},
                  "budget": "high", "max_tokens": 50}):
        assert http.post(f"{b}/memories/recall", json=body).status_code == 200
    assert http.post(f"{b}/memories/recall", json={"query": "x", "budget": "huge"}).status_code == 422
    assert http.post(f"{b}/reflect", json={"query": "Where does Alice work?", "include": {"facts": {}}}).status_code \
        == 200
    assert http.get(f"{b}/stats").status_code == 200
    assert http.get(f"{b}-nope/stats").status_code == 404
    assert http.get(f"{b}/stats/memories-timeseries", params={"period": "30d"}).status_code == 200
    assert http.get(f"{b}/config").status_code == 200
    assert http.patch(f"{b}/config", json={"updates": {"recall_rrf_k": 50}}).status_code == 200
    assert http.patch(f"{b}/config", json={"updates": {"nope": 1}}).status_code == 422
    assert http.delete(f"{b}/config").status_code == 200
    dated = {"content": "Dora paints.\n\nDora sings.", "timestamp": "2024-03-01T10:00:00Z", "retain_chunk_size": 100}
    assert http.post(f"{b}/memories/dry-run-extract", json=dated).status_code == 200
    assert http.post(f"{b}/memories/dry-run-extract", json={"content": "x", "retain_chunk_size": 5}).status_code == 400
    assert http.post(f"{b}/memories/dry-run-extract", json={}).status_code == 422
    for operation in ("retain", "reflect", "consolidation"):
        assert http.post(f"{b}/prompts/preview", json={"operation": operation}).status_code == 200
    assert http.post(f"{b}/prompts/preview", json={"operation": "nope"}).status_code == 422
    listed = http.get(f"{b}/memories/list", params={"limit": 10}).json()
    memory_id = listed["items"][0]["id"]
    assert http.get(f"{b}/memories/list", params={"type": "nope"}).status_code == 400
    assert http.get(f"{b}/memories/{memory_id}").status_code == 200
    assert http.get(f"{b}/memories/nope").status_code == 404
    assert http.patch(f"{b}/memories/{memory_id}", json={"context": "edited"}).status_code == 200
    assert http.get(f"{b}/memories/{memory_id}/history").status_code == 200
    assert http.get(f"{b}/tags").status_code == 200
    assert http.get(f"{b}/documents").status_code == 200
    assert http.get(f"{b}/documents/diary").status_code == 200
    assert http.get(f"{b}/documents/nope").status_code == 404
    assert http.patch(f"{b}/documents/diary", json={"tags": ["work", "life"]}).status_code == 200
    chunks = http.get(f"{b}/documents/diary/chunks").json()
    assert http.post(f"{b}/documents/diary/reprocess").status_code == 200
    assert http.post(f"{b}/documents/nope/reprocess").status_code == 404
    assert http.get(f"/v1/default/chunks/{chunks['items'][0]['chunk_id']}").status_code == 200
    assert http.get("/v1/default/chunks/nope").status_code == 404
    entities = http.get(f"{b}/entities").json()
    assert http.get(f"{b}/entities/{entities['items'][0]['id']}").status_code == 200
    assert http.get(f"{b}/entities/not-a-uuid").status_code == 400
    assert http.get(f"{b}/entities/graph").status_code == 200
    assert http.post(f"{b}/entities/{entities['items'][0]['id']}/regenerate").status_code == 410
    assert http.get(f"{b}/graph").status_code == 200
    ops = http.get(f"{b}/operations").json()
    assert ops["operations"]
    op = queued["operation_id"]
    assert http.get(f"{b}/operations/{op}").status_code == 200
    assert http.get(f"{b}/operations/{uuid.uuid4()}").status_code == 200
    assert http.get(f"{b}/operations/nope").status_code == 400
    assert http.post(f"{b}/operations/{op}/retry").status_code == 409
    assert http.delete(f"{b}/operations/{op}/delete").status_code == 409
    assert http.delete(f"{b}/operations/{op}").status_code == 200
    assert http.post(f"{b}/operations/{op}/retry").status_code == 200
    assert http.delete(f"{b}/operations/{op}").status_code == 200
    assert http.delete(f"{b}/operations/{op}/delete").status_code == 200
    assert http.delete(f"{b}/operations/{uuid.uuid4()}").status_code == 404
    assert http.post(f"{b}/aliases", json={"alias": f"{bank}-alias"}).status_code == 201
    assert http.get(f"{b}/aliases").status_code == 200
    assert http.patch(f"{b}/aliases/{bank}-alias", json={"primary": True}).status_code == 200
    assert http.delete(f"{b}/aliases/{bank}-alias").status_code == 200
    assert http.delete(f"{b}/aliases/{bank}-alias").status_code == 404
    template = http.get(f"{b}/export").json()
    assert http.post(f"{b}/import", json=template).status_code == 200
    exported = http.post(f"{b}/transfer/export").json()
    archive = http.get(f"/v1/default/files/download/transfers/{bank}/{exported['operation_id']}.zip").content
    assert zipfile.is_zipfile(io.BytesIO(archive))
    assert http.post(f"/v1/default/banks/{bank}-copy/transfer/import",
                     files={"file": ("a.zip", archive)}, params={"target_bank_id": f"{bank}-copy"}).status_code == 202
    assert http.post(f"{b}/document-transfer/export", json={"document_ids": ["diary"]}).status_code in (202, 422)
    assert http.post(f"/v1/default/banks/{bank}-docs/document-transfer", files={"file": ("a.zip", archive)}
                     ).status_code in (202, 404)
    assert http.post(f"{b}/clone", params={"target_bank_id": f"{bank}-clone"}).status_code == 202
    assert http.get(f"{b}/document-transfer").status_code == 410
    directive = http.post(f"{b}/directives", json={"name": "Formal", "content": "Be formal.", "tags": ["w"]}).json()
    assert http.post(f"{b}/directives", json={"name": "x"}).status_code == 422
    assert http.get(f"{b}/directives").status_code == 200
    assert http.get(f"{b}/directives/{directive['id']}").status_code == 200
    assert http.patch(f"{b}/directives/{directive['id']}", json={"priority": 3}).status_code == 200
    assert http.delete(f"{b}/directives/{directive['id']}").status_code == 200
    assert http.get(f"{b}/directives/{directive['id']}").status_code == 404
    assert http.get(f"{b}/mental-models").status_code == 200
    for method, rest in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("GET", "/history"), ("POST", "/clear")):
        assert http.request(method, f"{b}/mental-models/m1{rest}", json={}).status_code == 404
    for path in ("tree", "export"):
        assert http.get(f"{b}/knowledge-base/{path}").status_code == 200
    assert http.get(f"{b}/knowledge-base/search", params={"q": "x"}).status_code == 200
    assert http.get(f"{b}/knowledge-base/pages/p1").status_code == 404
    assert http.patch(f"{b}/knowledge-base/nodes/n1", json={}).status_code == 404
    assert http.delete(f"{b}/knowledge-base/nodes/n1").status_code == 404
    hook = http.post(f"{b}/webhooks", json={"url": "http://example.com/hook", "secret": "s",
                                            "event_types": ["retain.completed"]}).json()
    assert http.post(f"{b}/webhooks", json={"url": "http://10.1.2.3/"}).status_code == 400
    assert http.get(f"{b}/webhooks").status_code == 200
    assert http.patch(f"{b}/webhooks/{hook['id']}", json={"enabled": False}).status_code == 200
    assert http.post(f"{b}/memories", json={"items": [{"content": "Gus bakes."}]}).status_code == 200
    assert http.get(f"{b}/webhooks/{hook['id']}/deliveries").status_code == 200
    assert http.delete(f"{b}/webhooks/{hook['id']}").status_code == 200
    assert http.delete(f"{b}/webhooks/{hook['id']}").status_code == 404
    memories = [{"id": "src", "text": "Ivy paints murals.", "bank": bank},
                {"id": "obs", "text": "Ivy is an artist.", "type": "observation", "sources": ["src"],
                 "tags": ["art"], "bank": bank}]
    assert http.post("/v1/default/memories/import", json={"memories": memories}).status_code == 200
    assert http.get(f"{b}/observations/scopes").status_code == 200
    assert http.delete(f"{b}/memories/src/observations").status_code == 200
    assert http.delete(f"{b}/memories/nobody/observations").status_code == 404
    assert http.delete(f"{b}/observations").status_code == 200
    assert http.get(f"{b}/llm-requests").status_code == 200
    assert http.get(f"{b}/llm-requests/stats").status_code == 200
    assert http.get(f"{b}-nope/llm-requests").status_code == 404
    assert http.delete(f"{b}/documents/kitchen").status_code == 200
    assert http.delete(f"{b}/memories", params={"type": "experience"}).status_code == 200
    for extra in (f"{bank}-copy", f"{bank}-clone", f"{bank}-docs"):
        http.delete(f"/v1/default/banks/{extra}")
    assert http.delete(b).status_code == 200


def test_extras_come_only_when_asked(server: Any) -> None:
    bank = f"wire-x-{uuid.uuid4().hex[:8]}"
    b = f"/v1/default/banks/{bank}"
    with httpx.Client(base_url=server.url, timeout=120) as http, \
            httpx.Client(base_url=server.url, timeout=120, headers=EXTRAS) as ours:
        http.post(f"{b}/memories", json={"items": [{"content": "Erin keeps bees in Lyon."}]})
        plain = http.post(f"{b}/memories/recall", json={"query": "bees"}).json()
        full = ours.post(f"{b}/memories/recall", json={"query": "bees"}).json()
        assert "results_truncated" not in plain and "results_truncated" in full
        assert "context" not in plain["results"][0]["scores"] and "context" in full["results"][0]["scores"]
        assert set(http.get(f"{b}/stats").json()) < set(ours.get(f"{b}/stats").json())
        assert {"server", "server_version"} <= set(ours.get("/version").json())
        assert "server" not in http.get("/version").json()
        missing = http.get(f"{b}/memories/nope")
        assert missing.json() == {"detail": missing.json()["detail"]}
        assert ours.get(f"{b}/memories/nope").json()["code"] == "memory_not_found"
        invalid = http.post(f"{b}/memories", json={"items": [{}]}).json()["detail"]
        assert invalid[0]["loc"] == ["body", "items", 0, "content"] and invalid[0]["type"] == "missing"
        http.delete(b)


def test_liveness_and_version_as_upstreams_client_reads_them(server: Any) -> None:
    pytest.importorskip("hindsight_client")
    from hindsight_client_api import ApiClient, Configuration
    from hindsight_client_api.api.monitoring_api import MonitoringApi

    async def probe() -> tuple[Any, Any]:
        async with ApiClient(Configuration(host=server.url)) as api:
            monitoring = MonitoringApi(api)
            return await monitoring.get_liveness(), await monitoring.get_version()

    live, version = asyncio.run(probe())
    assert live.status == "alive" and live.version == "1.1.0" and live.uptime_seconds >= 0
    assert version.api_version == "1.1.0"
    assert version.features.document_export_api and version.features.document_import_api
    assert version.features.bank_config_api and not version.features.observations


def test_shaping_follows_the_schema() -> None:
    """Unknown fields and null optionals leave; required nulls and rows' nulls stay; dicts of models shaped."""
    body = {"results": [{"id": "1", "text": "t", "scores": {"final": 1.0, "context": 0.2}, "context": None,
                         "extra": 1}], "results_truncated": False, "trace": None,
            "source_facts": {"a": {"id": "2", "text": "u", "tags": None, "more": 2}}}
    assert shape("RecallResponse", body) == {"results": [{"id": "1", "text": "t", "scores": {"final": 1.0}}],
                                             "source_facts": {"a": {"id": "2", "text": "u"}}}
    row = {"id": "m", "text": "t", "context": None, "nope": 1}
    assert shape("MemoryUnitListItem", row)["context"] is None and "nope" not in shape("MemoryUnitListItem", row)
    assert "error_message" in shape("OperationResponse", {"id": "o", "task_type": "retain", "items_count": 1,
                                                         "created_at": "x", "status": "s", "error_message": None})


def test_answers_encode_as_json_writes_them() -> None:
    """Compact UTF-8 as json writes it; float and int subclasses as numbers; NaN as null; others refused."""
    body = {"a": [1, 2.5, None, True], "é": "ü", "n": {"x": 0.125}}
    assert encode(body) == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    assert json.loads(encode({"x": 1e-7})) == {"x": 1e-7}  # the same number ("1e-7", where json writes "1e-07")

    class Score(float):
        pass

    assert json.loads(encode({"s": Score(0.25), "nan": float("nan"), 3: "k"})) == {"s": 0.25, "nan": None, "3": "k"}
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode({"x": object()})


def test_the_packaged_schemas_are_upstreams() -> None:
    assert schemas() == UPSTREAM["schemas"]


def test_the_route_table_in_the_docs_says_what_each_route_does() -> None:
    text = (Path(__file__).parents[1] / "docs" / "service.md").read_text()
    section = text.split("### Every upstream route", 1)[1].split("\n### ", 1)[0]
    rows = dict(re.findall(r"^\| `([A-Z]+ [^`]+)` \| ([^|]+) \|$", section, re.M))
    unserved = {(m, p) for p, methods, _ in UNSERVED for m in methods}
    expected = {}
    for path, methods in UPSTREAM["paths"].items():
        for method in methods:
            key = f"{method.upper()} {path.replace('/v1/default/banks/{bank_id}', '…')}"
            op = (method.upper(), path)
            expected[key] = ("501" if op in unserved else "410" if op in REMOVED else "served with your model"
                             if path.endswith("/reflect") else "served")
    assert {key: re.split(r"[:,(]", status)[0].strip() for key, status in rows.items()} == expected
