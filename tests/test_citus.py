"""Citus: the engine on a coordinator and two workers.

- Every statement a single-bank call sends runs on one shard: each call's statements are recorded as
  the engine sends them and planned again with ``EXPLAIN`` and the same parameters; one that would run
  on more than one shard (``Task Count`` above 1) fails the test with its text and plan. The commands
  the coordinator passes on are read from its log: all to the worker holding the bank, and few.
- A recall reads the bank's shards on its worker (CITUS_DIRECT_READS), with the coordinator's answer;
  a worker out of reach or a moved shard falls back or is asked again.
- Keyword term selection reads the bank's own counts: the same on one node and on the cluster, and
  another bank's memories change nothing.
- The checks at start (the citus extension, the distributed tables) run once per process.
- A single-server store is distributed with its rows, and recalls as before.
- Backends: one not declared ``citus_compatible`` is refused at start; the compliance suite runs for
  every installed backend that declares it (and checks the declaration on the cluster).
- Growing the cluster: one more worker and a rebalance while four clients retain and recall; nothing is
  lost or doubled, and each bank's rows end on one worker.

Without a coordinator (``HINDSIGHT_TEST_DATABASE_URL`` pointing at one, as ``nox -s 'tests(citus)'`` sets
it) these tests skip; under ``tests(citus)`` (``HINDSIGHT_TEST_CITUS=1``) they fail instead.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from hindsight_recall import Engine
from hindsight_recall.errors import ConfigError
from hindsight_recall.plugins import get_plugin_manager
from hindsight_recall.retain import links
from hindsight_recall.settings import Settings
from hindsight_recall.store import banks, length_stats, schema, term_stats
from hindsight_recall.store.citus import DISTRIBUTED, REFERENCE, compatible_backends
from hindsight_recall.testing import TextSearchBackendSuite
from hindsight_recall.testing.citus import (
    RemoteCommand,
    Statements,
    check_one_worker,
    check_routed,
    driver_url,
    explain_all,
    first_word,
    recording,
)
from hindsight_recall.testing.suite import keyword_hits
from hindsight_recall_native import NativeBackend
from sqlalchemy import text

#: set by tests(citus): a missing cluster fails the run instead of skipping
REQUIRED_ENV = "HINDSIGHT_TEST_CITUS"


def require_citus(engine: Any) -> None:
    """Skip (or fail, under tests(citus)) unless the engine talks to a Citus coordinator."""
    if engine.db.citus:
        return
    reason = ("needs a Citus coordinator: run `nox -s 'tests(citus)'`, or point HINDSIGHT_TEST_DATABASE_URL "
              "at one")
    if os.environ.get(REQUIRED_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRED_ENV} is set)", pytrace=False)
    pytest.skip(reason)


#: a small bank: entities, tags, dates, a cause and an observation
ALICE = [
    {"id": "job", "text": "Alice works as a data engineer at Helios Robotics in Munich.",
     "entities": ["Alice", "Helios Robotics"], "tags": ["work"], "occurred_at": "2023-08-01T00:00:00Z"},
    {"id": "old-job", "text": "Alice used to be an analyst at Northwind Labs.",
     "entities": ["Alice", "Northwind Labs"], "tags": ["work"], "occurred_at": "2022-02-01T00:00:00Z"},
    {"id": "pasta", "text": "Bob cooked pasta carbonara for dinner.", "type": "experience",
     "entities": ["Bob"], "occurred_at": "2023-05-02T00:00:00Z"},
    {"id": "reorg", "text": "Northwind Labs reorganised Alice's team under a new manager.",
     "entities": ["Northwind Labs", "Alice"], "tags": ["work"], "occurred_at": "2023-05-15T00:00:00Z",
     "causes": ["left"]},
    {"id": "left", "text": "Alice left Northwind Labs in June.", "entities": ["Alice", "Northwind Labs"],
     "occurred_at": "2023-06-30T00:00:00Z"},
    {"id": "summary", "text": "Alice changed jobs in 2023, moving from Northwind Labs to Helios Robotics.",
     "type": "observation", "sources": ["job", "left"], "entities": ["Alice"]},
]

#: a second batch into the bank: updates, a new document chunk, causes and sources into earlier rows
MORE = [
    {"id": "job", "text": "Alice is now a staff data engineer at Helios Robotics.", "entities": ["Alice"],
     "occurred_at": "2024-01-10T00:00:00Z", "document_id": "diary", "chunk": "January: promotion."},
    {"id": "promo", "text": "Alice was promoted in January 2024.", "entities": ["Alice", "Helios Robotics"],
     "occurred_at": "2024-01-09T00:00:00Z", "causes": ["job"], "document_id": "diary",
     "chunk": "January: promotion.", "tags": ["work"]},
    {"id": "obs2", "text": "Alice's career keeps moving up.", "type": "observation", "sources": ["promo", "job"]},
]


@pytest.fixture(params=["exact", "indexed"])
async def citus_engine(
    request: pytest.FixtureRequest, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Engine]:
    """An engine on the cluster: small banks ranked exactly, or every bank in the shared HNSW indexes
    (and links of new rows found through them), so both kinds of statement are checked."""
    overrides: dict[str, Any] = {}
    if request.param == "indexed":
        overrides["vector_index_min_rows"] = 1
        monkeypatch.setattr(links, "INDEX_MIN_ROWS", 0)
        monkeypatch.setattr(links, "INDEX_RATIO", 0)
    async with Engine(make_settings(**overrides)) as engine:
        require_citus(engine)
        yield engine


async def test_retain_recall_and_bank_calls_each_run_on_one_shard(citus_engine: Engine) -> None:
    engine, bank = citus_engine, f"route-{uuid.uuid4().hex[:10]}"
    await check_routed(engine, bank, engine.retain(bank, ALICE), "retain into a new bank")
    _, verdict = await check_routed(engine, bank, engine.retain(bank, MORE), "retain into an existing bank")
    assert not verdict.copied and not verdict.pulled  # each would cost a command more and a two-phase commit
    _, verdict = await check_routed(engine, bank, engine.retain(bank, _synthetic(bank, 40)),
                                    "retain of 40 memories into an existing bank")
    assert verdict.copied and verdict.pulled  # past ARRAY_MAX_ROWS memories, COPY is faster
    body, _ = await check_routed(engine, bank, engine.recall(
        bank, "What happened with Alice's job in January 2024?", include_entities=500, include_chunks=500,
        include_source_facts=500, tags=["work"], tags_match="any", trace=True), "recall")
    assert body["results"], "the recall found nothing"
    await check_routed(engine, bank, engine.recall(
        bank, "How is Alice's career going?", types=["observation"], include_source_facts=500),
        "recall of observations")
    stats, _ = await check_routed(engine, bank, engine.bank_stats(bank), "bank stats")
    assert stats is not None and stats["memories"] == len({m["id"] for m in [*ALICE, *MORE]}) + 40

    async def configure() -> dict[str, Any]:
        async with engine.db.connect() as conn:
            return await banks.set_bank_config(conn, bank, {"recall_budget_fixed_low": 50})

    await check_routed(engine, bank, configure(), "bank config")
    removed, _ = await check_routed(engine, bank, engine.forget(bank, ["promo", "pasta"]), "forget")
    assert removed == 2
    async with engine.db.connect() as conn:  # the term and length statistics followed every write, on the shard
        assert await term_stats.drift(conn, bank) == []
        assert await conn.scalar(text("SELECT count(*) FROM term_stats WHERE bank_id = :b"), {"b": bank})
        assert await length_stats.drift(conn, bank) == []
        assert await conn.scalar(text("SELECT count(*) FROM length_stats WHERE bank_id = :b"), {"b": bank})
    deleted, _ = await check_routed(engine, bank, engine.delete_bank(bank), "delete_bank")
    assert deleted
    async with engine.db.connect() as conn:
        assert not await conn.scalar(text("SELECT count(*) FROM term_stats WHERE bank_id = :b"), {"b": bank})
        assert not await conn.scalar(text("SELECT count(*) FROM length_stats WHERE bank_id = :b"), {"b": bank})


async def test_a_banks_documents_are_read_on_its_shard(citus_engine: Engine) -> None:
    """A document's details (its text from its chunks or memories, tags, counts, first memory) and the
    list of documents: each read runs on the bank's shard, with the answer a single server gives."""
    engine, bank = citus_engine, f"docs-{uuid.uuid4().hex[:10]}"
    await engine.retain(bank, ALICE)
    await engine.retain(bank, [*MORE, {"id": "note", "text": "Bob keeps a garden.", "document_id": "notes",
                                       "tags": ["home"], "context": "a note", "metadata": {"src": "app"}}])
    diary, _ = await check_routed(engine, bank, engine.documents.get(bank, "diary"), "a document with chunks")
    assert diary is not None and diary["original_text"] == "January: promotion."
    assert diary["memory_unit_count"] == 2 and diary["tags"] == ["work"]
    assert diary["nodes_by_fact_type"] == {"world": 2, "experience": 0, "observation": 2}
    notes, _ = await check_routed(engine, bank, engine.documents.get(bank, "notes"), "a document without chunks")
    assert notes is not None and notes["original_text"] == "Bob keeps a garden." and notes["tags"] == ["home"]
    assert notes["retain_params"]["context"] == "a note" and notes["document_metadata"] == {"src": "app"}
    page, _ = await check_routed(engine, bank, engine.documents.page(
        bank, search="garden", tags=None, tags_match="any", time_field="created_at", start=None, end=None,
        limit=10, offset=0), "the list of documents")
    assert [d["id"] for d in page["items"]] == ["notes"] and page["items"][0]["matched_fields"] == ["original_text"]
    tagged, _ = await check_routed(engine, bank, engine.documents.page(
        bank, search=None, tags=["work"], tags_match="all", time_field="created_at", start=None, end=None,
        limit=10, offset=0), "the list of documents by tag")
    assert [d["id"] for d in tagged["items"]] == ["diary"]
    changed, _ = await check_routed(engine, bank, engine.documents.set_tags(bank, "notes", ["garden"]),
                                    "a document's tags")
    assert changed and (await engine.documents.get(bank, "notes") or {})["tags"] == ["garden"]


