"""Bad input fails early with a clear error: in the library a specific exception, in the CLI one line."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from hindsight_recall import Engine
from hindsight_recall.cli import main
from hindsight_recall.errors import BankNotFound, DatabaseError, InvalidRequest, PoolExhausted, RetainError
from hindsight_recall.settings import Settings
from hindsight_recall.store import banks
from hindsight_recall.types import Memory
from sqlalchemy import text as sql_text


@pytest.mark.parametrize("date", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"])
async def test_dates_outside_the_stored_range_are_rejected(engine: Engine, bank: str, date: str) -> None:
    with pytest.raises(RetainError, match="occurred_start.*outside the supported range"):
        await engine.retain(bank, [{"id": "a", "text": "the end of time", "occurred_start": date}])
    await engine.retain(bank, [{"id": "ok", "text": "the end of time", "occurred_at": "9999-12-29T00:00:00Z"}])
    assert (await engine.recall(bank, "end of time"))["results"]  # rows that were stored read back


@pytest.mark.parametrize("proof", [2**31, 2**32])
async def test_proof_count_must_fit_int32(engine: Engine, bank: str, proof: int) -> None:
    with pytest.raises(RetainError, match="proof_count.*32-bit"):
        await engine.retain(bank, [{"id": "a", "text": "counted", "proof_count": proof}])


async def test_text_over_the_tsvector_limit_is_rejected(engine: Engine, bank: str) -> None:
    text = " ".join(f"word{i}" for i in range(90_000))  # 0.9 MB of distinct words
    with pytest.raises(RetainError, match=r"text.*limit is 262144 bytes.*tsvector"):
        await engine.retain(bank, [{"id": "big", "text": text}])


@pytest.mark.parametrize("field", ["id", "tags", "entities", "document_id"])
async def test_index_keys_over_the_btree_limit_are_rejected(engine: Engine, bank: str, field: str) -> None:
    long = "é" * 1500  # 3,000 bytes
    memory = {"id": "a", "text": "keys", field: [long] if field in ("tags", "entities") else long}
    with pytest.raises(RetainError, match=f"{field}.*3000 bytes.*limited to 1024"):
        await engine.retain(bank, [memory])


@pytest.mark.parametrize("memory", [{"id": "a", "text": "bad \ud800 text"}, {"id": "\udcff", "text": "x"},
                                    {"id": "a", "text": "x", "tags": ["t\udc80"]}])
async def test_lone_surrogates_are_rejected(engine: Engine, bank: str, memory: dict[str, object]) -> None:
    with pytest.raises(RetainError, match="lone surrogate"):
        await engine.retain(bank, [memory])
    with pytest.raises(RetainError, match="lone surrogate"):
        Memory(**{"id": "a", "text": "x", **{k: tuple(v) if isinstance(v, list) else v for k, v in memory.items()}})


async def test_surrogate_bank_is_rejected(engine: Engine) -> None:
    with pytest.raises(InvalidRequest, match="bank_id.*surrogate"):
        await engine.recall("bank\udcff", "anything")
    with pytest.raises(InvalidRequest, match="bank_id.*surrogate"):
        await engine.retain("bank\udcff", [{"id": "a", "text": "x"}])


async def test_unknown_bank_raises_bank_not_found(engine: Engine) -> None:
    with pytest.raises(BankNotFound, match="bank 'no-such-bank-anywhere' does not exist") as info:
        await engine.recall("no-such-bank-anywhere", "anything")
    assert info.value.status == 404


@pytest.mark.parametrize("max_tokens", [0, -1])
async def test_max_tokens_below_one_is_rejected(engine: Engine, alice: str, max_tokens: int) -> None:
    with pytest.raises(InvalidRequest, match="max_tokens"):
        await engine.recall(alice, "Alice", max_tokens=max_tokens)


async def test_a_string_tag_is_one_tag(engine: Engine, alice: str) -> None:
    as_str = await engine.recall(alice, "Alice", tags="work", tags_match="all_strict")
    as_list = await engine.recall(alice, "Alice", tags=["work"], tags_match="all_strict")
    assert [r["id"] for r in as_str["results"]] == [r["id"] for r in as_list["results"]] != []


async def test_bank_config_bad_value_is_invalid_request(engine: Engine, bank: str) -> None:
    async with engine.db.connect() as conn:
        with pytest.raises(InvalidRequest, match="recall_rrf_k"):
            await banks.set_bank_config(conn, bank, {"recall_rrf_k": "abc"})


async def test_pool_exhaustion_is_a_clear_error(make_settings: object) -> None:
    make = make_settings  # type: Any
    settings: Settings = make(db_pool_min_size=1, db_pool_max_size=1, db_acquire_timeout=0.5)
    async with Engine(settings) as eng, eng.db.connect():
        with pytest.raises(PoolExhausted, match="no database connection came free within 0.5 s"):
            async with eng.db.connect():
                pass


async def test_the_pool_keeps_what_the_recalls_at_once_can_hold(make_settings: object) -> None:
    """2 recalls at once × 3 connections each: 6 stay open after a busy moment, a seventh is closed."""
    make = make_settings  # type: Any
    settings: Settings = make(db_pool_min_size=1, db_pool_max_size=7, recall_max_concurrent=2,
                              recall_connection_budget=3)
    assert settings.pooled_connections() == 6
    async with Engine(settings) as eng:
        async with contextlib.AsyncExitStack() as busy:
            for _ in range(7):
                await busy.enter_async_context(eng.db.connect())
        assert eng.db.engine.pool.checkedin() == 6
    assert make(db_pool_min_size=8, db_pool_max_size=9, recall_max_concurrent=2).pooled_connections() == 8
    assert make(db_pool_min_size=1, db_pool_max_size=3, recall_max_concurrent=4).pooled_connections() == 3


@pytest.mark.parametrize("url", ["postgresql://user:hunter2@[bad/db", "not a url at all"])
async def test_malformed_database_url(make_settings: object, url: str) -> None:
    with pytest.raises(DatabaseError) as info:
        await Engine(make_settings(database_url=url)).open()  # type: ignore[operator]
    assert "hunter2" not in str(info.value) and "HINDSIGHT_API_DATABASE_URL" in str(info.value)


# -- the command line -------------------------------------------------------------------------------

def cli(*args: str | bytes, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir), "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
               **env}
    argv = [os.fsencode(a) if isinstance(a, str) else a for a in args]
    return subprocess.run([os.fsencode(sys.executable), b"-m", b"hindsight_recall.cli", *argv], capture_output=True,
                          text=True, env=environ, timeout=300, errors="replace")


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_cli_non_utf8_file(data_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"id": "a", "text": "caf\xe9"}\n')
    one_line_error(cli("retain", str(bad), "--bank", "b", data_dir=data_dir), "not UTF-8", "line 1")


def test_cli_surrogate_bank(data_dir: Path, tmp_path: Path) -> None:
    good = tmp_path / "m.jsonl"
    good.write_text(json.dumps({"id": "a", "text": "fine"}) + "\n")
    one_line_error(cli("retain", str(good), "--bank", b"b\xff", data_dir=data_dir), "bank", "surrogate")


def test_cli_large_text_and_long_id(data_dir: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"id": "x" * 3000, "text": "fine"}) + "\n"
                   + json.dumps({"id": "a", "text": " ".join(f"w{i}" for i in range(200_000))}) + "\n")
    one_line_error(cli("retain", str(big), "--bank", "b", data_dir=data_dir), "line 1: id", "limited to 1024")


def test_cli_unknown_bank_and_max_tokens(data_dir: Path) -> None:
    runner = CliRunner()
    env = {"HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir), "HINDSIGHT_API_RERANKER_PROVIDER": "rrf"}
    result = runner.invoke(main, ["recall", "anything", "--bank", "never-made"], env=env)
    assert result.exit_code == 1 and "Error: bank 'never-made' does not exist" in result.output, result.output
    result = runner.invoke(main, ["recall", "anything", "--bank", "never-made", "--max-tokens", "0"], env=env)
    assert result.exit_code == 2 and "--max-tokens" in result.output


def test_cli_bank_config_bad_value(data_dir: Path) -> None:
    env = {"HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir), "HINDSIGHT_API_RERANKER_PROVIDER": "rrf"}
    result = CliRunner().invoke(main, ["bank", "config", "cfg-bank", "recall_rrf_k=abc"], env=env)
    assert result.exit_code == 1 and "Error: recall_rrf_k:" in result.output and "integer" in result.output


def test_cli_malformed_url_and_missing_server(data_dir: Path) -> None:
    result = cli("recall", "x", "--bank", "b", data_dir=data_dir,
                 HINDSIGHT_API_DATABASE_URL="postgresql://me:sw0rdfish@[::1/db")
    one_line_error(result, "HINDSIGHT_API_DATABASE_URL")
    assert "sw0rdfish" not in result.stderr + result.stdout
    result = cli("recall", "x", "--bank", "b", data_dir=data_dir,
                 HINDSIGHT_API_DATABASE_URL="postgresql://me:sw0rdfish@127.0.0.1:1/db",
                 HINDSIGHT_API_DB_ACQUIRE_TIMEOUT="2")
    one_line_error(result, "cannot connect to PostgreSQL")
    assert "sw0rdfish" not in result.stderr + result.stdout


def _database_without_extensions(engine: Engine, name: str, *present: str) -> str:
    """A database on the test server where no extension but ``present`` can be created (as on a server
    without pgvector or without contrib)."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(engine.db.url)
    admin = url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f"CREATE DATABASE {name}")
            inside = url.set(database=name).render_as_string(hide_password=False)
            with psycopg.connect(inside, autocommit=True) as db:
                for extension in present:
                    db.execute(f"CREATE EXTENSION {extension}")
            conn.execute(f"ALTER DATABASE {name} SET extension_control_path = '/nonexistent'")
    return url.set(database=name).render_as_string(hide_password=False)


