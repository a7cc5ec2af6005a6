"""Security: credentials never printed, a private embedded server, values always bound in SQL."""

from __future__ import annotations

import json
import logging
import os
import pwd
import stat
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from hindsight_recall import Engine
from hindsight_recall.errors import ConfigError, DatabaseError
from hindsight_recall.settings import Settings, load_settings, redact
from hindsight_recall.store import embedded, traverse
from sqlalchemy.engine import make_url

SECRET = "Zq9-never-print-me"


def _everything(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)


def test_redact_hides_passwords_in_urls_and_conninfo() -> None:
    for raw in (f"postgresql://me:{SECRET}@db:5432/x", f"postgres://:{SECRET}@h/x", f"postgresql://me:a@{SECRET}@h/x",
                f"host=h password={SECRET} dbname=x", f"'postgresql+psycopg://me:{SECRET}@h'"):
        assert SECRET not in redact(raw), raw
    assert redact("postgresql://me@h/x") == "postgresql://me@h/x"


def test_settings_errors_and_repr_hide_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(database_url=f"postgresql://me:{SECRET}@h/x", db_pool_min_size=f"postgresql://me:{SECRET}@h/x")
    assert SECRET not in _everything(info.value)
    settings = load_settings(database_url=f"postgresql://me:{SECRET}@h/x")
    assert SECRET not in repr(settings) and SECRET not in str(settings)


@pytest.mark.parametrize("url", [f"postgresql://me:{SECRET}@127.0.0.1:1/x", f"postgresql://me:{SECRET}@[bad/x",
                                 f"mysql://me:{SECRET}@h/x"])
async def test_connection_errors_hide_the_password(make_settings: Callable[..., Settings], url: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG), pytest.raises(DatabaseError) as info:
        await Engine(make_settings(database_url=url, db_acquire_timeout=2)).open()
    assert SECRET not in _everything(info.value) and SECRET not in caplog.text


async def test_traces_and_logs_of_a_working_url_hide_the_password(
        engine: Engine, make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture) -> None:
    if not engine.db.embedded:
        pytest.skip("needs the embedded test server (peer authentication ignores the password)")
    url = make_url(engine.db.url).set(password=SECRET).render_as_string(hide_password=False)
    with caplog.at_level(logging.DEBUG):
        async with Engine(make_settings(database_url=url)) as eng:
            await eng.retain("secret-bank", [{"id": "a", "text": "Alice works at Helios."}])
            body = await eng.recall("secret-bank", "Alice", trace=True)
    assert body["results"] and SECRET not in json.dumps(body, default=str) and SECRET not in caplog.text


def test_cli_never_prints_the_password(tmp_path: Path) -> None:
    env = {**os.environ, "HINDSIGHT_API_DATABASE_URL": f"postgresql://me:{SECRET}@127.0.0.1:1/x",
           "HINDSIGHT_API_DB_ACQUIRE_TIMEOUT": "2", "HINDSIGHT_API_RERANKER_PROVIDER": "rrf"}
    for args in (["-v", "recall", "x", "--bank", "b"], ["recall", "x", "--bank", "b", "--budget", "bad"]):
        result = subprocess.run([sys.executable, "-m", "hindsight_recall.cli", *args], capture_output=True, text=True,
                                env=env, timeout=300)
        assert result.returncode != 0 and SECRET not in result.stdout + result.stderr


# -- the embedded server ----------------------------------------------------------------------------

def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _can_enter(user: str, folder: Path) -> bool:
    return subprocess.run(["test", "-x", str(folder)], user=user, cwd="/", timeout=60).returncode == 0