#: the most commands a retain of one memory into an existing bank may send to the workers (BEGIN and the
#: commit included); it sends 9: the bank's row, the memory, its term counts, entities, entity pairs,
#: the read its links need, the links
RETAIN_COMMANDS = 10
ONE = {"id": "sail", "text": "Carol sails with Alice on Sundays.", "entities": ["Carol", "Alice"],
       "tags": ["hobby"], "occurred_at": "2023-09-03T00:00:00Z"}


async def _holder(engine: Engine, bank: str) -> str:
    """The worker (host:port) holding the bank's memories."""
    async with engine.db.connect() as conn:
        row = (await conn.execute(text(
            "SELECT nodename, nodeport FROM citus_shards WHERE shardid = "
            "get_shard_id_for_distribution_column('memory_units', CAST(:bank AS text))"), {"bank": bank})).one()
    return f"{row.nodename}:{row.nodeport}"


async def test_a_recall_and_a_one_memory_retain_send_few_commands_all_to_the_banks_worker(
    citus_engine: Engine,
) -> None:
    """Read from the coordinator's log of what it sends on: a one-memory retain into an existing bank and
    a recall send every command to the worker holding the bank (none to the other, none to every
    shard), and the retain at most RETAIN_COMMANDS."""
    engine, bank = citus_engine, f"route-{uuid.uuid4().hex[:10]}"
    await engine.retain(bank, ALICE)
    retained, again, recalled = Statements(), Statements(), Statements()
    await check_routed(engine, bank, engine.retain(bank, [ONE]), "retain of one memory into an existing bank",
                       max_commands=RETAIN_COMMANDS, record=retained)
    await check_routed(engine, bank, engine.retain(bank, [ONE]), "the same memory retained again", record=again)
    body, _ = await check_routed(engine, bank, engine.recall(bank, "Who sails on Sundays?"), "recall",
                                 record=recalled)
    assert "sail" in [r["id"] for r in body["results"]]
    holder = await _holder(engine, bank)
    for record in (retained, again, recalled):
        assert {c.node for c in record.commands} == {holder}, record.listing()
    # a rewrite adds what it clears first (entity pairs, sources, links) and its old term counts
    assert len(again.commands) <= RETAIN_COMMANDS + 2, again.listing()
    await engine.delete_bank(bank)


