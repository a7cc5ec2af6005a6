"""Banks: ids that never collide across banks, DATABASE_SCHEMA, and listing, stats, deleting and forgetting."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hindsight_recall import Engine, cli, cli_banks, cli_engine
from hindsight_recall.errors import BankNotFound, DatabaseError, InvalidRequest
from hindsight_recall.retain import _rows, _transaction
from hindsight_recall.retain._rows import entity_id, unit_id
from hindsight_recall.settings import Settings
from hindsight_recall.store import banks, schema
from hindsight_recall.store._reid import reid_ambiguous
from sqlalchemy import text


def fresh(prefix: str = "b") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def rows(engine: Engine, sql: str, **params: Any) -> list[Any]:
    async with engine.db.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def test_chunk_ids_of_names_that_join_alike_stay_in_their_bank(engine: Engine) -> None:
    base = fresh()
    first, second = f"{base}u", f"{base}u_1"  # "{bank}_{doc}": u + 1_notes and u_1 + notes
    await engine.retain(first, [{"id": "m", "text": "Ursula keeps notes on tea.", "document_id": "1_notes",
                                 "chunk": "The first bank's own chunk."}])
    await engine.retain(second, [{"id": "m", "text": "Ursula keeps notes on coffee.", "document_id": "notes",
                                  "chunk": "The second bank's own chunk."}])
    for bank, own in ((first, "The first bank's own chunk."), (second, "The second bank's own chunk.")):
        body = await engine.recall(bank, "Ursula notes", include_chunks=1000)
        assert [c["text"] for c in body["chunks"].values()] == [own]
        assert await rows(engine, "SELECT chunk_text FROM chunks WHERE bank_id = :b", b=bank) == [(own,)]


async def test_chunks_without_a_document_keep_apart_from_documents(engine: Engine, bank: str) -> None:
    # a chunk without a document was named like document "chunk-<digest>"; a document may use that name
    document = "chunk-" + hashlib.md5(b"loose text").hexdigest()[:16]
    await engine.retain(bank, [{"id": "a", "text": "Jules wrote a loose note.", "chunk": "loose text"}])
    await engine.retain(bank, [{"id": "b", "text": "Jules wrote a document.", "chunk": "document text",
                                "document_id": document}])
    body = await engine.recall(bank, "Jules wrote", include_chunks=1000)
    by_memory = {r["id"]: body["chunks"][r["chunk_id"]]["text"] for r in body["results"]}
    assert by_memory == {"a": "loose text", "b": "document text"}
    chunk_ids = await rows(engine, "SELECT chunk_id FROM memory_units WHERE bank_id = :b ORDER BY external_id", b=bank)
    assert chunk_ids[1] == (f"{bank}_{document}_0",) and chunk_ids[0][0].startswith(f"{bank}__")


async def test_a_separator_in_a_name_never_moves_a_memory_to_another_bank(engine: Engine) -> None:
    base = fresh()
    joined, plain = f"{base}a\x1fb", f"{base}a"  # unit ids hashed "a\x1fb" + "\x1f" + "c" = "a" + "\x1f" + "b\x1fc"
    await engine.retain(plain, [{"id": "b\x1fc", "text": "Plain bank memory about tulips."}])
    await engine.retain(joined, [{"id": "c", "text": "Joined bank memory about roses."}])
    assert [r["text"] for r in (await engine.recall(plain, "tulips roses"))["results"]] == [
        "Plain bank memory about tulips."]
    assert [r["text"] for r in (await engine.recall(joined, "tulips roses"))["results"]] == [
        "Joined bank memory about roses."]
    assert unit_id(plain, "b\x1fc") != unit_id(joined, "c")


async def test_deleting_a_bank_keeps_another_banks_entities(engine: Engine) -> None:
    base = fresh()
    # entity ids hashed "{bank}\x1fentity\x1f{name}": these two were one row, owned by the first bank
    owner, other = f"{base}a\x1fentity\x1fb", f"{base}a"
    await engine.retain(owner, [{"id": "x", "text": "Carol plays chess.", "entities": ["c"]}])
    await engine.retain(other, [{"id": "y", "text": "Dave plays go.", "entities": ["b\x1fentity\x1fc"]}])
    async with engine.db.connect() as conn:
        assert await banks.delete_bank(conn, owner)
    body = await engine.recall(other, "Dave plays go", include_entities=100)
    assert body["results"][0]["entities"] == ["b\x1fentity\x1fc"]
    assert entity_id(owner, "c") != entity_id(other, "b\x1fentity\x1fc")


def test_ids_of_plain_names_are_unchanged() -> None:
    namespace = uuid.UUID("6f1c7a52-3d55-4c1e-9a0f-2f6b7f1d9e11")
    assert unit_id("bank", "m1") == uuid.uuid5(namespace, "bank\x1fm1")
    assert entity_id("bank", "Alice") == uuid.uuid5(namespace, "bank\x1fentity\x1falice")
    assert _rows.id_name("unit", "a\x1fb", "c") != _rows.id_name("unit", "a", "b\x1fc")
    assert _rows.id_name("unit", "a\x1eb", "c").startswith("\x1e")


def _old_unit_id(bank_id: str, memory_id: str) -> uuid.UUID:
    return uuid.uuid5(uuid.UUID("6f1c7a52-3d55-4c1e-9a0f-2f6b7f1d9e11"), f"{bank_id}\x1f{memory_id}")


def _old_entity_id(bank_id: str, name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.UUID("6f1c7a52-3d55-4c1e-9a0f-2f6b7f1d9e11"), f"{bank_id}\x1fentity\x1f{name.casefold()}")


#: an old store is upgraded on its single server, then distributed (tests/test_citus.py checks that step)
_UPGRADES_BEFORE_CITUS = "version-7 re-keying runs on a single server, before the tables are distributed"


async def test_migration_gives_rows_with_separators_their_new_ids(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine.db.citus:
        pytest.skip(_UPGRADES_BEFORE_CITUS)
    bank = fresh("mig\x1f")
    with monkeypatch.context() as patch:  # rows as the joined ids wrote them
        patch.setattr(_transaction, "unit_id", _old_unit_id)
        patch.setattr(_rows, "entity_id", _old_entity_id)
        await engine.retain(bank, [
            {"id": "fact", "text": "Erin bakes bread on Sundays.", "entities": ["Erin"],
             "occurred_at": "2024-01-07T00:00:00Z"},
            {"id": "later", "text": "Erin bakes rolls on Mondays.", "entities": ["Erin"], "causes": ["fact"],
             "occurred_at": "2024-01-08T00:00:00Z"},
            {"id": "obs", "text": "Erin bakes every week.", "type": "observation", "sources": ["fact"]},
        ])
    assert (await rows(engine, "SELECT id FROM memory_units WHERE bank_id = :b AND external_id = 'fact'", b=bank)
            ) == [(_old_unit_id(bank, "fact"),)]
    async with engine.db.connect() as conn:
        await reid_ambiguous(conn)
    fact, obs = unit_id(bank, "fact"), unit_id(bank, "obs")
    stored = dict(await rows(engine, "SELECT external_id, id FROM memory_units WHERE bank_id = :b", b=bank))
    assert stored == {m: unit_id(bank, m) for m in ("fact", "later", "obs")}
    assert await rows(engine, "SELECT source_memory_ids FROM memory_units WHERE id = :i", i=obs) == [([fact],)]
    assert await rows(engine, "SELECT source_id FROM observation_sources WHERE observation_id = :i", i=obs) == [(fact,)]
    assert (await rows(engine, "SELECT count(*) FROM memory_links WHERE from_unit_id = :i OR to_unit_id = :i",
                       i=fact))[0][0] >= 1
    assert await rows(engine, "SELECT entity_id FROM unit_entities WHERE unit_id = :i", i=fact) == [
        (entity_id(bank, "Erin"),)]
    await engine.retain(bank, [{"id": "fact", "text": "Erin bakes sourdough on Sundays.", "entities": ["Erin"]}])
    body = await engine.recall(bank, "What does Erin bake?", include_entities=100)
    assert "Erin bakes sourdough on Sundays." in [r["text"] for r in body["results"]]
    assert len(await rows(engine, "SELECT 1 FROM entities WHERE bank_id = :b", b=bank)) == 1
    await engine.delete_bank(bank)


async def test_migration_7_upgrades_a_version_6_store(
    engine: Engine, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine.db.citus:
        pytest.skip(_UPGRADES_BEFORE_CITUS)
    settings = make_settings(database_schema=f"legacy_{uuid.uuid4().hex[:8]}")
    bank = "old\x1fbank"
    # a store as version 6 left it, with its joined ids (the later migrations, which today's retain
    # needs, are independent of 7 and applied too)
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", {v: f for v, f in schema.MIGRATIONS.items() if v != 7})
        patch.setattr(_transaction, "unit_id", _old_unit_id)
        patch.setattr(_rows, "entity_id", _old_entity_id)
        async with Engine(settings) as old:
            await old.retain(bank, [{"id": "k", "text": "Kim grows tomatoes.", "entities": ["Kim"]}])
            async with old.db.connect() as conn:  # the chunk as version 6 wrote it (keyed by id alone)
                await conn.execute(text(
                    "INSERT INTO chunks VALUES ('old_garden_0', 'garden', :b, 0, 'Kim''s garden notes.') "
                    "ON CONFLICT (chunk_id) DO NOTHING"), {"b": bank})
                await conn.execute(text("UPDATE memory_units SET chunk_id = 'old_garden_0'"))
    async with Engine(settings) as new:
        keys = await rows(new, "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                               "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'chunks'::regclass "
                               "AND i.indisprimary")
        assert set(keys) == {("chunk_id",), ("bank_id",)}
        assert await rows(new, "SELECT id FROM memory_units") == [(unit_id(bank, "k"),)]
        assert await rows(new, "SELECT entity_id FROM unit_entities") == [(entity_id(bank, "Kim"),)]
        body = await new.recall(bank, "tomatoes", include_chunks=100, include_entities=100)
        assert body["results"][0]["entities"] == ["Kim"]
        assert [c["text"] for c in body["chunks"].values()] == ["Kim's garden notes."]
        assert await new.delete_bank(bank)


async def test_forget_removes_memories_with_their_links_pairs_and_chunks(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [
        {"id": "a", "text": "Frank moved to Oslo.", "entities": ["Frank", "Oslo"], "document_id": "d",
         "chunk": "Frank moved to Oslo in May.", "occurred_at": "2024-05-01T00:00:00Z", "causes": ["b"]},
        {"id": "b", "text": "Frank found a job in Oslo.", "entities": ["Frank"], "document_id": "d",
         "chunk": "Later he found a job.", "occurred_at": "2024-05-20T00:00:00Z"},
        {"id": "o", "text": "Frank settled in Norway.", "type": "observation", "sources": ["a", "b"]},
    ])
    a, b, o = (unit_id(bank, x) for x in "abo")
    assert await engine.forget(bank, ["a", "missing"]) == 1
    assert await rows(engine, "SELECT external_id FROM memory_units WHERE bank_id = :b ORDER BY 1", b=bank) == [
        ("b",), ("o",)]
    assert await rows(engine, "SELECT 1 FROM memory_links WHERE :a IN (from_unit_id, to_unit_id)", a=a) == []
    assert await rows(engine, "SELECT 1 FROM unit_entities WHERE unit_id = :a", a=a) == []
    assert await rows(engine, "SELECT source_id FROM observation_sources WHERE observation_id = :o", o=o) == [(b,)]
    assert await rows(engine, "SELECT source_memory_ids FROM memory_units WHERE id = :o", o=o) == [([b],)]
    assert await rows(engine, "SELECT chunk_text FROM chunks WHERE bank_id = :b", b=bank) == [
        ("Later he found a job.",)
    ]
    assert await rows(engine, "SELECT canonical_name FROM entities WHERE bank_id = :b", b=bank) == [("Frank",)]
    assert [r["id"] for r in (await engine.recall(bank, "Frank Oslo"))["results"]] in (["b", "o"], ["o", "b"])
    assert await engine.forget(bank, "b") == 1  # one id as a string
    assert await engine.forget(fresh("absent"), ["b"]) == 0
    assert await engine.forget(bank, []) == 0


async def test_list_stats_and_delete(engine: Engine, alice: str) -> None:
    listed = {b["bank_id"]: b for b in await engine.list_banks()}
    assert listed[alice]["memories"] == 8
    stats = await engine.bank_stats(alice)
    assert stats is not None
    assert stats["memories"] == 8 and stats["by_type"] == {"world": 6, "experience": 1, "observation": 1}
    assert stats["entities"] == 4 and stats["links"] > 0
    assert await engine.bank_stats(fresh("absent")) is None
    assert await engine.delete_bank(alice) is True
    assert await engine.delete_bank(alice) is False
    assert alice not in {b["bank_id"] for b in await engine.list_banks()}
    with pytest.raises(InvalidRequest):
        await engine.delete_bank("")


async def test_the_alias_map_and_a_lookup_agree_and_a_real_bank_wins(engine: Engine) -> None:
    """What the service caches (every alias that routes) and what it asks per request while it has no map
    agree: an alias names its bank, a name that is also a bank is the bank, any other name is itself.
    On Citus both run too (the map's two statements; a lookup of a bank reads only its shard)."""
    from hindsight_recall.store import aliases

    bank, shadowed = fresh("al"), fresh("al")
    alias = f"{bank}-alias"
    await engine.retain(bank, [{"id": "m", "text": "Ursula keeps notes on tea."}])
    async with engine.db.connect() as conn:
        await aliases.create_alias(conn, bank, alias)
        await aliases.create_alias(conn, bank, shadowed)
    await engine.retain(shadowed, [{"id": "m", "text": "A bank named as another's alias."}])  # a real bank wins
    async with engine.db.connect() as conn:
        names = await aliases.alias_map(conn)
        assert (names.get(alias), names.get(shadowed), names.get(bank)) == (bank, None, None)
        for name, expected in ((alias, bank), (shadowed, shadowed), (bank, bank), (fresh("none"), None)):
            assert await aliases.resolve(conn, name) == (expected or name), name
    for b in (bank, shadowed):
        await engine.delete_bank(b)


async def test_each_schema_is_its_own_store(make_settings: Callable[..., Settings]) -> None:
    async with Engine(make_settings(database_schema="tenant_one")) as one, \
            Engine(make_settings(database_schema="Tenant_Two")) as two:
        await one.retain("shared-name", [{"id": "m", "text": "Only tenant one knows about kiwis."}])
        assert [r["id"] for r in (await one.recall("shared-name", "kiwis"))["results"]] == ["m"]
        with pytest.raises(BankNotFound):
            await two.recall("shared-name", "kiwis")
        assert await two.list_banks() == []
        tables = await rows(one, "SELECT schemaname FROM pg_tables WHERE tablename = 'memory_units' ORDER BY 1")
        assert {("tenant_one",), ("Tenant_Two",)} <= set(tables)
        assert await one.delete_bank("shared-name")


async def test_a_schema_that_cannot_be_created_is_one_clear_error(make_settings: Callable[..., Settings]) -> None:
    # "pg_" names are reserved for the system: creating one fails for every role
    with pytest.raises(DatabaseError, match=r"cannot create schema 'pg_tenant': .*HINDSIGHT_API_DATABASE_SCHEMA"):
        await Engine(make_settings(database_schema="pg_tenant")).open()
    with pytest.raises(DatabaseError) as err:
        await Engine(make_settings(database_schema="pg_tenant")).open()
    assert "\n" not in str(err.value)


# --- the command line, in process against the test server -------------------------------------------------


@pytest.fixture
def invoke(make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    monkeypatch.setattr(cli_engine, "open_engine", lambda: Engine(make_settings()))
    monkeypatch.setattr(cli, "open_engine", lambda: Engine(make_settings()))
    runner = CliRunner()

    def run(*args: str, input: str | None = None) -> Any:
        return runner.invoke(cli.main, list(args), input=input)

    yield run


def test_cli_bank_commands(invoke: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bank = fresh("cli")
    memories = tmp_path / "m.jsonl"
    memories.write_text("\n".join(json.dumps(m) for m in [
        {"id": "one", "text": "Gina paints.", "entities": ["Gina"]},
        {"id": "two", "text": "Gina sings.", "entities": ["Gina"]},
    ]) + "\n")
    assert invoke("retain", str(memories), "--bank", bank).exit_code == 0
    listed = invoke("bank", "list")
    assert listed.exit_code == 0 and f"{bank}\t2" in listed.output.splitlines()
    assert any(b["bank_id"] == bank for b in json.loads(invoke("bank", "list", "--json").output))
    stats = invoke("bank", "stats", bank)
    assert stats.exit_code == 0 and json.loads(stats.output)["memories"] == 2
    forgot = invoke("bank", "forget", bank, "one", "nope")
    assert forgot.exit_code == 0 and f"forgot 1 of 2 memories in bank {bank!r}" in forgot.output
    refused = invoke("bank", "delete", bank)  # CliRunner's stdin is not a terminal
    assert refused.exit_code == 1 and "without --yes" in refused.output and len(refused.output.splitlines()) == 1
    monkeypatch.setattr(cli_banks, "_interactive", lambda: True)
    declined = invoke("bank", "delete", bank, input="n\n")
    assert declined.exit_code == 1 and json.loads(invoke("bank", "stats", bank).output)["memories"] == 1
    deleted = invoke("bank", "delete", bank, input="y\n")
    assert deleted.exit_code == 0 and f"deleted bank {bank!r}" in deleted.output
    for args in (("stats", bank), ("delete", bank, "--yes"), ("forget", bank, "two")):
        missing = invoke("bank", *args)
        assert missing.exit_code == 1 and "does not exist" in missing.output, args
    assert invoke("bank", "forget", bank).exit_code == 2  # ids are required


def test_demo_refuses_an_existing_bank_unless_replace(invoke: Callable[..., Any], tmp_path: Path) -> None:
    bank = fresh("demo")
    memories = tmp_path / "m.jsonl"
    memories.write_text(json.dumps({"id": "mine", "text": "Hana's own memory."}) + "\n")
    assert invoke("retain", str(memories), "--bank", bank).exit_code == 0
    refused = invoke("demo", "--bank", bank)
    assert refused.exit_code == 1 and "--replace" in refused.output and len(refused.output.splitlines()) == 1
    assert json.loads(invoke("bank", "stats", bank).output)["memories"] == 1
    replaced = invoke("demo", "--bank", bank, "--replace")
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(invoke("bank", "stats", bank).output)["memories"] > 1
    assert invoke("bank", "delete", bank, "--yes").exit_code == 0


def test_bench_locomo_refuses_existing_banks_unless_replace(invoke: Callable[..., Any], tmp_path: Path) -> None:
    bank = fresh("bench")
    memories, queries = tmp_path / "m.jsonl", tmp_path / "q.jsonl"
    memories.write_text(json.dumps({"id": "e1", "text": "Ivan adopted a cat.", "bank": bank}) + "\n")
    queries.write_text(json.dumps({"qid": "q1", "bank": bank, "question": "What did Ivan adopt?",
                                   "evidence": ["e1"], "category_name": "single"}) + "\n")
    assert invoke("retain", str(memories)).exit_code == 0
    refused = invoke("bench", "locomo", "--memories", str(memories), "--queries", str(queries))
    assert refused.exit_code == 1 and "--replace" in refused.output and len(refused.output.splitlines()) == 1
    ran = invoke("bench", "locomo", "--memories", str(memories), "--queries", str(queries), "--replace")
    assert ran.exit_code == 0, ran.output
    assert invoke("bank", "delete", bank, "--yes").exit_code == 0