def test_embedded_server_is_private(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    inner = private / ("a-long-directory-name-" * 4)  # long enough to move the socket out of the data dir
    inner.mkdir(mode=0o700)
    inner.chmod(0o700)
    data_dir = inner / "data"
    others = {p: _mode(p) & 0o007 for p in (tmp_path, private, inner)}
    url = embedded.start(data_dir)
    try:
        assert {p: _mode(p) & 0o007 for p in others} == others  # no parent was opened to everyone
        found = embedded.status(data_dir)
        assert found is not None
        owner = data_dir.stat().st_uid
        assert _mode(data_dir) == 0o700
        assert found.socket_dir != data_dir and _mode(found.socket_dir) == 0o700
        assert found.socket_dir.stat().st_uid == owner
        hba = [line for line in (data_dir / "pg_hba.conf").read_text().splitlines() if not line.startswith("#")]
        assert hba == ["local all all peer map=hindsight"]
        assert _mode(data_dir / "pg_hba.conf") == 0o600
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
            assert conn.execute("SHOW password_encryption").fetchone() == ("scram-sha-256",)
            # The checkpointer writes global/pg_control by its absolute path, long after the start.
            conn.execute("CHECKPOINT")
            assert conn.execute("SELECT 1").fetchone() == (1,)
        if os.geteuid() == 0:
            assert pwd.getpwuid(owner).pw_name == embedded.SERVER_USER
            assert _can_enter(embedded.SERVER_USER, inner) and not _can_enter("nobody", private)
            other = subprocess.run(
                [str(embedded._bin_dir() / "psql"), "-w", "-d", url, "-c", "SELECT 1"],
                user="nobody", cwd="/", capture_output=True, text=True, timeout=60,
            )
            assert other.returncode != 0 and ("Permission denied" in other.stderr or "authentication" in other.stderr)
    finally:
        embedded.stop(data_dir)


def test_granting_traverse_names_one_user_and_keeps_every_other_entry(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    folder.chmod(0o750)
    traverse.grant_traverse(folder, 4242)
    entries = traverse.read_acl(folder)
    assert traverse.allows_traverse(entries, 4242) and not traverse.allows_traverse(entries, 4243)
    assert entries[(traverse._USER_OBJ, traverse._NO_ID)] == 7
    assert entries[(traverse._GROUP_OBJ, traverse._NO_ID)] == 5  # the group keeps r-x, no more
    assert entries[(traverse._OTHER, traverse._NO_ID)] == 0
    assert _mode(folder) == 0o750  # the mask shows in the group bits: r-x, as before
    raw = os.getxattr(folder, "system.posix_acl_access")
    traverse.grant_traverse(folder, 4242)
    assert os.getxattr(folder, "system.posix_acl_access") == raw  # granting twice changes nothing
    traverse.grant_traverse(folder, 4243)
    both = traverse.read_acl(folder)
    assert traverse.allows_traverse(both, 4242) and traverse.allows_traverse(both, 4243)


def test_a_folder_without_acls_is_read_from_its_mode_and_refused_with_a_fix(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a ramfs, whose folders keep no ACLs, and runs the server as its own user")
    mount = tmp_path / "ramfs"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a ramfs here: {made.stderr.decode().strip()}")
    try:
        private = mount / "private"
        private.mkdir(mode=0o700)
        private.chmod(0o700)
        assert traverse.read_acl(private)[(traverse._OTHER, traverse._NO_ID)] == 0
        with pytest.raises(traverse.Unsupported):
            traverse.grant_traverse(private, 4242)
        with pytest.raises(DatabaseError, match=r"not traversable.*chmod o\+x.*EMBEDDED_DATA_DIR"):
            embedded.start(private / "data")
        assert not (private / "data").exists() and _mode(private) == 0o700
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_server_settings_are_sized_and_overridable(tmp_path: Path) -> None:
    sized = embedded.sized_settings(24 * 2**30)
    assert sized == {"shared_buffers": "4096MB", "effective_cache_size": "12288MB", "work_mem": "48MB",
                     "maintenance_work_mem": "1536MB", "random_page_cost": "1.1"}
    assert embedded.sized_settings(2 * 2**30)["shared_buffers"] == "512MB"
    settings = load_settings(embedded_data_dir=tmp_path / "data",
                             embedded_server_settings="shared_buffers=192MB, work_mem=7MB")
    assert settings.server_settings()["work_mem"] == "7MB"
    with pytest.raises(ConfigError, match="EMBEDDED_SERVER_SETTINGS"):
        load_settings(embedded_server_settings="shared_buffers")


async def test_embedded_server_runs_with_the_settings(tmp_path: Path) -> None:
    settings = load_settings(embedded_data_dir=tmp_path / "data", reranker_provider="rrf",
                             embedded_server_settings="shared_buffers=192MB,work_mem=7MB,plan_cache_mode=force_custom_plan")
    async with Engine(settings) as eng, eng.db.connect() as conn:
        shown = {name: (await conn.exec_driver_sql(f"SHOW {name}")).scalar()
                 for name in ("shared_buffers", "work_mem", "maintenance_work_mem", "effective_cache_size", "jit",
                              "plan_cache_mode")}
    assert shown["shared_buffers"] == "192MB" and shown["work_mem"] == "7MB" and shown["jit"] == "off"
    assert shown["plan_cache_mode"] == "force_custom_plan"  # the server's own, not overridden per session
    assert shown["maintenance_work_mem"] != "64MB" and shown["effective_cache_size"] != "4GB"  # not the defaults


async def _database_with(engine: Engine, name: str, *settings: str) -> str:
    """The URL of database ``name`` on the embedded test server, made once, with each ``ALTER DATABASE SET``."""
    if not engine.db.embedded:
        pytest.skip("needs the embedded test server")
    await engine.db.recover()  # the test connects on its own: make sure the shared server is up
    url = make_url(engine.db.url)
    with psycopg.connect(url.set(database="postgres").render_as_string(hide_password=False), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f"CREATE DATABASE {name}")
            for setting in settings:
                conn.execute(f"ALTER DATABASE {name} SET {setting}")
    return url.set(database=name).render_as_string(hide_password=False)


async def test_times_are_utc_whatever_the_servers_time_zone(engine: Engine,
                                                             make_settings: Callable[..., Settings]) -> None:
    """A database whose TimeZone is New York's answers the same times, and reads the same dates, as any other."""
    elsewhere = await _database_with(engine, "tz_new_york", "TimeZone = 'America/New_York'")
    async with Engine(make_settings(database_url=elsewhere)) as eng:
        async with eng.db.connect() as conn:
            assert (await conn.exec_driver_sql("SHOW TimeZone")).scalar() == "UTC"
            # PostgreSQL's default: statements run often keep a generic plan (the server's choice)
            assert (await conn.exec_driver_sql("SHOW plan_cache_mode")).scalar() == "auto"
        await eng.retain("tz", [{"id": "late", "text": "The night train left Boston at half past eleven.",
                                 "occurred_start": "2024-03-10T23:30:00Z"}])
        body = await eng.recall("tz", "When did the night train leave on March 10, 2024?")
        assert [(r["id"], r["occurred_start"]) for r in body["results"]] == [("late", "2024-03-10T23:30:00+00:00")]


# -- values are bound, never formatted into SQL ---------------------------------------------------

async def test_bank_names_survive_standard_conforming_strings_off(engine: Engine,
                                                                  make_settings: Callable[..., Settings]) -> None:
    off = await _database_with(engine, "scs_off", "standard_conforming_strings = off", "escape_string_warning = off")
    async with Engine(make_settings(database_url=off)) as eng:
        async with eng.db.connect() as conn:
            assert (await conn.exec_driver_sql("SHOW standard_conforming_strings")).scalar() == "off"
        for bank in ("back\\slash", "it's", "a\\'; DROP TABLE banks; --", 'q"\\\\x'):
            await eng.retain(bank, [{"id": "a", "text": f"The code word of {bank} is pineapple."}])
            body = await eng.recall(bank, "code word pineapple")
            assert [r["text"] for r in body["results"]] == [f"The code word of {bank} is pineapple."]