async def test_a_recall_reads_the_banks_shards_on_its_worker_and_answers_as_the_coordinator(
    make_settings: Callable[..., Settings],
) -> None:
    """CITUS_DIRECT_READS (on by default): every statement of a recall goes straight to the worker holding
    the bank and names only its shards, and the answer is the one the coordinator gives; turned off, the
    recall goes through the coordinator."""
    bank = f"direct-{uuid.uuid4().hex[:10]}"
    question = {"query": "What happened with Alice's job in January 2024?", "include_entities": 500,
                "include_chunks": 500, "include_source_facts": 500, "tags": ["work"], "tags_match": "any"}
    async with Engine(make_settings()) as direct, Engine(make_settings(citus_direct_reads=False)) as through:
        require_citus(direct)
        await direct.retain(bank, ALICE)
        await direct.retain(bank, MORE)
        holder = await _holder(direct, bank)
        await direct.recall(bank, **question)  # the placement is asked once, then kept
        with recording() as record:
            answer = await direct.recall(bank, **question)
        assert record.sent and set(record.servers) == {holder}, record.servers
        named = {int(n) for statement, _ in record.sent for n in _SHARD_ID.findall(statement)}
        async with direct.db.connect() as conn:
            mine = {r[0] for r in await conn.execute(text(
                "SELECT get_shard_id_for_distribution_column(logicalrelid, CAST(:bank AS text)) "
                "FROM pg_dist_partition WHERE partmethod = 'h'"), {"bank": bank})}
        assert named and named <= mine
        assert through.db.shards is None
        with recording() as record:
            expected = await through.recall(bank, **question)
        assert holder not in record.servers
        assert answer["results"] == expected["results"] and answer["results"]
        assert answer.get("entities") == expected.get("entities")
        await direct.delete_bank(bank)