def test_cli_server_without_pgvector(engine: Engine, data_dir: Path) -> None:
    if not engine.db.embedded:
        pytest.skip("needs the embedded test server")
    url = _database_without_extensions(engine, "no_pgvector")
    one_line_error(cli("recall", "x", "--bank", "b", data_dir=data_dir, HINDSIGHT_API_DATABASE_URL=url),
                   "no pgvector", "Install pgvector")


def test_cli_server_without_btree_gist(engine: Engine, data_dir: Path) -> None:
    if not engine.db.embedded:
        pytest.skip("needs the embedded test server")
    url = _database_without_extensions(engine, "no_btree_gist", "vector")
    one_line_error(cli("recall", "x", "--bank", "b", data_dir=data_dir, HINDSIGHT_API_DATABASE_URL=url),
                   "no btree_gist", "contrib")


def test_cli_text_search_extension_absent(engine: Engine, data_dir: Path) -> None:
    if not engine.db.embedded:
        pytest.skip("needs the embedded test server")
    result = cli("recall", "x", "--bank", "b", data_dir=data_dir, HINDSIGHT_API_TEXT_SEARCH_EXTENSION="pg_textsearch")
    one_line_error(result, "pg_textsearch")


# --- values PostgreSQL would store wrongly or refuse ---------------------------------------------------

