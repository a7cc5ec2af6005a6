"""Retain: validation, idempotency, atomicity, links and the LoCoMo file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hindsight_recall import Engine, RetainError
from hindsight_recall.retain.ingest import unit_id
from hindsight_recall.retain.memories import parse_lines, read_jsonl
from sqlalchemy import text

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo" / "dev" / "memories.jsonl"


async def count(engine: Engine, sql: str, **params: object) -> int:
    async with engine.db.connect() as conn:
        return int(await conn.scalar(text(sql), params))


@pytest.mark.parametrize(
    ("line", "field", "why"),
    [
        ('{"text": "x"}', "id", "required"),
        ('{"id": "a", "text": ""}', "text", "empty"),
        ('{"id": "a", "text": "x", "type": "opinion"}', "type", "not one of"),
        ('{"id": "a", "text": "x", "occurred_at": "last tuesday"}', "occurred_at", "ISO-8601"),
        ('{"id": "a", "text": "x", "occurred_at": 2023}', "occurred_at", "ISO-8601"),
        (
            '{"id": "a", "text": "x", "occurred_start": "2024-02-01", "occurred_end": "2024-01-01"}',
            "occurred_end",
            "before",
        ),
        (
            '{"id": "a", "text": "x", "occurred_at": "2024-01-01", "occurred_start": "2024-01-01"}',
            "occurred_at",
            "either",
        ),
        ('{"id": "a", "text": "x", "proof_count": 0}', "proof_count", "positive"),
        ('{"id": "a", "text": "x", "metadata": {"k": 1}}', "metadata", "string"),
        ('{"id": "a", "text": "x", "entities": "Alice"}', "entities", "list"),
        ('{"id": "a", "text": "x\\u0000y"}', "text", "NUL"),
        ('{"id": "a", "text": "x", "colour": "red"}', "colour", "unknown field"),
        ('{"id": "a", "text": "x"', "json", "not valid JSON"),
        ('["a"]', "memory", "JSON object"),
    ],
)
def test_bad_lines_name_line_and_field(line: str, field: str, why: str) -> None:
    with pytest.raises(RetainError) as err:
        list(parse_lines(["", line], "bank"))
    assert err.value.line == 2 and err.value.field == field and why in str(err.value)
    assert str(err.value).startswith(f"line 2: {field}")


def test_a_bank_is_needed() -> None:
    with pytest.raises(RetainError, match="bank"):
        list(parse_lines(['{"id": "a", "text": "x"}']))


async def test_reretain_updates_and_never_duplicates(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": "a", "text": "Alice lives in Berlin.", "entities": ["Alice", "Berlin"]}])
    await engine.retain(bank, [{"id": "a", "text": "Alice lives in Munich.", "entities": ["Alice", "Munich"]}])
    assert await count(engine, "SELECT count(*) FROM memory_units WHERE bank_id = :b", b=bank) == 1
    body = await engine.recall(bank, "Where does Alice live?")
    assert [r["text"] for r in body["results"]] == ["Alice lives in Munich."]
    assert set(body["results"][0]["entities"]) == {"Alice", "Munich"}


async def test_nothing_is_half_written(engine: Engine, bank: str) -> None:
    good = {"id": "a", "text": "Fine memory."}
    with pytest.raises(RetainError, match="causes"):
        await engine.retain(bank, [good, {"id": "b", "text": "Bad link.", "causes": ["nowhere"]}])
    assert await count(engine, "SELECT count(*) FROM memory_units WHERE bank_id = :b", b=bank) == 0
    with pytest.raises(RetainError, match="twice"):
        await engine.retain(bank, [good, good])
    assert await count(engine, "SELECT count(*) FROM banks WHERE bank_id = :b", b=bank) == 0


async def test_links_and_entities(engine: Engine, alice: str) -> None:
    reorg, left = unit_id(alice, "reorg"), unit_id(alice, "left")
    causal = await count(
        engine,
        "SELECT count(*) FROM memory_links WHERE from_unit_id = :a AND to_unit_id = :b "
        "AND link_type = 'causes' AND weight = 1",
        a=reorg,
        b=left,
    )
    back = await count(engine, "SELECT count(*) FROM memory_links WHERE from_unit_id = :b AND to_unit_id = :a "
                               "AND link_type = 'caused_by'", a=reorg, b=left)
    assert causal == 1 and back == 1
    assert await count(engine, "SELECT count(*) FROM entities WHERE bank_id = :b", b=alice) == 4
    await engine.retain(
        alice, [{"id": "near", "text": "Alice bought new shoes.", "occurred_at": "2023-04-23T12:00:00Z"}]
    )
    # neighbours in time are read from the dates by the temporal arm: none is stored
    assert await count(engine, "SELECT count(*) FROM memory_links WHERE bank_id = :b AND link_type = 'temporal'",
                       b=alice) == 0


async def test_semantic_links_above_threshold(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": "a", "text": "The cat sat on the mat."},
                               {"id": "b", "text": "A cat was sitting on the mat."},
                               {"id": "c", "text": "Quarterly revenue grew by four percent."}])
    rows = await count(engine, "SELECT count(*) FROM memory_links WHERE link_type = 'semantic' AND "
                               "from_unit_id = ANY(:ids) AND weight >= 0.7", ids=[unit_id(bank, x) for x in "abc"])
    assert rows == 2  # a<->b only


async def test_no_vector_index_per_bank(engine: Engine, alice: str) -> None:
    async with engine.db.connect() as conn:
        names = set((await conn.execute(text(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_units' "
            "AND schemaname = current_schema() AND indexdef LIKE '%hnsw%'"
        ))).scalars())
        indexed, slot = (await conn.execute(text("SELECT indexed, ann_slot FROM banks WHERE bank_id = :b"),
                                            {"b": alice})).one()
        flagged = await conn.scalar(text("SELECT count(*) FROM memory_units WHERE bank_id = :b "
                                         "AND (ann OR ann_slot IS NOT NULL)"), {"b": alice})
    shared = {f"idx_mu_ann_{t}" for t in ("world", "experience", "observation")}
    # besides the shared indexes, only slots (large banks of other tests): bounded, never one per bank
    slots = {n for n in names - shared if n.startswith("idx_mu_slot")}
    assert shared <= names and names == shared | slots and len(slots) <= 3 * engine.settings.vector_index_slots
    assert indexed is False and slot is None and flagged == 0  # a small bank is ranked exactly, in no index


async def test_token_count_stored_at_retain(engine: Engine, alice: str) -> None:
    async with engine.db.connect() as conn:
        rows = (await conn.execute(text("SELECT text, context, metadata, token_count FROM memory_units "
                                        "WHERE bank_id = :b"), {"b": alice})).all()
    assert rows and all(r.token_count == engine.tokens.count_returned(r.text, r.context, r.metadata) for r in rows)


async def test_hostile_bank_ids_are_stored_safely(engine: Engine) -> None:
    bank = "o'reilly; DROP TABLE banks; --"
    await engine.retain(bank, [{"id": "x", "text": "Quotes in bank names are fine."}])
    assert (await engine.recall(bank, "quotes bank names"))["results"][0]["id"] == "x"


def test_locomo_file_parses_as_it_is() -> None:
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} is not beside the repository")
    parsed = list(read_jsonl(LOCOMO))
    assert len(parsed) == 2760 and len({b for b, _, _ in parsed}) == 5


async def test_locomo_bank_retains(engine: Engine, bank: str) -> None:
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} is not beside the repository")
    lines = [json.loads(x) for x in LOCOMO.read_text().splitlines()[:120]]
    for line in lines:
        line.pop("bank")
    stats = await engine.retain(bank, lines)
    assert stats.memories == 120 and stats.links > 0
    assert await count(engine, "SELECT count(DISTINCT chunk_id) FROM memory_units WHERE bank_id = :b", b=bank) >= 3


async def test_migrations_are_recorded_and_idempotent(engine: Engine) -> None:
    from hindsight_recall.store.schema import MIGRATIONS, migrate

    await migrate(engine.db, 384, engine.text_search)  # a second run changes nothing
    async with engine.db.connect() as conn:
        versions = list(
            (await conn.execute(text("SELECT version FROM hindsight_migrations ORDER BY version"))).scalars()
        )
        gin = await conn.scalar(text(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'idx_mu_source_ids' AND schemaname = current_schema()"))
        target = await conn.scalar(text("SELECT reloptions::text FROM pg_class WHERE oid = 'memory_units'::regclass"))
        by_type = await conn.scalar(text(
            "SELECT array_agg(indexname ORDER BY indexname) FROM pg_indexes WHERE indexname IN "
            "('idx_unit_entities_entity_type', 'idx_unit_entities_reach') AND schemaname = current_schema()"))
        link_fks = await conn.scalar(text(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'memory_links'::regclass AND contype = 'f'"))
    assert versions == sorted(MIGRATIONS)
    assert link_fks == 0  # migration 3: links are checked by construction, not per row
    assert "toast_tuple_target=8160" in target  # migration 4: rows and their vectors stay whole
    assert gin == 0  # migration 5: observation_sources replaced the GIN index
    # migration 6: entity pairs walk by (entity, fact type); 17: with the bank, an index-only walk
    assert by_type == ["idx_unit_entities_reach"]


async def test_observation_sources_follow_retain_reretain_and_delete(engine: Engine, bank: str) -> None:
    from hindsight_recall.store import banks

    facts = [{"id": f"f{i}", "text": f"Alice fact {i}."} for i in range(3)]
    await engine.retain(bank, [*facts, {"id": "obs", "text": "Alice likes facts.", "type": "observation",
                                        "sources": ["f0", "f1"]}])
    sources = ("SELECT array_agg(s.source_id ORDER BY s.source_id) FROM observation_sources s "
               "WHERE s.observation_id = :o")

    async def cited() -> list[object] | None:
        async with engine.db.connect() as conn:
            return await conn.scalar(text(sources), {"o": unit_id(bank, "obs")})

    assert await cited() == sorted([unit_id(bank, "f0"), unit_id(bank, "f1")])
    await engine.retain(bank, [{"id": "obs", "text": "Alice likes facts.", "type": "observation", "sources": ["f2"]}])
    assert await cited() == [unit_id(bank, "f2")]  # re-retain replaces, never accumulates
    async with engine.db.connect() as conn:
        await banks.delete_bank(conn, bank)
    assert await cited() is None


async def test_deleting_a_bank_removes_its_links_and_only_its_links(engine: Engine, alice: str) -> None:
    from hindsight_recall.store import banks

    other = f"{alice}-other"
    await engine.retain(
        other,
        [
            {"id": "a", "text": "Bob moved to Lisbon.", "occurred_at": "2023-04-20T10:00:00Z"},
            {"id": "b", "text": "Bob found a flat in Lisbon.", "occurred_at": "2023-04-20T12:00:00Z"},
        ],
    )
    links_of = ("SELECT count(*) FROM memory_links l JOIN memory_units u ON u.id = l.from_unit_id "
                "AND u.bank_id = l.bank_id WHERE u.bank_id = :b")
    kept = await count(engine, links_of, b=other)
    assert kept > 0 and await count(engine, links_of, b=alice) > 0
    before = await count(engine, "SELECT count(*) FROM memory_links")
    alice_links = await count(engine, links_of, b=alice)
    async with engine.db.connect() as conn:
        assert await banks.delete_bank(conn, alice) is True
        assert await banks.delete_bank(conn, "no-such-bank") is False
    orphans = (
        "SELECT count(*) FROM memory_links l "
        "WHERE NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = l.bank_id AND u.id = l.from_unit_id) "
        "OR NOT EXISTS (SELECT 1 FROM memory_units u WHERE u.bank_id = l.bank_id AND u.id = l.to_unit_id)"
    )
    assert await count(engine, orphans) == 0
    assert await count(engine, "SELECT count(*) FROM memory_links") == before - alice_links
    assert await count(engine, links_of, b=other) == kept
    async with engine.db.connect() as conn:
        await banks.delete_bank(conn, other)


async def test_entity_pairs_carry_their_memorys_fact_type(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [{"id": "a", "text": "Alice met Bob.", "entities": ["Alice", "Bob"]},
                               {"id": "b", "text": "Alice cooked.", "type": "experience", "entities": ["Alice"]}])
    pairs = "SELECT count(*) FROM unit_entities WHERE unit_id = :u AND fact_type = :t"
    assert await count(engine, pairs, u=unit_id(bank, "a"), t="world") == 2
    assert await count(engine, pairs, u=unit_id(bank, "b"), t="experience") == 1
    await engine.retain(bank, [{"id": "a", "text": "Alice met Bob.", "type": "experience", "entities": ["Alice"]}])
    assert await count(engine, pairs, u=unit_id(bank, "a"), t="experience") == 1  # re-retain rewrites the pairs
    assert await count(engine, "SELECT count(*) FROM unit_entities WHERE unit_id = :u", u=unit_id(bank, "a")) == 1


def test_only_loads_autovacuum_would_act_on_are_maintained() -> None:
    from hindsight_recall.retain.ingest import needs_maintenance

    assert needs_maintenance(50, 0) and not needs_maintenance(49, 0)
    assert needs_maintenance(150, 1000) and not needs_maintenance(149, 1000)
    assert not needs_maintenance(5_000, 1_000_000)  # a small bank added to a big table: autovacuum's job


_NO_VACUUM_ON_CITUS = "on Citus the workers' autovacuum maintains the shards; retain runs no VACUUM there"


async def test_a_bulk_load_is_vacuumed_and_analyzed_before_retain_returns(
    engine: Engine, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine.db.citus:
        pytest.skip(_NO_VACUUM_ON_CITUS)
    from hindsight_recall.retain.ingest import MAINTAINED_TABLES

    calls: list[object] = []
    real = engine.db.vacuum_analyze

    async def spy(tables: object) -> None:
        calls.append(tables)
        await real(tables)  # type: ignore[arg-type]

    async def all_visible_pages() -> int:
        return await count(engine, "SELECT relallvisible FROM pg_class WHERE oid = 'memory_units'::regclass")

    monkeypatch.setattr(engine.db, "vacuum_analyze", spy)
    rows = max(await count(engine, "SELECT count(*) FROM memory_units"),  # the estimate may lag either way
               await count(engine, "SELECT greatest(reltuples, 0)::int FROM pg_class "
                                   "WHERE oid = 'memory_units'::regclass"))
    before = await all_visible_pages()
    await engine.retain(bank, [{"id": "one", "text": "Alice hiked."}])
    assert calls == []  # one row: far below 50 + a tenth of the table
    n = 100 + rows // 5  # over 50 + a tenth of the table, even once the load itself is counted
    vectors = np.random.default_rng(0).normal(size=(n, engine.embedder.dimensions()))
    await engine.retain(bank, [{"id": f"m{i}", "text": f"Alice hiked trail {i}."} for i in range(n)],
                        embeddings=vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    assert calls == [MAINTAINED_TABLES]
    assert await all_visible_pages() > before  # the new rows' pages are in the visibility map
    # this store's table only: other tests leave stores of their own in other schemas
    analyzed = await count(engine, "SELECT count(*) FROM pg_stats WHERE tablename = 'memory_units' "
                                   "AND schemaname = current_schema() "
                                   "AND attname = 'search_vector' AND most_common_elems IS NOT NULL")
    assert analyzed == 1  # the keyword arm's term frequencies exist


async def test_a_failed_vacuum_keeps_the_committed_load(
    engine: Engine, bank: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if engine.db.citus:
        pytest.skip(_NO_VACUUM_ON_CITUS)

    async def refuse(tables: object) -> None:
        raise RuntimeError("must be owner of table memory_units")

    monkeypatch.setattr(engine.db, "vacuum_analyze", refuse)
    rows = max(await count(engine, "SELECT count(*) FROM memory_units"),  # the estimate may lag either way
               await count(engine, "SELECT greatest(reltuples, 0)::int FROM pg_class "
                                   "WHERE oid = 'memory_units'::regclass"))
    n = 100 + rows // 5  # over 50 + a tenth of the table, even once the load itself is counted
    vectors = np.random.default_rng(1).normal(size=(n, engine.embedder.dimensions()))
    with caplog.at_level("WARNING"):
        stats = await engine.retain(bank, [{"id": f"m{i}", "text": f"Bob sailed {i}."} for i in range(n)],
                                    embeddings=vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    assert stats.memories == n and "must be owner" in caplog.text
    assert await count(engine, "SELECT count(*) FROM memory_units WHERE bank_id = :b", b=bank) == n