async def test_a_worker_out_of_reach_or_a_moved_shard_is_read_through_the_coordinator_or_asked_again(
    citus_engine: Engine,
) -> None:
    """A worker this process cannot connect to is left alone and its banks are read through the
    coordinator; a kept placement whose shard is gone (the rebalancer moved it) is asked again, and the
    recall is tried again: both answer as before."""
    engine, bank = citus_engine, f"direct-{uuid.uuid4().hex[:10]}"
    await engine.retain(bank, ALICE)
    expected = await engine.recall(bank, "Where does Alice work?")
    assert engine.db.shards is not None
    placement = await engine.db.shards.placement(bank, _never)
    assert placement is not None
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    engine.db.shards._placements[bank] = (time.monotonic(), replace(placement, port=closed))
    assert (await engine.recall(bank, "Where does Alice work?"))["results"] == expected["results"]
    assert await engine.db.shards.placement(bank, _never) is None  # the worker is left alone
    gone = tuple((table, f"{table}_999999") for table, _ in placement.shards)
    engine.db.shards._placements[bank] = (time.monotonic(), replace(placement, shards=gone))
    assert (await engine.recall(bank, "Where does Alice work?"))["results"] == expected["results"]
    assert await engine.db.shards.placement(bank, _never) == placement
    await engine.delete_bank(bank)


async def _never() -> Any:
    raise AssertionError("the placement should have been kept")


#: a shard id in a statement's text
_SHARD_ID = re.compile(r"\b[a-z_]+_(\d{6,})\b")


def test_the_command_count_fails_a_call_past_its_limit_or_on_a_second_worker() -> None:
    """The check itself, on recorded commands: past the limit, or on two workers, it fails listing them."""
    record = Statements()
    assert "more than" not in record.listing()
    record.commands.extend(RemoteCommand("10.0.0.1:5432", f"SELECT {i}") for i in range(3))
    check_one_worker(record, "three", 3)
    with pytest.raises(AssertionError, match=r"three: 3 remote commands, more than 2:\n  1\. 10\.0\.0\.1:5432: "):
        check_one_worker(record, "three", 2)
    record.commands.append(RemoteCommand("10.0.0.2:5432", "SELECT 1"))
    with pytest.raises(AssertionError, match="went to 2 workers"):
        check_one_worker(record, "spread")