@pytest.mark.parametrize("position", [2**31, 2**32 + 5, -1, True, "3", 1.5])
async def test_a_position_outside_int32_or_not_an_integer_is_rejected(engine: Engine, bank: str,
                                                                      position: object) -> None:
    # before: 2**32 + 5 was stored as 5 and 2**31 as -2147483648
    with pytest.raises(RetainError, match="position"):
        await engine.retain(bank, [{"id": "a", "text": "placed", "document_id": "d", "position": position}])
    with pytest.raises(RetainError, match="position"):
        Memory(id="a", text="placed", position=position)  # type: ignore[arg-type]


async def test_the_largest_position_is_stored_and_the_next_place_is_refused(engine: Engine, bank: str) -> None:
    top = 2**31 - 1
    await engine.retain(bank, [{"id": "last", "text": "at the end", "document_id": "d", "position": top}])
    async with engine.db.connect() as conn:
        stored = await conn.scalar(sql_text("SELECT position FROM memory_units WHERE bank_id = :b"), {"b": bank})
    assert stored == top
    with pytest.raises(RetainError, match="position.*give it a position"):
        await engine.retain(bank, [{"id": "after", "text": "one more", "document_id": "d"}])


@pytest.mark.parametrize("document", [True, False])
async def test_long_bank_and_document_ids_within_their_limits_store_their_chunks(engine: Engine,
                                                                                document: bool) -> None:
    bank = "\U0001f600" * 255 + uuid.uuid4().hex[:1]  # 1,021 bytes, 256 characters
    doc = "ü" * 512  # 1,024 bytes
    memories = [{"id": f"m{i}", "text": f"Long ids number {i}.", "chunk": f"chunk {i % 2}",
                 **({"document_id": doc} if document else {})} for i in range(4)]
    try:
        await engine.retain(bank, memories)  # before: index row size 3096 exceeds ... "chunks_pkey"
        await engine.retain(bank, [{"id": "m9", "text": "Long ids again.", "chunk": "chunk 1",
                                    **({"document_id": doc} if document else {})}])
        body = await engine.recall(bank, "long ids", include_chunks=1000)
        assert sorted(c["text"] for c in body["chunks"].values()) == ["chunk 0", "chunk 1"]
        assert all(len(cid.encode()) <= 512 for cid in body["chunks"])
        stats = await engine.bank_stats(bank)
        assert stats is not None and stats["chunks"] == 2 and stats["memories"] == 5
    finally:
        await engine.delete_bank(bank)


