"""The MCP server, driven by the MCP SDK's own client: over stdio (``hindsight-recall mcp``) and streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from hindsight_recall import Engine
from hindsight_recall.service.mcp import McpHttpApp, mcp_app
from hindsight_recall.settings import Settings
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

COMMAND = str(Path(sys.executable).with_name("hindsight-recall"))
#: upstream's tools (reflect with the configured chat model), and ours (bank_stats)
TOOLS = {"reflect", "retain", "sync_retain", "recall", "list_banks", "create_bank", "get_bank", "update_bank",
         "delete_bank", "get_bank_stats", "list_memories", "get_memory", "update_memory", "invalidate_memory",
         "clear_memories", "list_documents", "get_document", "delete_document", "list_tags", "list_operations",
         "get_operation", "cancel_operation", "bank_stats"}
HARD = "&|!():*<>'\\"

PRIYA = [
    {"id": "job", "content": "Priya works as a structural engineer at Arup in Leeds.", "tags": ["work"],
     "entities": ["Priya", {"text": "Arup", "type": "organization"}], "timestamp": "2024-03-01T09:00:00Z",
     "context": "career chat", "document_id": "chat-1", "metadata": {"source": "chat"}},
    {"text": "Priya adopted a grey cat called Miso.", "tags": ["home"], "type": "experience"},
    {"id": "climb", "content": "Priya goes bouldering every Thursday evening.",
     "occurred_start": "2024-01-01T00:00:00Z", "occurred_end": "2024-06-30T00:00:00Z"},
]


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """What the server process gets: PATH and HOME from here, then the test's settings."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HINDSIGHT_API_RERANKER_PROVIDER="rrf",
               HINDSIGHT_API_EMBEDDED_DATA_DIR=str(data_dir))
    if os.environ.get("HINDSIGHT_TEST_DATABASE_URL"):
        env["HINDSIGHT_API_DATABASE_URL"] = os.environ["HINDSIGHT_TEST_DATABASE_URL"]
    return {**env, **extra}


def body(result: CallToolResult) -> dict[str, Any]:
    """A successful call's structured result, checked against the JSON text it carries too."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


def error(result: CallToolResult) -> str:
    """A failed call's message: a tool error, one short message, no traceback."""
    assert result.is_error, result.structured_content
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert "Traceback" not in text and 'File "' not in text, text
    return text


@asynccontextmanager
async def held(client: Client) -> AsyncIterator[Client]:
    """``async with client`` in a task of its own: anyio's scopes must close in the task that opened them,
    and pytest-asyncio sets a module fixture up and tears it down in different tasks."""
    ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def hold() -> None:
        async with client as entered:
            ready.set_result(entered)
            await stop.wait()

    task = asyncio.create_task(hold())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # the client failed to connect: raise why
    try:
        yield ready.result()
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


@pytest.fixture(scope="module")
async def stdio(data_dir: Path) -> AsyncIterator[Client]:
    """One ``hindsight-recall mcp`` process for the module, on the test run's embedded server."""
    params = StdioServerParameters(command=COMMAND, args=["mcp"], env=server_env(data_dir))
    async with held(Client(params, read_timeout_seconds=300)) as client:
        yield client


@pytest.fixture
def mcp_bank() -> str:
    return f"mcp-{uuid.uuid4().hex[:12]}"


async def test_lists_the_tools_with_their_schemas(stdio: Client) -> None:
    tools = {t.name: t for t in (await stdio.list_tools()).tools}
    assert set(tools) == TOOLS
    recall = tools["recall"].input_schema
    assert set(recall["required"]) == {"query"}
    assert {"budget", "max_tokens", "types", "tags", "tags_match", "query_timestamp", "limit", "include_entities",
            "include_chunks", "trace"} <= set(recall["properties"])
    assert tools["recall"].annotations is not None and tools["recall"].annotations.read_only_hint
    assert tools["retain"].annotations is not None and not tools["retain"].annotations.read_only_hint
    assert "required" not in tools["retain"].input_schema  # content (upstream's) or memories (ours)
    assert "low" in json.dumps(recall) and "any_strict" in json.dumps(recall)