async def test_listing_banks_is_the_statement_that_fans_out(citus_engine: Engine) -> None:
    """Listing every bank reads every shard, by design: the one call not routed to one shard."""
    bank = f"route-{uuid.uuid4().hex[:10]}"
    await citus_engine.retain(bank, ALICE[:2])
    with recording() as record:
        listed = await citus_engine.list_banks()
    assert bank in [b["bank_id"] for b in listed]
    verdict = await explain_all(driver_url(citus_engine), citus_engine.settings.database_schema, record.sent)
    assert [first_word(s) for s, _ in verdict.fan_out] == ["SELECT"]
    await citus_engine.delete_bank(bank)


async def test_a_statement_without_its_bank_is_caught(citus_engine: Engine) -> None:
    """The check itself: the same lookups without a bank_id filter plan on every shard and are reported."""
    ids = [uuid.uuid4()]
    unfiltered = [
        ("SELECT count(*) FROM memory_links WHERE from_unit_id = ANY(%(ids)s)", {"ids": ids}),
        ("DELETE FROM unit_entities WHERE unit_id = ANY(%(ids)s)", {"ids": ids}),
    ]
    filtered = [(s.replace("WHERE ", "WHERE bank_id = %(bank)s AND "), {**p, "bank": "b"}) for s, p in unfiltered]
    url, schema_name = driver_url(citus_engine), citus_engine.settings.database_schema
    assert len((await explain_all(url, schema_name, unfiltered)).fan_out) == 2
    verdict = await explain_all(url, schema_name, filtered)
    assert not verdict.fan_out and len(verdict.routed) == 2


#: "alice" is in every memory and "walk" in all but one: both too common (BM25_MAX_TERM_FREQUENCY 0.5)
WALKS = [*({"id": f"walk-{i}", "text": f"Alice walked to the harbour, step {i}."} for i in range(30)),
         {"id": "pottery", "text": "Alice took a pottery class near the harbour."},
         {"id": "kiln", "text": "The kiln cracked two bowls."}]
#: another bank where the first bank's rare words are everywhere and its common ones nowhere
NOISY = [{"id": f"noise-{i}", "text": f"Pottery kiln bowls glaze harbour lesson {i}."} for i in range(60)]
#: more terms than BM25_MAX_QUERY_TERMS keeps: the rarest are chosen
LONG_QUERY = "alice walked harbour step pottery class kiln bowls glaze lesson near cracked took"


async def test_term_selection_reads_the_banks_own_counts_the_same_on_one_node_and_on_citus(
    make_settings: Callable[..., Settings],
) -> None:
    """The keyword arm chooses and weighs a long query's terms by the bank's own counts (term_stats):
    the same hits and scores on the embedded single server and on the cluster, unchanged by another bank
    full of those terms, and no statement of the recall reads the planner's table-wide statistics."""
    options = {"bm25_max_term_frequency": 0.5, "bm25_max_query_terms": 3, "text_search_extension": "native"}
    bank = f"terms-{uuid.uuid4().hex[:8]}"
    async with Engine(make_settings(database_url=None, **options)) as single:
        await single.retain(bank, WALKS)
        alone = await keyword_hits(single, bank, LONG_QUERY)
        async with single.db.connect() as conn:
            counts = sorted(map(tuple, await conn.execute(
                text("SELECT fact_type, lexeme, df FROM term_stats WHERE bank_id = :b"), {"b": bank})))
        await single.delete_bank(bank)
    async with Engine(make_settings(**options)) as cluster:
        require_citus(cluster)
        await cluster.retain(bank, WALKS)
        with recording() as record:
            clustered = await keyword_hits(cluster, bank, LONG_QUERY)
        await cluster.retain(f"{bank}-noisy", NOISY)
        beside_noise = await keyword_hits(cluster, bank, LONG_QUERY)
        async with cluster.db.connect() as conn:
            assert sorted(map(tuple, await conn.execute(
                text("SELECT fact_type, lexeme, df FROM term_stats WHERE bank_id = :b"), {"b": bank}))) == counts
        for name in (bank, f"{bank}-noisy"):
            await cluster.delete_bank(name)
    assert alone and alone[0].id in ("kiln", "pottery"), alone
    assert [(h.id, round(h.score, 9)) for h in clustered] == [(h.id, round(h.score, 9)) for h in alone]
    assert [(h.id, round(h.score, 9)) for h in beside_noise] == [(h.id, round(h.score, 9)) for h in alone]
    read = " ".join(statement for statement, _ in record.sent)
    assert "term_stats" in read
    assert not any(word in read for word in ("pg_stats", "pg_statistic", "pg_class", "most_common"))


