"""Bank export, import, transfer and clone in upstream's archive format, bank templates and bank aliases,
through upstream's client (``hindsight-client==1.1.0``) where it has a method, else httpx."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import uuid
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
from hindsight_client_api.exceptions import ApiException  # noqa: E402
from hindsight_client_api.models.create_bank_alias_request import CreateBankAliasRequest  # noqa: E402
from hindsight_client_api.models.set_bank_alias_primary_request import SetBankAliasPrimaryRequest  # noqa: E402

MEMORIES = [
    {"id": "m1", "text": "Alice works as a data engineer at Helios Robotics.", "type": "world",
     "occurred_start": "2023-08-01T00:00:00+00:00", "entities": ["Alice", "Helios Robotics"], "tags": ["work"],
     "document_id": "chat-1", "chunk": "Alice works at Helios.", "context": "career", "metadata": {"src": "slack"}},
    {"id": "m2", "text": "Alice ran her first marathon in Hamburg.", "type": "experience",
     "mentioned_at": "2023-04-23T00:00:00+00:00", "entities": ["Alice", "Hamburg"], "tags": ["personal"],
     "document_id": "chat-1", "chunk": "Alice ran a marathon.", "causes": ["m1"]},
    {"id": "m3", "text": "Bob cooked pasta carbonara for dinner.", "entities": ["Bob"],
     "occurred_start": "2023-05-02T00:00:00+00:00", "occurred_end": "2023-05-03T00:00:00+00:00"},
    {"id": "o1", "text": "Alice is an active person.", "type": "observation", "sources": ["m1", "m2"],
     "entities": ["Alice"], "proof_count": 2},
]


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True, service_max_body_bytes=2_000_000)


@pytest.fixture(scope="module")
def service_url(server: Any) -> str:
    return str(server.url)


@pytest.fixture
def http(service_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(headers=EXTRAS, base_url=service_url, timeout=120) as c:
        yield c


@pytest.fixture
def client(service_url: str) -> Iterator[Any]:
    with hindsight_client.Hindsight(base_url=service_url, timeout=120) as c:
        yield c


def run(service_url: str, call: Any) -> Any:
    """``await call(client)`` with a client made on the loop that runs it (its session belongs to that loop)."""

    async def go() -> Any:
        c = hindsight_client.Hindsight(base_url=service_url, timeout=120)
        try:
            return await call(c)
        finally:
            await c.aclose()

    # in a thread of its own: the sync client of the ``client`` fixture keeps its loop in this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()


def new_bank(http: httpx.Client, memories: list[dict[str, Any]] | None = None) -> str:
    bank = f"tr-{uuid.uuid4().hex[:10]}"
    body = {"memories": [{**m, "bank": bank} for m in (MEMORIES if memories is None else memories)]}
    assert http.post("/v1/default/memories/import", json=body).status_code == 200
    return bank


def snapshot(http: httpx.Client, bank: str) -> dict[str, Any]:
    """Every memory with its entities, tags, dates, document, chunk, sources and links, by id."""
    items = http.get(f"/v1/default/banks/{bank}/memories/list", params={"limit": 1000}).json()["items"]
    out = {}
    for item in items:
        full = http.get(f"/v1/default/banks/{bank}/memories/{item['id']}").json()
        out[item["id"]] = {k: full.get(k) for k in ("text", "type", "context", "occurred_start", "occurred_end",
                                                    "mentioned_at", "tags", "metadata", "document_id",
                                                    "proof_count", "source_ids")}
        out[item["id"]]["entities"] = sorted(full["entities"])
    return out


def operation(http: httpx.Client, response: httpx.Response) -> str:
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "completed"
    return str(body["operation_id"])


def export(http: httpx.Client, bank: str, **params: Any) -> bytes:
    op = operation(http, http.post(f"/v1/default/banks/{bank}/transfer/export", params=params))
    key = f"transfers/{bank}/{op}.zip"
    got = http.get(f"/v1/default/files/download/{key}")
    assert got.status_code == 200 and got.headers["content-type"] == "application/zip"
    return got.content


def test_round_trip_through_upstreams_client(http: httpx.Client, client: Any) -> None:
    source = new_bank(http)
    archive = export(http, source)
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert manifest["schema_version"] == 1 and manifest["archive_type"] == "bank"
        assert manifest["document_count"] == 2 and manifest["fact_count"] == 3 and manifest["observation_count"] == 1
        doc = json.loads(zf.read("documents/000000.json"))
        assert doc["id"] == "chat-1" and [c["chunk_text"] for c in doc["chunks"]] == [
            "Alice works at Helios.", "Alice ran a marathon."]
    target = f"{source}-copy"
    op = client.import_bank(source, archive, target_bank_id=target)
    assert op
    assert snapshot(http, target) == snapshot(http, source)
    before = http.get(f"/v1/default/banks/{source}/stats").json()
    after = http.get(f"/v1/default/banks/{target}/stats").json()
    assert after["total_links"] == before["total_links"] > 0
    assert http.get(f"/v1/default/banks/{target}/memories/m2").json()["document_id"] == "chat-1"


def test_clone_sync_and_async(http: httpx.Client, client: Any) -> None:
    source = new_bank(http)
    assert client.clone_bank(source, f"{source}-c1")
    assert snapshot(http, f"{source}-c1") == snapshot(http, source)
    assert run(str(http.base_url), lambda c: c.aclone_bank(source, f"{source}-c2"))
    assert snapshot(http, f"{source}-c2") == snapshot(http, source)
    stats = [http.get(f"/v1/default/banks/{b}/stats").json()["total_links"] for b in (source, f"{source}-c2")]
    assert stats[0] == stats[1]
    # the clone is independent: deleting from it leaves the source alone
    assert http.delete(f"/v1/default/banks/{source}-c1/memories/m3").status_code == 200
    assert http.get(f"/v1/default/banks/{source}/memories/m3").status_code == 200


def test_clone_refuses_existing_or_missing(http: httpx.Client, client: Any) -> None:
    source, other = new_bank(http), new_bank(http)
    with pytest.raises(ApiException) as err:
        client.clone_bank(source, other)
    assert err.value.status == 400
    assert http.post(f"/v1/default/banks/{source}/clone", params={"target_bank_id": source}).status_code == 400
    assert http.post(f"/v1/default/banks/nope-{uuid.uuid4().hex}/clone",
                     params={"target_bank_id": "x"}).status_code == 404
    assert http.post(f"/v1/default/banks/{source}/clone").status_code == 422
    assert http.post(f"/v1/default/banks/{source}/clone", params={
        "target_bank_id": "y", "include_data": "false", "include_bank_config": "false"}).status_code == 400
    assert http.post(f"/v1/default/banks/{source}/clone", params={
        "target_bank_id": "y", "include_data": "maybe"}).status_code == 422


def test_restore_refuses_an_existing_bank_and_bad_archives(http: httpx.Client) -> None:
    source = new_bank(http)
    archive = export(http, source)
    url = f"/v1/default/banks/{source}/transfer/import"
    refused = http.post(url, files={"file": ("a.zip", archive)})  # target defaults to the source: it exists
    assert refused.status_code == 400 and "already exists" in refused.json()["message"]
    assert http.post(url, files={"file": ("a.zip", b"not a zip")}).status_code == 400
    assert http.post(url).status_code in (400, 422)
    assert http.post(url, params={"mode": "sideways"}, files={"file": ("a.zip", archive)}).status_code == 400

    def variant(**manifest: Any) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(archive)) as src, zipfile.ZipFile(buf, "w") as dst:
            for info in src.infolist():
                data = src.read(info.filename)
                if info.filename == "manifest.json":
                    data = json.dumps({**json.loads(data), **manifest}).encode()
                dst.writestr(info.filename, data)
        return buf.getvalue()

    wrong = http.post(url, params={"target_bank_id": f"{source}-v"},
                      files={"file": ("a.zip", variant(schema_version=2))})
    assert wrong.status_code == 400 and "schema version" in wrong.json()["message"]
    docs = http.post(url, params={"target_bank_id": f"{source}-d"},
                     files={"file": ("a.zip", variant(archive_type="documents"))})
    assert docs.status_code == 400
    assert http.get(f"/v1/default/banks/{source}-v/stats").status_code == 404
    # a fact that fails validation: the half-restored bank is removed again
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "documents/000001.json":
                doc = json.loads(data)
                doc["facts"][0]["fact_type"] = "rumour"
                data = json.dumps(doc).encode()
            dst.writestr(info.filename, data)
    bad = http.post(url, params={"target_bank_id": f"{source}-f"}, files={"file": ("a.zip", buf.getvalue())})
    assert bad.status_code == 400 and "rumour" in bad.json()["message"]
    assert http.get(f"/v1/default/banks/{source}-f/stats").status_code == 404


def test_a_body_over_the_limit_is_refused(http: httpx.Client) -> None:
    bank = new_bank(http)
    huge = http.post(f"/v1/default/banks/{bank}/document-transfer", files={"file": ("a.zip", b"0" * 2_100_000)})
    assert huge.status_code == 413


def test_merge_documents_with_each_conflict_mode(http: httpx.Client, client: Any) -> None:
    source = new_bank(http)
    op = operation(http, http.post(f"/v1/default/banks/{source}/document-transfer/export",
                                   params={"document_id": "chat-1"}))
    archive = http.get(f"/v1/default/files/download/transfers/{source}/{op}.zip").content
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        assert json.loads(zf.read("manifest.json"))["archive_type"] == "documents"
        assert sorted(n for n in zf.namelist() if n.startswith("documents/")) == ["documents/000000.json"]
    target = new_bank(http, [{"id": "x1", "text": "Carol likes tea.", "document_id": "chat-1"}])
    skipped = run(str(http.base_url), lambda c: c.document_transfer.import_documents(target, archive))
    assert skipped.operation_id
    assert set(snapshot(http, target)) == {"x1"}  # chat-1 exists: skipped
    http.post(f"/v1/default/banks/{target}/document-transfer", params={"on_conflict": "replace"},
              files={"file": ("a.zip", archive)}).raise_for_status()
    assert set(snapshot(http, target)) == {"m1", "m2"}
    http.post(f"/v1/default/banks/{target}/transfer/import", params={"mode": "merge", "document_conflict": "new-id"},
              files={"file": ("a.zip", archive)}).raise_for_status()
    docs = {m["document_id"] for m in snapshot(http, target).values()}
    assert len(docs) == 2 and "chat-1" in docs
    assert http.post(f"/v1/default/banks/{target}/document-transfer", params={"on_conflict": "merge"},
                     files={"file": ("a.zip", archive)}).status_code == 400
    assert http.post(f"/v1/default/banks/{target}/transfer/import", params={"mode": "merge", "include_data": "true"},
                     files={"file": ("a.zip", archive)}).status_code == 400


def test_upstream_archive_imports(http: httpx.Client) -> None:
    """An archive as upstream writes it: source ids, causal relations, observations by document/ordinal."""
    facts = [
        {"text": "Dana moved to Lisbon.", "source_id": "u-1", "fact_type": "world", "entities": ["Dana", "Lisbon"],
         "occurred_start": "2024-01-02T00:00:00Z", "tags": ["move"], "chunk_index": 0, "causal_relations": [],
         "metadata": {"k": "v"}, "mentioned_at": None, "event_date": "2024-01-02T00:00:00Z"},
        {"text": "Dana learned Portuguese.", "fact_type": "experience", "entities": ["Dana"],
         "occurred_start": "0001-01-01T00:00:00Z", "chunk_index": 0,
         "causal_relations": [{"relation_type": "caused_by", "target_fact_index": 0}]},
    ]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"schema_version": 1, "source_bank_id": "up", "archive_type": "bank"}))
        zf.writestr("documents/000000.json", json.dumps({
            "id": "doc-9", "original_text": "Dana moved.", "tags": [], "chunks": [
                {"chunk_index": 0, "chunk_text": "Dana moved to Lisbon and learned Portuguese."}], "facts": facts}))
        zf.writestr("observations.json", json.dumps([{"source_id": "obs-1", "text": "Dana adapts.", "proof_count": 2,
                                                      "sources": [{"document_id": "doc-9", "fact_index": 1}]}]))
        zf.writestr("banks.json", json.dumps([{"bank_id": "up", "name": "up", "mission": "Help Dana.",
                                               "disposition": json.dumps({"empathy": 5}), "config": {"llm": "x"}}]))
        zf.writestr("mental_models.json", "[]")
    host = new_bank(http)
    target = f"up-{uuid.uuid4().hex[:8]}"
    operation(http, http.post(f"/v1/default/banks/{host}/transfer/import", params={"target_bank_id": target},
                              files={"file": ("a.zip", buf.getvalue())}))
    got = snapshot(http, target)
    assert set(got) == {"u-1", "doc-9:1", "obs-1"}
    assert got["u-1"]["tags"] == ["move"] and got["u-1"]["metadata"] == {"k": "v"}
    assert got["doc-9:1"]["occurred_start"] is None  # year 1 is upstream's open bound
    assert got["obs-1"]["source_ids"] == ["doc-9:1"] and got["obs-1"]["proof_count"] == 2
    profile = http.get(f"/v1/default/banks/{target}/profile").json()
    assert profile["name"] == target and profile["mission"] == "Help Dana." and profile["disposition"]["empathy"] == 5
    assert ("u-1", "doc-9:1", "causes", 1.0) in {(a, b, c, d) for a, b, c, d in _links_http(http, target)}


def _links_http(http: httpx.Client, bank: str) -> set[tuple[str, str, str, float]]:
    op = operation(http, http.post(f"/v1/default/banks/{bank}/transfer/export"))
    with zipfile.ZipFile(io.BytesIO(http.get(f"/v1/default/files/download/transfers/{bank}/{op}.zip").content)) as zf:
        return {(x["from"], x["to"], x["type"], x["weight"])
                for x in map(json.loads, zf.read("hindsight-recall/links.jsonl").splitlines())}


def test_links_survive_exactly(http: httpx.Client) -> None:
    source = new_bank(http)
    copy = f"{source}-l"
    http.post(f"/v1/default/banks/{source}/clone", params={"target_bank_id": copy}).raise_for_status()
    assert _links_http(http, copy) == _links_http(http, source)


def test_export_errors(http: httpx.Client) -> None:
    missing = f"nope-{uuid.uuid4().hex}"
    assert http.post(f"/v1/default/banks/{missing}/transfer/export").status_code == 404
    bank = new_bank(http)
    url = f"/v1/default/banks/{bank}/transfer/export"
    assert http.post(url, params={"include_data": "false", "include_bank_config": "false"}).status_code == 400
    assert http.post(url, params={"include_history": "true"}).status_code == 400
    assert http.post(url, params={"document_id": "chat-1"}).status_code == 400  # bank config needs the whole bank
    removed = http.get(f"/v1/default/banks/{bank}/document-transfer")
    assert removed.status_code == 410 and "document-transfer/export" in removed.json()["detail"]
    assert http.post(f"/v1/default/banks/{bank}/document-transfer/export",
                     params={"include_knowledge_base": "true"}).status_code == 400


def test_download_is_per_bank(http: httpx.Client) -> None:
    a, b = new_bank(http), new_bank(http)
    op = operation(http, http.post(f"/v1/default/banks/{a}/transfer/export"))
    assert http.get(f"/v1/default/files/download/transfers/{a}/{op}.zip").status_code == 200
    assert http.get(f"/v1/default/files/download/transfers/{b}/{op}.zip").status_code == 404
    assert http.get(f"/v1/default/files/download/transfers/{a}/not-a-uuid.zip").status_code == 404
    assert http.get("/v1/default/files/download/elsewhere").status_code == 404
    http.delete(f"/v1/default/banks/{a}").raise_for_status()  # the archive goes with its bank
    assert http.get(f"/v1/default/files/download/transfers/{a}/{op}.zip").status_code == 404


def test_bank_template_round_trip(http: httpx.Client, client: Any) -> None:
    bank = new_bank(http)
    manifest = {"version": "1", "bank": {"reflect_mission": "Remember customers.", "disposition_empathy": 4,
                                         "enable_graph_retrieval": False, "retain_mission": "Keep plans.",
                                         "observations_mission": "LLM only"}}
    applied = http.post(f"/v1/default/banks/{bank}/import", json=manifest)
    assert applied.status_code == 200 and applied.json()["config_applied"] is True
    assert applied.headers["X-Hindsight-Ignored-Fields"] == "observations_mission"
    exported = run(str(http.base_url), lambda c: c.bank_templates.export_bank_template(bank)) \
        if hasattr(client, "bank_templates") else None
    got = http.get(f"/v1/default/banks/{bank}/export").json()
    assert got["version"] == "1" and got["bank"]["reflect_mission"] == "Remember customers."
    assert got["bank"]["disposition_empathy"] == 4 and got["bank"]["enable_graph_retrieval"] is False
    assert got["bank"]["retain_mission"] == "Keep plans."
    if exported is not None:
        assert exported.bank.reflect_mission == "Remember customers."
    other = new_bank(http)
    assert http.post(f"/v1/default/banks/{other}/import", json=got).status_code == 200
    assert http.get(f"/v1/default/banks/{other}/export").json()["bank"] == got["bank"]
    dry = http.post(f"/v1/default/banks/{other}/import", params={"dry_run": "true"},
                    json={"version": "1", "bank": {"reflect_mission": "changed"}})
    assert dry.json()["dry_run"] is True
    assert http.get(f"/v1/default/banks/{other}/export").json()["bank"]["reflect_mission"] == "Remember customers."
    assert http.post(f"/v1/default/banks/{other}/import", json={"version": "2"}).status_code == 400
    assert http.post(f"/v1/default/banks/{other}/import", json={"bank": {}}).status_code == 400
    assert http.post(f"/v1/default/banks/{other}/import", json={"version": "1", "x": 1}).status_code == 400
    assert http.post(f"/v1/default/banks/{other}/import", content=b"{").status_code == 400
    mm = http.post(f"/v1/default/banks/{other}/import", json={"version": "1", "mental_models": [
        {"id": "a", "name": "A", "source_query": "q"}]})
    assert mm.status_code == 501
    bad = http.post(f"/v1/default/banks/{other}/import", json={"version": "1", "bank": {"disposition_empathy": 9}})
    assert bad.status_code == 400
    assert http.get(f"/v1/default/banks/nope-{uuid.uuid4().hex}/export").status_code == 404


# --- aliases -------------------------------------------------------------------------------------


def test_aliases_route_every_request(http: httpx.Client, client: Any) -> None:
    bank = new_bank(http)
    alias = f"al-{uuid.uuid4().hex[:8]}"
    created = run(str(http.base_url), lambda c: c.banks.create_bank_alias(bank, CreateBankAliasRequest(alias=alias)))
    assert created.bank_id == bank and [a.alias for a in created.aliases] == [alias]
    # reads, writes and recall through the alias reach the bank
    assert http.get(f"/v1/default/banks/{alias}/memories/m1").json()["text"].startswith("Alice")
    http.post(f"/v1/default/banks/{alias}/memories",
              json={"items": [{"content": "Eve plays chess."}]}).raise_for_status()
    assert http.get(f"/v1/default/banks/{bank}/memories/list").json()["total"] == len(MEMORIES) + 1
    assert http.get(f"/v1/default/banks/{alias}/stats").json()["bank_id"] == bank
    recalled = client.recall(alias, "Who plays chess?")
    assert any("chess" in r.text for r in recalled.results)
    assert http.get("/v1/default/banks").json()["banks"] and alias not in {
        b["bank_id"] for b in http.get("/v1/default/banks", params={"limit": 1000}).json()["banks"]}
    # primary: at most one, display only
    second = f"{alias}-2"
    http.post(f"/v1/default/banks/{alias}/aliases", json={"alias": second, "primary": True}).raise_for_status()
    listed = http.get(f"/v1/default/banks/{bank}/aliases").json()
    assert listed["aliases"] == [{"alias": second, "primary": True}, {"alias": alias, "primary": False}]
    promoted = run(str(http.base_url),
                   lambda c: c.banks.set_bank_alias_primary(bank, alias, SetBankAliasPrimaryRequest(primary=True)))
    assert [(a.alias, a.primary) for a in promoted.aliases] == [(alias, True), (second, False)]
    assert http.patch(f"/v1/default/banks/{bank}/aliases/{alias}", json={"primary": False}).json()["aliases"] == [
        {"alias": alias, "primary": False}, {"alias": second, "primary": False}]
    assert http.patch(f"/v1/default/banks/{bank}/aliases/missing", json={"primary": True}).status_code == 404
    assert http.patch(f"/v1/default/banks/{bank}/aliases/{alias}", json={}).status_code == 422
    # deleting an alias: the name no longer reaches the bank
    remaining = run(str(http.base_url), lambda c: c.banks.delete_bank_alias(bank, second))
    assert [a.alias for a in remaining.aliases] == [alias]
    assert http.delete(f"/v1/default/banks/{bank}/aliases/{second}").status_code == 404
    assert http.get(f"/v1/default/banks/{second}/stats").status_code == 404


def test_alias_conflicts_and_bad_names(http: httpx.Client) -> None:
    a, b = new_bank(http), new_bank(http)
    alias = f"al-{uuid.uuid4().hex[:8]}"
    url = f"/v1/default/banks/{a}/aliases"
    assert http.post(url, json={"alias": alias}).status_code == 201
    assert http.post(url, json={"alias": alias}).status_code == 409  # a duplicate
    assert http.post(f"/v1/default/banks/{b}/aliases", json={"alias": alias}).status_code == 409  # another's
    assert http.post(url, json={"alias": b}).status_code == 409  # a bank's name
    assert http.post(url, json={"alias": a}).status_code == 400  # itself
    assert http.post(url, json={"alias": ""}).status_code in (400, 422)
    assert http.post(url, json={"alias": "x\u0000y"}).status_code in (400, 422)
    assert http.post(url, json={}).status_code == 422
    # no loops: an alias created through an alias names the bank, never the alias
    http.post(f"/v1/default/banks/{alias}/aliases", json={"alias": f"{alias}-b"}).raise_for_status()
    assert {x["alias"] for x in http.get(f"/v1/default/banks/{a}/aliases").json()["aliases"]} == {alias, f"{alias}-b"}
    assert http.get(f"/v1/default/banks/{alias}-b/stats").json()["bank_id"] == a
    # another bank cannot detach it
    assert http.delete(f"/v1/default/banks/{b}/aliases/{alias}").status_code == 404
    # a missing bank
    missing = f"nope-{uuid.uuid4().hex}"
    assert http.post(f"/v1/default/banks/{missing}/aliases", json={"alias": "zz"}).status_code == 404
    assert http.get(f"/v1/default/banks/{missing}/aliases").status_code == 404
    # deleting the bank removes its aliases: the name is free again
    http.delete(f"/v1/default/banks/{a}").raise_for_status()
    assert http.get(f"/v1/default/banks/{alias}/stats").status_code == 404
    assert http.post(f"/v1/default/banks/{b}/aliases", json={"alias": alias}).status_code == 201
    assert http.get(f"/v1/default/banks/{alias}/stats").json()["bank_id"] == b


def test_alias_changes_reach_other_processes(server: Any, http: httpx.Client) -> None:
    """A second server on the same database sees an alias made or removed through the first at once."""
    import time

    from hindsight_recall.settings import load_settings

    bank = new_bank(http)
    alias = f"al-{uuid.uuid4().hex[:8]}"
    with (ServerThread(load_settings(database_url=server.engine.db.url, reranker_provider="rrf")) as other,
          httpx.Client(headers=EXTRAS, base_url=other.url, timeout=60) as second):
        assert second.get(f"/v1/default/banks/{alias}/stats").status_code == 404  # starts its listener
        time.sleep(0.5)
        http.post(f"/v1/default/banks/{bank}/aliases", json={"alias": alias}).raise_for_status()
        deadline = time.monotonic() + 5
        while second.get(f"/v1/default/banks/{alias}/stats").status_code != 200:
            assert time.monotonic() < deadline, "the second server never saw the alias"
            time.sleep(0.05)
        http.delete(f"/v1/default/banks/{bank}/aliases/{alias}").raise_for_status()
        deadline = time.monotonic() + 5
        while second.get(f"/v1/default/banks/{alias}/stats").status_code != 404:
            assert time.monotonic() < deadline, "the second server kept a deleted alias"
            time.sleep(0.05)


def test_temporal_links_in_an_archive_are_not_stored(http: httpx.Client) -> None:
    """An archive written before neighbours in time were read from the dates holds temporal links:
    the import leaves them out (the temporal arm reads the dates), the rest arrive."""
    source = new_bank(http)
    op = operation(http, http.post(f"/v1/default/banks/{source}/transfer/export"))
    raw = http.get(f"/v1/default/files/download/transfers/{source}/{op}.zip").content
    links = [json.loads(x) for x in zipfile.ZipFile(io.BytesIO(raw)).read("hindsight-recall/links.jsonl").splitlines()]
    assert links
    old = {**links[0], "type": "temporal", "weight": 0.5}
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as zin, zipfile.ZipFile(buf, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "hindsight-recall/links.jsonl":
                data += (json.dumps(old) + "\n").encode()
            zout.writestr(item, data)
    target = f"{source}-t"
    operation(http, http.post(f"/v1/default/banks/{source}/transfer/import", params={"target_bank_id": target},
                              files={"file": ("a.zip", buf.getvalue())}))
    assert _links_http(http, target) == _links_http(http, source)
    assert not any(kind == "temporal" for _, _, kind, _ in _links_http(http, target))


def test_an_import_and_a_clone_are_read_under_their_target_bank_too(http: httpx.Client) -> None:
    source = new_bank(http)
    archive = export(http, source)
    imported = operation(http, http.post(f"/v1/default/banks/{source}/transfer/import",
                                         params={"target_bank_id": f"{source}-i"}, files={"file": ("a.zip", archive)}))
    cloned = operation(http, http.post(f"/v1/default/banks/{source}/clone", params={"target_bank_id": f"{source}-k"}))
    for op, kind, target in ((imported, "bank_import", f"{source}-i"), (cloned, "bank_clone", f"{source}-k")):
        for bank in (target, source):
            got = http.get(f"/v1/default/banks/{bank}/operations/{op}").json()
            assert got["status"] == "completed" and got["operation_type"] == kind, (bank, got)
            assert got["result_metadata"]["target_bank_id"] == target and got["result_metadata"]["facts"] == 3
        listed = http.get(f"/v1/default/banks/{target}/operations").json()["operations"]
        assert [(o["id"], o["operation_type"]) for o in listed] == [(op, kind)]


def test_transfer_operations_are_listed_and_read_as_upstreams_client_reads_them(http: httpx.Client,
                                                                               client: Any) -> None:
    source = new_bank(http)
    archive = client.export_bank(source, poll_interval=0.05)  # submit, poll the operation, download
    assert zipfile.ZipFile(io.BytesIO(archive)).testzip() is None
    ops_path = f"/v1/default/banks/{source}/operations"
    exported = operation(http, http.post(f"/v1/default/banks/{source}/transfer/export"))
    got = http.get(f"{ops_path}/{exported}").json()
    assert got["status"] == "completed" and got["operation_type"] == "bank_export"
    meta = got["result_metadata"]
    assert meta["download_url"] == f"/v1/default/files/download/transfers/{source}/{exported}.zip"
    assert meta["fact_count"] == 3 and meta["observation_count"] == 1 and meta["byte_size"] > 0
    imported = client.import_bank(source, archive, target_bank_id=f"{source}-i")
    cloned = client.clone_bank(source, f"{source}-k")
    for op, kind, target in ((imported, "bank_import", f"{source}-i"), (cloned, "bank_clone", f"{source}-k")):
        status = run(str(http.base_url), lambda c, op=op: c.operations.get_operation_status(source, op))
        assert status.status == "completed" and status.operation_type == kind
        assert status.result_metadata["target_bank_id"] == target and status.result_metadata["facts"] == 3
    listed = http.get(ops_path, params={"limit": 100}).json()
    assert {exported, imported, cloned} <= {o["id"] for o in listed["operations"]}
    assert http.get(ops_path, params={"type": "bank_clone"}).json()["total"] == 1
    assert http.delete(f"{ops_path}/{exported}").status_code == 409  # completed: not cancellable
    assert http.delete(f"{ops_path}/{exported}/delete").status_code == 200
    assert http.get(f"/v1/default/files/download/transfers/{source}/{exported}.zip").status_code == 404
    assert http.get(f"{ops_path}/{exported}").json()["status"] == "not_found"