async def test_retain_then_recall(stdio: Client, mcp_bank: str) -> None:
    stored = body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": PRIYA}))
    assert stored["memories"] == 3 and stored["bank_id"] == mcp_bank
    assert stored["ids"][0] == "job" and stored["ids"][2] == "climb" and uuid.UUID(stored["ids"][1])
    answer = body(await stdio.call_tool("recall", {"bank_id": mcp_bank, "query": "Where does Priya work?"}))
    top = answer["results"][0]
    assert top["id"] == "job" and top["text"] == PRIYA[0]["content"]
    assert top["context"] == "career chat" and top["document_id"] == "chat-1" and top["tags"] == ["work"]
    assert top["metadata"] == {"source": "chat"} and set(top["entities"]) == {"Priya", "Arup"}
    # the upstream item's timestamp dates the memory
    assert top["occurred_start"].startswith("2024-03-01T09:00") and top["mentioned_at"].startswith("2024-03-01")
    assert answer["results_truncated"] is False and "Priya" in answer["entities"]


async def test_recall_options_reach_the_engine(stdio: Client, mcp_bank: str) -> None:
    body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": PRIYA}))

    async def ids(**options: Any) -> list[str]:
        found = body(await stdio.call_tool("recall", {"bank_id": mcp_bank, "query": "Priya", **options}))
        return [r["id"] for r in found["results"]]

    assert len(await ids()) == 3
    assert await ids(tags=["work"], tags_match="all_strict") == ["job"]
    assert "climb" in await ids(tags=["work"], tags_match="any")  # untagged memories pass "any"
    assert len(await ids(types=["experience"])) == 1
    assert len(await ids(limit=1)) == 1
    assert len(await ids(max_tokens=1)) <= 1
    assert len(await ids(budget="low", query_timestamp="2024-07-01T00:00:00Z")) == 3
    traced = body(await stdio.call_tool("recall", {"bank_id": mcp_bank, "query": "cat", "trace": True,
                                                   "include_entities": None, "include_chunks": 100}))
    assert traced["trace"]["summary"]["phase_metrics"] and traced["entities"] is None
    assert traced["chunks"] is not None


async def test_resending_a_document_replaces_its_memories(stdio: Client, mcp_bank: str) -> None:
    item = {"content": "Priya's sister lives in Porto.", "timestamp": "2024-02-02", "document_id": "family"}
    first = body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": [item]}))
    again = body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": [item]}))
    assert first["ids"] == again["ids"]
    stats = body(await stdio.call_tool("bank_stats", {"bank_id": mcp_bank}))
    assert stats["memories"] == 1 and stats["bank_id"] == mcp_bank and stats["by_type"] == {"world": 1}
    # the id is the one HTTP's retain gives the first item of that document
    listed = body(await stdio.call_tool("list_memories", {"bank_id": mcp_bank}))
    assert [m["id"] for m in listed["items"]] == first["ids"]


async def test_lists_banks(stdio: Client, mcp_bank: str) -> None:
    body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": PRIYA[:2]}))
    banks = body(await stdio.call_tool("list_banks", {}))["banks"]
    mine = [b for b in banks if b["bank_id"] == mcp_bank]
    assert len(mine) == 1 and mine[0]["fact_count"] == 2 and mine[0]["created_at"]


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"query": ""}, "query: is empty"),
    ({"query": HARD}, "query: is empty"),
    ({"bank_id": "no-such-bank-" + uuid.uuid4().hex}, "does not exist"),
    ({"bank_id": ""}, "bank_id: must be a non-empty string"),
    ({"bank_id": "a\x00b"}, "NUL"),
    ({"bank_id": "x" * 300}, "bank_id"),
    ({"budget": "extreme"}, "budget"),
    ({"tags_match": "some"}, "tags_match"),
    ({"types": ["opinion", "rumour"]}, "types"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"limit": 0}, "limit"),
    ({"query_timestamp": "yesterday-ish"}, "query_timestamp"),
    ({"include_chunks": -1}, "include_chunks"),
    ({"surprise": 1}, "surprise"),
], ids=lambda v: json.dumps(v)[:40] if isinstance(v, dict) else None)
async def test_bad_recall_input_is_a_tool_error(stdio: Client, mcp_bank: str, arguments: dict[str, Any],
                                                expected: str) -> None:
    body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": PRIYA[:1]}))
    result = await stdio.call_tool("recall", {"bank_id": mcp_bank, "query": "Priya", **arguments})
    assert expected in error(result)