async def test_the_citus_checks_run_once_per_process(make_settings: Callable[..., Settings]) -> None:
    """Whether the database has Citus and whether every table is distributed are asked until a start
    finds the store distributed; later engines of the process (one per blocking call) ask neither."""
    settings = make_settings(database_schema=f"once_{uuid.uuid4().hex[:8]}")

    def checks(record: Statements) -> list[str]:
        return [s for s, _ in record.sent if "extname = 'citus'" in s or "pg_dist_partition" in s]

    with recording() as first:
        for _ in range(2):  # the first start distributes the new store, the second finds it so
            async with Engine(settings) as engine:
                require_citus(engine)
    with recording() as later:
        for _ in range(2):
            async with Engine(settings) as engine:
                assert engine.db.citus
                await engine.retain("once", ALICE[:1])
    assert checks(first) and not checks(later)
    async with Engine(settings) as engine:
        assert await _distributed(engine) == {**dict.fromkeys(DISTRIBUTED, "h"), **dict.fromkeys(REFERENCE, "n")}


async def _distributed(engine: Engine) -> dict[str, str]:
    async with engine.db.connect() as conn:
        rows = await conn.exec_driver_sql(
            "SELECT c.relname, p.partmethod FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace")
        return {r[0]: r[1] for r in rows}


async def _ranked(engine: Engine, bank: str, query: str) -> list[str]:
    return [r["id"] for r in (await engine.recall(bank, query))["results"]]


