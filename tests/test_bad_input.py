"""Bad input fails early with a clear error: in the library a specific exception, in the CLI one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hindsight_recall import Engine
from hindsight_recall.cli import main
from hindsight_recall.errors import BankNotFound, DatabaseError, InvalidRequest, PoolExhausted, RetainError
from hindsight_recall.settings import Settings
from hindsight_recall.store import banks
from hindsight_recall.types import Memory


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