async def test_ids_are_exact_strings_and_references_name_them_exactly(engine: Engine, bank: str) -> None:
    from hindsight_recall.retain.ingest import unit_id

    await engine.retain(bank, [{"id": "a", "text": "Alice runs."}, {"id": "a ", "text": "Alice swims."},
                               {"id": "o", "text": "Alice does sport.", "type": "observation", "sources": ["a "]},
                               {"id": "c", "text": "Alice got fit.", "causes": ["a"]}])
    async with engine.db.connect() as conn:
        sources = await conn.scalar(sql_text(
            "SELECT source_memory_ids FROM memory_units WHERE bank_id = :b AND external_id = 'o'"), {"b": bank})
    assert sources == [unit_id(bank, "a ")]  # before: stripped to "a", the other memory
    with pytest.raises(RetainError, match=r"sources.*' a' is not a memory id"):
        await engine.retain(bank, [{"id": "p", "text": "x", "type": "observation", "sources": [" a"]}])
    assert await engine.forget(bank, ["a "]) == 1
    assert (await engine.bank_stats(bank) or {})["memories"] == 3


# --- calls a caller can get wrong ------------------------------------------------------------------------

@pytest.mark.parametrize(("ids", "field"), [(None, "ids"), (5, "ids"), ({"a": 1}, "ids"), (b"a", "ids"),
                                            ([1], r"ids\[0\]"), (["a", None], r"ids\[1\]"),
                                            (["a\x00"], r"ids\[0\].*NUL")])
async def test_forget_rejects_what_is_not_a_list_of_ids(engine: Engine, alice: str, ids: object, field: str) -> None:
    with pytest.raises(InvalidRequest, match=field):
        await engine.forget(alice, ids)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [("2023-01-01",), ("2023-01-01", "2023-02-01", "2023-03-01"), "2023-01-01",
                                    (), 5, {"start": "2023-01-01", "end": "2023-02-01"}])
async def test_a_temporal_window_must_be_a_pair(engine: Engine, alice: str, window: object) -> None:
    with pytest.raises(InvalidRequest, match="temporal_window: expected a .start, end. pair"):
        await engine.recall(alice, "Alice", temporal_window=window)


BAD_VALUES: list[object] = [None, 5, -1, 1.5, True, "x", b"x", [], [1], {}, {"x": 1}, object(), "\x00", "\ud800"]


@pytest.mark.parametrize("option", ["budget", "max_tokens", "types", "tags", "tags_match", "query_timestamp",
                                    "temporal_window", "min_scores", "include_entities", "include_chunks",
                                    "include_source_facts", "source_facts_per_observation", "reranking", "limit"])
def test_every_recall_option_rejects_bad_values_with_invalid_request(option: str) -> None:
    from hindsight_recall.recall.request import build_request

    for value in BAD_VALUES:
        with contextlib.suppress(InvalidRequest):  # any other exception fails the test
            build_request("bank", "where does Alice work", **{option: value})


async def test_an_unknown_recall_option_is_invalid_request(engine: Engine, alice: str) -> None:
    with pytest.raises(InvalidRequest, match="max_token: is not a recall option.*max_tokens"):
        await engine.recall(alice, "Alice", max_token=100)


@pytest.mark.parametrize("memories", [None, "a text", {"id": "a", "text": "x"}, 5])
async def test_retain_rejects_what_is_not_a_list_of_memories(engine: Engine, bank: str, memories: object) -> None:
    with pytest.raises(RetainError, match="memories: expected a list of memories"):
        await engine.retain(bank, memories)  # type: ignore[arg-type]


async def test_a_read_only_database_is_a_database_error_saying_so(make_settings: object, bank: str) -> None:
    async with Engine(make_settings()) as engine:  # type: ignore[operator]
        await engine.retain(bank, [{"id": "a", "text": "Alice runs."}])
        # as if connected to a standby: every new connection is read-only
        engine.db.session_statements.append("SET default_transaction_read_only = on")
        assert engine.db.engine is not None
        await engine.db.engine.dispose()
        for call in (engine.retain(bank, [{"id": "b", "text": "Bob swims."}]), engine.forget(bank, ["a"]),
                     engine.delete_bank(bank)):
            with pytest.raises(DatabaseError, match="read-only.*HINDSIGHT_API_DATABASE_URL at a writable primary"):
                await call
        assert (await engine.recall(bank, "Alice"))["results"]  # reads still work
        engine.db.session_statements.pop()
        await engine.db.engine.dispose()
        assert await engine.delete_bank(bank)