async def test_a_single_server_store_is_distributed_with_its_rows(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store built as on one server (tables local to the coordinator) is distributed at the next start,
    rows and all; every bank then recalls what it recalled before, from its own shard."""
    settings = make_settings(database_schema=f"upgrade_{uuid.uuid4().hex[:8]}")
    stores = {"alice": [ALICE], "alice-more": [ALICE, MORE]}  # batches in order
    queries = ("Where does Alice work?", "What happened in January 2024?", "Who cooked dinner?")

    async def no_citus(conn: Any) -> bool:
        return False

    with monkeypatch.context() as patch:
        patch.setattr(schema, "has_citus", no_citus)  # the schema as one server built it
        async with Engine(settings) as single:
            require_citus(single)
            for bank, batches in stores.items():
                for batch in batches:
                    await single.retain(bank, batch)
            assert await _distributed(single) == {}
            before = {(b, q): await _ranked(single, b, q) for b in stores for q in queries}
            stats = {b: await single.bank_stats(b) for b in stores}
    async with Engine(settings) as cluster:
        tables = await _distributed(cluster)
        assert tables == {**dict.fromkeys(DISTRIBUTED, "h"), **dict.fromkeys(REFERENCE, "n")}
        for bank in stores:
            assert await cluster.bank_stats(bank) == stats[bank]
            async with cluster.db.connect() as conn:  # the term and length statistics moved with their bank
                assert await term_stats.drift(conn, bank) == []
                assert await length_stats.drift(conn, bank) == []
            for query in queries:
                ranked, _ = await check_routed(cluster, bank, _ranked(cluster, bank, query), f"recall {query!r}")
                assert ranked == before[(bank, query)]
        async with Engine(settings) as again:  # a third start finds everything distributed: no change
            assert await _distributed(again) == tables


class Incompatible(NativeBackend):
    """The native backend, declared not Citus-compatible."""

    name = "incompatible"
    citus_compatible = False


async def test_a_backend_not_citus_compatible_is_refused_naming_the_compatible_ones(
    engine: Engine, make_settings: Callable[..., Settings]
) -> None:
    require_citus(engine)
    with pytest.raises(ConfigError) as refused:
        async with Engine(make_settings(database_schema=f"refused_{uuid.uuid4().hex[:8]}"),
                          text_search=Incompatible()):
            pass
    message = str(refused.value)
    assert "\n" not in message and "'incompatible' cannot run on Citus" in message
    assert "native" in message.split("choose a Citus-compatible backend:")[1]


class _OnTheCluster:
    """The compliance suite on the coordinator named by HINDSIGHT_TEST_DATABASE_URL, in a schema of its own."""

    database_url_env = "HINDSIGHT_TEST_DATABASE_URL"

    @pytest.fixture(autouse=True, scope="class")
    def _server_has_the_extensions(self, hr_backend_name: str, hr_database_url: str | None,
                                   hr_plugin_manager: Any) -> None:
        wanted = tuple(hr_plugin_manager.get("text_search", hr_backend_name).extensions)
        if not wanted or hr_database_url is None:
            return
        with psycopg.connect(hr_database_url) as conn:
            present = {r[0] for r in conn.execute(
                "SELECT name FROM pg_available_extensions WHERE name = ANY(%s)", (list(wanted),))}
        missing = sorted(set(wanted) - present)
        if missing:
            pytest.skip(f"the cluster has no {', '.join(missing)} extension, which {hr_backend_name!r} needs "
                        f"(nox -s 'tests({hr_backend_name})' starts a cluster with it)")


if os.environ.get("HINDSIGHT_TEST_DATABASE_URL"):  # tests(all) runs the suites on the embedded server
    for _name in compatible_backends(get_plugin_manager()):
        _bases = (_OnTheCluster, TextSearchBackendSuite)
        globals()[f"TestCompliance_{_name}"] = type(f"TestCompliance_{_name}", _bases, {
            "backend_name": _name, "settings_overrides": {"database_schema": f"suite_{_name}"},
            "__doc__": f"The compliance suite for {_name!r} on the Citus cluster.",
        })


# ------------------------------------------------------------------------------------------ growth


def _synthetic(bank: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    topics = ("gardening", "chess", "sailing", "baking", "astronomy", "cycling")
    return [{"id": f"{bank}-{i}", "text": f"Note {i} of {bank}: {topics[i % len(topics)]} on day {i}.",
             "entities": [topics[i % len(topics)].title()], "occurred_at": f"2024-02-{1 + i % 28:02d}T10:00:00Z"}
            for i in range(start, start + n)]


#: clients retaining and recalling while the cluster grows
CLIENTS = 4


async def _held(engine: Engine, bank: str) -> tuple[int, set[str], int]:
    """The bank's memories: how many rows, their distinct caller ids, their distinct texts."""
    async with engine.db.connect() as conn:
        row = (await conn.execute(text(
            "SELECT count(*) AS n, array_agg(external_id) AS ids, count(DISTINCT text) AS texts "
            "FROM memory_units WHERE bank_id = :b"), {"b": bank})).one()
    return int(row.n), set(row.ids or ()), int(row.texts)


async def _workers_of(engine: Engine, bank: str) -> dict[str, str]:
    """Each bank-keyed distributed table -> the worker holding the bank's shard of it."""
    async with engine.db.connect() as conn:
        rows = await conn.execute(text(
            "SELECT t.name, s.nodename || ':' || s.nodeport AS node FROM unnest(CAST(:tables AS text[])) AS t(name) "
            "JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column(CAST(t.name AS regclass), "
            "CAST(:bank AS text))"), {"tables": list(DISTRIBUTED), "bank": bank})
        return {r.name: r.node for r in rows}


async def test_adding_a_worker_and_rebalancing_loses_nothing_while_banks_are_in_use(
    engine: Engine, citus_grow: Callable[[], Any]
) -> None:
    """``citus_add_node`` and ``citus_rebalance_start`` (blocking writes only to the shards it moves) while
    four clients retain (new banks, and a bank each keeps adding to) and recall (earlier banks, and their
    own): no request fails; every bank holds exactly the memories acknowledged to it, none lost and
    none twice; earlier banks recall what they recalled before; and afterwards each bank's rows, in
    every bank-keyed table, are on one worker."""
    require_citus(engine)
    run = uuid.uuid4().hex[:6]
    settled = [f"grow-{run}-{i}" for i in range(12)]
    acknowledged: dict[str, set[str]] = {}
    for bank in settled:
        await engine.retain(bank, _synthetic(bank, 8))
        acknowledged[bank] = {m["id"] for m in _synthetic(bank, 8)}
    queries = ("chess on day 3", "Which notes are about sailing?")
    before = {(b, q): await _ranked(engine, b, q) for b in settled for q in queries}
    failures: list[BaseException] = []
    requests = [0] * CLIENTS
    #: requests completed while the shards were moving
    while_moving = [0]
    done, moving = asyncio.Event(), asyncio.Event()

    async def client(worker: int) -> None:
        own = f"grow-{run}-live-{worker}"
        acknowledged[own] = set()
        i = 0
        while not done.is_set():
            fresh, added = f"grow-{run}-new-{worker}-{i}", _synthetic(own, 3, start=3 * i)
            try:
                await engine.retain(fresh, _synthetic(fresh, 6))
                acknowledged[fresh] = {m["id"] for m in _synthetic(fresh, 6)}
                await engine.retain(own, added)
                acknowledged[own] |= {m["id"] for m in added}
                for b in settled[worker::CLIENTS]:
                    for q in queries:
                        assert await _ranked(engine, b, q) == before[(b, q)], (b, q)
                assert await _ranked(engine, own, "Which notes are about sailing?")
            except BaseException as exc:  # every failure counts
                failures.append(exc)
                return
            requests[worker] += 3 + 2 * len(settled[worker::CLIENTS])
            while_moving[0] += moving.is_set()
            i += 1

    busy = [asyncio.ensure_future(client(w)) for w in range(CLIENTS)]
    try:
        node = await asyncio.to_thread(citus_grow)  # citus_add_node, with the clients at work
        async with await psycopg.AsyncConnection.connect(driver_url(engine), autocommit=True) as conn:
            await conn.execute("SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')")
            moving.set()
            await conn.execute("SELECT citus_rebalance_wait()")
            moving.clear()
            state = (await (await conn.execute(
                "SELECT state FROM citus_rebalance_status() ORDER BY job_id DESC LIMIT 1")).fetchone() or ("?",))[0]
            moved = (await (await conn.execute(
                "SELECT count(*) FROM citus_shards WHERE nodename = %s AND nodeport = %s", node)).fetchone()
                or (0,))[0]
    finally:
        done.set()
        await asyncio.gather(*busy)
    assert not failures, f"{len(failures)} request(s) failed during the growth; the first: {failures[0]!r}"
    assert state == "finished" and moved > 0, (state, moved)
    assert all(requests) and while_moving[0], f"requests per client: {requests}, while moving: {while_moving[0]}"
    for bank, ids in acknowledged.items():
        count, held, texts = await _held(engine, bank)
        assert (count, held, texts) == (len(ids), ids, len(ids)), f"{bank}: lost, doubled or foreign memories"
    for (bank, query), ranked in before.items():
        assert await _ranked(engine, bank, query) == ranked, (bank, query)
    placed = {bank: await _workers_of(engine, bank) for bank in acknowledged}
    spread = {bank: nodes for bank, nodes in placed.items()
              if len(set(nodes.values())) != 1 or len(nodes) != len(DISTRIBUTED)}
    assert not spread, f"banks whose rows are not all on one worker: {spread}"
    # a third of the shards moved: with 20 banks or more, some of them moved (all but surely)
    assert f"{node[0]}:{node[1]}" in {n for nodes in placed.values() for n in nodes.values()}
    for bank in acknowledged:
        await engine.delete_bank(bank)


async def test_a_bulk_load_vacuums_and_analyzes_the_shards_holding_its_bank(engine: Engine) -> None:
    """As the single node vacuums its tables after a bulk load, so that the first recall has statistics
    and visibility maps: on Citus only the loaded bank's shards, on their workers."""
    require_citus(engine)
    bank = f"vacuum-{uuid.uuid4().hex[:8]}"
    await engine.retain(bank, _synthetic(bank, 60))
    check = ("$$SELECT coalesce(last_vacuum IS NOT NULL AND last_analyze IS NOT NULL, false) "
             "FROM pg_stat_user_tables WHERE relid = '%s'::regclass$$")
    async with engine.db.connect() as conn:
        for table in ("memory_units", "unit_entities"):
            shard = await conn.scalar(text(f"SELECT get_shard_id_for_distribution_column('{table}', CAST(:b AS text))"),
                                        {"b": bank})
            done = dict((await conn.execute(text(
                f"SELECT shardid, result FROM run_command_on_placements('{table}', {check})"))).all())
            assert done[shard] == "t", (table, shard, done[shard])
    await engine.delete_bank(bank)