@pytest.mark.parametrize(("memories", "expected"), [
    ([], "memories"),
    ([{"content": "   "}], "memories[0].text: must not be empty"),
    ([{"content": "ok"}, {"content": "bad date", "timestamp": "last week"}], "memories[1].occurred_start"),
    ([{"content": "x", "colour": "red"}], "colour"),
    ([{"content": "x", "metadata": {"a": 1}}], "metadata"),
    ([{"content": "x", "tags": ["a\x00b"]}], "memories[0].tags[0]"),
    ([{"content": "x", "occurred_start": "2024-02-01", "occurred_end": "2024-01-01"}], "occurred_end"),
    ([{"content": "x", "type": "rumour"}], "type"),
    ([{"content": "x" * 1_000_001}], "memories[0].text"),
], ids=lambda v: json.dumps(v)[:40] if isinstance(v, list) else None)
async def test_bad_retain_input_is_a_tool_error_and_writes_nothing(stdio: Client, mcp_bank: str,
                                                                   memories: list[Any], expected: str) -> None:
    assert expected in error(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": memories}))
    assert "does not exist" in error(await stdio.call_tool("bank_stats", {"bank_id": mcp_bank}))


async def test_a_huge_query_is_refused_as_http_refuses_it(stdio: Client, mcp_bank: str) -> None:
    body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": PRIYA[:1]}))
    refused = error(await stdio.call_tool("recall", {"bank_id": mcp_bank, "query": "Priya Arup " + "x " * 100_000}))
    assert "HINDSIGHT_API_RECALL_MAX_QUERY_TOKENS" in refused


async def test_unknown_bank_stats_is_a_tool_error(stdio: Client) -> None:
    assert "bank 'nope-nope' does not exist" in error(await stdio.call_tool("bank_stats", {"bank_id": "nope-nope"}))


async def test_unknown_arguments_are_refused_by_every_tool(stdio: Client) -> None:
    assert "verbose: unknown argument of list_banks (known: limit, offset, query)" in error(
        await stdio.call_tool("list_banks", {"verbose": True}))
    assert "colour: unknown argument of bank_stats" in error(
        await stdio.call_tool("bank_stats", {"bank_id": "b", "colour": "red"}))


async def test_banks_do_not_leak_into_each_other(stdio: Client, mcp_bank: str) -> None:
    other = mcp_bank + "-other"
    body(await stdio.call_tool("retain", {"bank_id": mcp_bank, "memories": PRIYA[:1]}))
    body(await stdio.call_tool("retain", {"bank_id": other, "memories": [{"content": "Priya works at a bakery."}]}))
    found = body(await stdio.call_tool("recall", {"bank_id": other, "query": "Where does Priya work?"}))
    assert [r["text"] for r in found["results"]] == ["Priya works at a bakery."]


def test_stdout_carries_only_the_protocol(data_dir: Path) -> None:
    # A tool call opens the engine (model, embedded server) while the wire is live; every line out is JSON-RPC.
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_banks", "arguments": {}}},
    ]
    process = subprocess.Popen([COMMAND, "-v", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=server_env(data_dir),
                               text=True)
    assert process.stdin is not None and process.stdout is not None
    for message in messages:
        process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()
    lines = []
    try:
        while len(lines) < 2:  # the two answers, then stdin closes and the server exits
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else ""
            lines.append(json.loads(line))
        out, err = process.communicate(timeout=120)  # closes stdin: the server exits
    finally:
        process.kill() if process.poll() is None else None
    assert out.strip() == "" and process.returncode == 0, err
    assert [m["id"] for m in lines] == [1, 2] and all(m["jsonrpc"] == "2.0" for m in lines)
    assert lines[1]["result"]["isError"] is False


def test_invalid_settings_stop_the_server_before_it_serves(tmp_path: Path) -> None:
    env = server_env(tmp_path / "unused", HINDSIGHT_API_SEMANTIC_MIN_SIMILARITY="7")
    result = subprocess.run([COMMAND, "mcp"], input="", capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert "HINDSIGHT_API_SEMANTIC_MIN_SIMILARITY" in result.stderr and "Traceback" not in result.stderr


async def test_database_password_never_reaches_the_client(tmp_path: Path) -> None:
    url = "postgresql://hr:s3cret-pw@127.0.0.1:9/nothing?connect_timeout=2"
    env = server_env(tmp_path / "unused", HINDSIGHT_API_DATABASE_URL=url)
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        transport = stdio_client(StdioServerParameters(command=COMMAND, args=["mcp"], env=env), errlog=errlog)
        async with Client(transport, read_timeout_seconds=300) as client:
            # the handshake does not wait for the database
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            for _ in range(2):  # every call reports the failed open, not only the first
                message = error(await client.call_tool("list_banks", {}))
                assert "s3cret-pw" not in message and "database" in message.lower()
    logged = log.read_text()
    assert "the engine did not open" in logged and "s3cret-pw" not in logged and "Traceback" not in logged


# --- streamable HTTP ---------------------------------------------------------------------------------------------


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on a free 127.0.0.1 port; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


async def exercise(url: str, bank: str) -> None:
    """What both HTTP tests check: the tools, a retain, a recall and an error, over one client."""
    async with Client(url, read_timeout_seconds=120) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        body(await client.call_tool("retain", {"bank_id": bank, "memories": PRIYA}))
        found = body(await client.call_tool("recall", {"bank_id": bank, "query": "Where does Priya work?"}))
        assert found["results"][0]["id"] == "job"
        assert bank in [b["bank_id"] for b in body(await client.call_tool("list_banks", {}))["banks"]]
        assert "does not exist" in error(await client.call_tool("recall", {"bank_id": bank + "-x", "query": "a"}))


async def test_streamable_http_on_its_own(engine: Engine, mcp_bank: str) -> None:
    app = mcp_app(engine, max_request_bytes=64 * 1024)
    assert isinstance(app, McpHttpApp)
    async with served(app) as base:
        await exercise(base + "/mcp", mcp_bank)
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "retain", "arguments": {
            "bank_id": mcp_bank, "memories": [{"content": "x" * 100_000}]}}}
        async with httpx.AsyncClient() as http:
            refused = await http.post(base + "/mcp", json=big,
                                      headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == 413


async def test_streamable_http_mounted_in_a_host_app(make_settings: Callable[..., Settings], mcp_bank: str) -> None:
    # As docs/service.md shows it: the app is built over an engine the host's lifespan opens later.
    engine = Engine(make_settings())
    mcp = mcp_app(engine)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with engine, mcp.running():
            yield

    async def other(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("host")

    host = Starlette(routes=[Route("/mcp", mcp), Route("/other", other)], lifespan=lifespan)
    async with served(host) as base:
        await exercise(base + "/mcp", mcp_bank)
        async with httpx.AsyncClient() as http:
            assert (await http.get(base + "/other")).text == "host"
            assert (await http.get(base + "/mcp/extra")).status_code == 404  # the host keeps its other paths
            # DNS-rebinding protection on a loopback bind: a foreign Host header is refused
            rebound = await http.post(base + "/mcp", headers={"Host": "evil.example", "Accept": "application/json"},
                                      json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert rebound.status_code in (400, 403, 421)



async def test_serve_loads_the_date_finder_once_ready(make_settings: Callable[..., Settings],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The date finder's ~2 s of Python would compete with the start-up: it loads after readiness."""
    from hindsight_recall.recall import pipeline
    from hindsight_recall.service.app import create_app

    app = create_app(make_settings())
    seen: list[bool] = []
    monkeypatch.setattr(pipeline, "warm_date_parser", lambda: seen.append(app.app.state.service.ready))
    assert app.app.state.engine.warm_date_finder is False  # not at the engine's open
    async with served(app) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        while (await http.get("/health/ready")).status_code != 200:
            await asyncio.sleep(0.05)
        assert seen == [True]


async def test_upstream_tools_over_serve(make_settings: Callable[..., Settings], mcp_bank: str) -> None:
    """Upstream's bank and memory tools answer what the HTTP routes answer, with the same ids; the bank
    comes from the call, the URL or an X-Bank-Id header."""
    from hindsight_recall.service.app import create_app

    app = create_app(make_settings())
    async with served(app) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        while (await http.get("/health/ready")).status_code != 200:
            await asyncio.sleep(0.1)
        async with Client(base + "/mcp/", read_timeout_seconds=120) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            profile = body(await client.call_tool("create_bank", {"bank_id": mcp_bank, "name": "Priya's",
                                                                  "mission": "remember Priya"}))
            assert profile["name"] == "Priya's" and profile["mission"] == "remember Priya"
            assert body(await client.call_tool("get_bank", {"bank_id": mcp_bank})) == \
                (await http.get(f"/v1/default/banks/{mcp_bank}/profile")).json()
            stored = body(await client.call_tool("sync_retain", {
                "bank_id": mcp_bank, "content": "Priya works at Arup.", "tags": ["work"], "document_id": "d1"}))
            assert stored["status"] == "completed"
            listed = (await http.get(f"/v1/default/banks/{mcp_bank}/memories/list")).json()
            assert [m["id"] for m in listed["items"]] == stored["memory_ids"]
            memory = body(await client.call_tool("get_memory", {"bank_id": mcp_bank,
                                                                "memory_id": stored["memory_ids"][0]}))
            assert memory == (await http.get(f"/v1/default/banks/{mcp_bank}/memories/{stored['memory_ids'][0]}")).json()
            assert body(await client.call_tool("list_memories", {"bank_id": mcp_bank}))["total"] == 1
            stats = body(await client.call_tool("get_bank_stats", {"bank_id": mcp_bank}))
            assert stats["total_nodes"] == 1
            memory_id = stored["memory_ids"][0]
            edited = body(await client.call_tool("update_memory", {"bank_id": mcp_bank, "memory_id": memory_id,
                                                                   "text": "Priya works at Arup in Leeds."}))
            assert edited["text"] == "Priya works at Arup in Leeds."
            retired = body(await client.call_tool("invalidate_memory", {"bank_id": mcp_bank, "memory_id": memory_id,
                                                                        "reason": "moved on"}))
            assert retired["state"] == "invalidated" and retired["invalidation_reason"] == "moved on"
            assert body(await client.call_tool("list_memories", {"bank_id": mcp_bank}))["total"] == 0
            back = body(await client.call_tool("invalidate_memory", {"bank_id": mcp_bank, "memory_id": memory_id,
                                                                     "restore": True}))
            assert back["state"] == "valid"
            tags = body(await client.call_tool("list_tags", {"bank_id": mcp_bank}))
            assert tags == (await http.get(f"/v1/default/banks/{mcp_bank}/tags")).json()
            accepted = body(await client.call_tool("retain", {"bank_id": mcp_bank, "content": "Priya has a cat."}))
            assert accepted["status"] == "accepted"
            updated = body(await client.call_tool("update_bank", {"bank_id": mcp_bank, "name": "P",
                                                                  "config_updates": {"enable_reranking": False}}))
            assert updated["name"] == "P"
            config = (await http.get(f"/v1/default/banks/{mcp_bank}/config")).json()
            assert config["overrides"] == {"enable_reranking": False}
            assert "bank_id" in error(await client.call_tool("get_bank", {"bank_id": ""}))
            scratch = mcp_bank + "-scratch"
            body(await client.call_tool("sync_retain", {"bank_id": scratch, "content": "Temporary note."}))
            cleared = body(await client.call_tool("clear_memories", {"bank_id": scratch, "type": "world"}))
            assert cleared["deleted_count"] == 1
        # the session's bank: from the URL, then from a header
        async with Client(f"{base}/mcp/{mcp_bank}/", read_timeout_seconds=120) as client:
            found = body(await client.call_tool("recall", {"query": "Where does Priya work?"}))
            assert found["results"][0]["id"] == stored["memory_ids"][0]
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_bank", "arguments": {}}}
        answer = await http.post("/mcp", json=call, headers={"X-Bank-Id": mcp_bank,
                                                             "Accept": "application/json, text/event-stream"})
        assert answer.json()["result"]["structuredContent"]["name"] == "P"
        async with Client(f"{base}/mcp/{mcp_bank}/", read_timeout_seconds=120) as client:
            assert body(await client.call_tool("delete_bank", {}))["success"] is True
