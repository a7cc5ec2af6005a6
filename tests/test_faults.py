"""Faults: a crashed embedded server, errors worth a retry and those that are not, killed processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hindsight_recall import DatabaseError, Engine
from hindsight_recall import engine as engine_module
from hindsight_recall.settings import Settings
from hindsight_recall.store import embedded
from hindsight_recall.store.db import is_retryable
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

pytestmark = pytest.mark.slow


async def test_engine_restarts_a_killed_embedded_server(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    data_dir = tmp_path / "crash" / "data"
    async with Engine(make_settings(embedded_data_dir=data_dir, database_url=None)) as eng:
        await eng.retain("b", [{"id": "a", "text": "Alice works at Helios Robotics in Munich."}])
        assert (await eng.recall("b", "Where does Alice work?"))["results"]
        before = embedded.status(data_dir)
        assert before is not None
        os.kill(before.pid, signal.SIGKILL)
        body = await eng.recall("b", "Where does Alice work?")
        assert [r["id"] for r in body["results"]] == ["a"]
        after = embedded.status(data_dir)
        assert after is not None and after.pid != before.pid
    assert embedded.status(data_dir) is None  # the engine stopped the server it restarted


async def test_retain_after_a_crash_restarts_the_server(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    data_dir = tmp_path / "crash-retain" / "data"
    async with Engine(make_settings(embedded_data_dir=data_dir, database_url=None)) as eng:
        await eng.retain("b", [{"id": "a", "text": "Alice works at Helios Robotics in Munich."}])
        os.kill(embedded.status(data_dir).pid, signal.SIGKILL)  # type: ignore[union-attr]
        await eng.retain("b", [{"id": "b", "text": "Bob cooks pasta."}])
        assert {r["id"] for r in (await eng.recall("b", "Alice Bob"))["results"]} == {"a", "b"}


async def _real_error(eng: Engine, sql: str) -> DBAPIError:
    try:
        async with eng.db.connect() as conn:
            await conn.execute(text(sql))
    except DBAPIError as exc:
        return exc
    raise AssertionError(f"{sql} did not fail")


def _raise_code(code: str) -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{code}'; END $$"


async def test_only_lost_connections_and_serialization_failures_are_retryable(engine: Engine) -> None:
    for code in ("40001", "40P01", "08006", "57P01"):
        assert is_retryable(await _real_error(engine, _raise_code(code))), code
    for sql in ("SELECT 1/0", _raise_code("54000"), _raise_code("53200"), "SELECT repeat('x', 2000000)::tsvector",
                "SELECT * FROM no_such_table"):
        assert not is_retryable(await _real_error(engine, sql)), sql


@pytest.mark.parametrize(("code", "calls"), [("54000", 1), ("22012", 1), ("40001", 2), ("40P01", 2)])
async def test_recall_retries_only_what_may_succeed(engine: Engine, alice: str, monkeypatch: pytest.MonkeyPatch,
                                                    code: str, calls: int) -> None:
    error = await _real_error(engine, _raise_code(code))
    real = engine_module.run_recall
    seen: list[int] = []

    async def failing_once(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.append(1)
        if len(seen) == 1:
            raise error
        return await real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "run_recall", failing_once)
    monkeypatch.setattr(engine_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))
    if calls == 1:
        with pytest.raises(DatabaseError, match="recall failed in the database: injected") as info:
            await engine.recall(alice, "Alice")
        assert isinstance(info.value.__cause__, DBAPIError)  # the driver's error stays reachable
    else:
        assert (await engine.recall(alice, "Alice"))["results"]
    assert len(seen) == calls


_START_AND_HANG = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from hindsight_recall.store import embedded
    print(embedded.start(Path(sys.argv[1])), flush=True)
    time.sleep(600)
""")


def _start_in_a_process_then_kill_it(data_dir: Path) -> int:
    proc = subprocess.Popen([sys.executable, "-c", _START_AND_HANG, str(data_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("postgresql://")
    proc.kill()
    proc.wait()
    found = embedded.status(data_dir)
    assert found is not None, "the killed process's server should still run"
    return found.pid


def test_next_user_adopts_and_stops_a_stale_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "stale" / "data"
    pid = _start_in_a_process_then_kill_it(data_dir)
    url = embedded.start(data_dir)
    try:
        assert embedded.status(data_dir).pid == pid  # type: ignore[union-attr]  # reused, not a second server
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        embedded.stop(data_dir)
    assert embedded.status(data_dir) is None  # the dead user was pruned, so the last live one stopped it


def test_cli_server_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "cli" / "data"
    _start_in_a_process_then_kill_it(data_dir)
    env = {**os.environ, "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir)}
    env.pop("HINDSIGHT_API_DATABASE_URL", None)
    run = lambda *a: subprocess.run([sys.executable, "-m", "hindsight_recall.cli", "server", *a],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=120)
    status = run("status")
    assert status.returncode == 0 and "running: pid" in status.stdout and "no live process" in status.stdout
    stopped = run("stop")
    assert stopped.returncode == 0 and "stopped the server" in stopped.stdout, stopped.stderr
    deadline = time.monotonic() + 10
    while embedded.status(data_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert embedded.status(data_dir) is None
    assert "not running" in run("status").stdout


def test_two_commands_on_a_fresh_data_dir_both_start(tmp_path: Path) -> None:
    # a service and its command line starting together: the first start creates the cluster and the
    # database once, the other waits for it (before, one failed on a duplicate pg_database name)
    data_dir = tmp_path / "fresh" / "data"
    env = {**os.environ, "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir)}
    env.pop("HINDSIGHT_API_DATABASE_URL", None)
    command = [sys.executable, "-m", "hindsight_recall.cli", "bank", "list"]
    try:
        procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outcomes = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err for _, err in outcomes]
    finally:
        embedded.stop_server(data_dir)


async def test_retain_waits_for_a_delete_of_its_bank_or_the_delete_waits_for_it(
    engine: Engine, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hindsight_recall.retain import _transaction as ingest

    await engine.retain(bank, [{"id": "a", "text": "Alice runs."}])
    reached, go = asyncio.Event(), asyncio.Event()
    real = ingest.check_references

    async def paused(*args: Any, **kwargs: Any) -> None:  # the retain has its bank and is about to write
        reached.set()
        await go.wait()
        await real(*args, **kwargs)

    monkeypatch.setattr(ingest, "check_references", paused)
    retain = asyncio.create_task(engine.retain(bank, [{"id": "b", "text": "Bob swims."}]))
    await asyncio.wait_for(reached.wait(), 60)
    delete = asyncio.create_task(engine.delete_bank(bank))
    await asyncio.wait({delete}, timeout=1.0)  # before, the delete committed here, under the retain
    go.set()
    stats, deleted = await asyncio.gather(retain, delete)  # before: a raw IntegrityError (foreign key)
    assert stats.memories == 1 and deleted is True
    assert await engine.bank_stats(bank) is None  # the delete came last and took everything


async def test_retain_and_delete_bank_churn_on_one_bank_raise_nothing(engine: Engine, bank: str) -> None:
    for round_ in range(15):
        outcomes = await asyncio.gather(
            engine.retain(bank, [{"id": f"m{round_}", "text": f"Fact number {round_} about Alice."}]),
            engine.delete_bank(bank), engine.retain(bank, [{"id": "x", "text": "Alice again."}]),
            return_exceptions=True,
        )
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        stats = await engine.bank_stats(bank)
        assert stats is None or stats["memories"] in (1, 2)


async def test_a_full_disk_and_a_read_only_data_dir_are_database_errors_saying_what_to_do(
    make_settings: Callable[..., Settings], small_disk: Path, bank: str
) -> None:
    settings = make_settings(embedded_data_dir=small_disk / "pg" / "data", database_url=None)
    async with Engine(settings) as engine:
        await engine.retain(bank, [{"id": "a", "text": "Alice runs."}])
        filler = small_disk / "filler"
        with filler.open("wb") as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 2**20)
                handle.flush()
        # before: a raw OperationalError (could not extend file ... No space left on device)
        with pytest.raises(DatabaseError, match="No space left on device.*disk that holds the database is full"):
            await engine.retain(bank, [{"id": f"m{i}", "text": "Alice runs far. " * 50} for i in range(300)])
        filler.unlink()
        await engine.retain(bank, [{"id": "b", "text": "Bob swims."}])  # with space again, it works again
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    # before: a raw OSError from the lock file beside the data dir
    with pytest.raises(DatabaseError, match=r"Read-only file system.*HINDSIGHT_API_EMBEDDED_DATA_DIR to a writable"):
        async with Engine(settings):
            pass


# ---- kill -9 in the middle of every write path ------------------------------------------------------------

#: trials in this run: one per write path unless HINDSIGHT_FAULT_TRIALS says (``nox -s faults``: 200)
FAULT_TRIALS = int(os.environ.get("HINDSIGHT_FAULT_TRIALS") or 0)
FAULT_SEED = int(os.environ.get("HINDSIGHT_FAULT_SEED") or 37)


def _plan() -> list[tuple[str, int]]:
    """(write path, seed of its kill point) per trial: the paths in turn, the kill points seeded."""
    import random

    from hindsight_recall.testing.faults import PATHS

    rng = random.Random(FAULT_SEED)
    names = sorted(PATHS)
    return [(names[i % len(names)], rng.randrange(1 << 30)) for i in range(FAULT_TRIALS or len(names))]


@pytest.fixture(scope="module")
def fault_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("faults")
    return work


#: write path -> (statements a full run took, its state after): measured once per run on a twin bank
_REFERENCE: dict[str, tuple[int, Any]] = {}


async def _state(engine: Engine, banks: list[str]) -> Any:
    from hindsight_recall.testing.faults import state

    async with engine.db.connect() as conn:
        return await state(conn, banks)


async def _reference(engine: Engine, name: str, work: Path) -> tuple[int, Any]:
    from hindsight_recall.testing.faults import PATHS, count_statements

    if name not in _REFERENCE:
        path, bank = PATHS[name], f"fault-ref-{uuid.uuid4().hex[:10]}"
        params = await path.setup(engine, bank, work)
        seen = [0]
        stop = count_statements(engine, None, seen)
        try:
            await path.write(engine, bank, params)
        finally:
            stop()
        _REFERENCE[name] = (seen[0], await _state(engine, path.banks(bank, params)))
    return _REFERENCE[name]


async def _gone(engine: Engine, application: str) -> None:
    """Wait until the killed driver's server sessions have ended (a statement in flight runs on until it
    notices its client is gone; its locks go with it)."""
    deadline = time.monotonic() + 60
    while True:
        async with engine.db.connect() as conn:
            left = await conn.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a"),
                                     {"a": application})
        if not left:
            return
        assert time.monotonic() < deadline, f"{left} sessions of {application} still run"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("trial", range(len(_plan())))
async def test_kill_9_mid_write_leaves_it_whole_or_absent(engine: Engine, fault_work: Path, trial: int) -> None:
    """A driver process runs the write and SIGKILLs itself before a seeded statement or commit: the bank
    is then as before or as after a full run (after, if the write was acknowledged), with nothing left
    behind; a queued retain, acknowledged when queued, is whole once the queue has run it again."""
    import json
    import random

    from hindsight_recall.testing.faults import PATHS
    from hindsight_recall.testing.snapshot import orphans

    name, seed = _plan()[trial]
    path = PATHS[name]
    statements, new = await _reference(engine, name, fault_work)
    kill_at = random.Random(seed).randint(1, statements + 2)
    bank = f"fault-{trial}-{uuid.uuid4().hex[:8]}"
    params = await path.setup(engine, bank, fault_work)
    banks = path.banks(bank, params)
    old = await _state(engine, banks)
    application = f"fault-{bank}"
    url = engine.db.url + ("&" if "?" in engine.db.url else "?") + f"application_name={application}"
    spec = {"path": name, "url": url, "bank": bank, "params": params, "kill_at": kill_at}
    driver = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hindsight_recall.testing.faults", json.dumps(spec),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    out, err = await asyncio.wait_for(driver.communicate(), 600)
    acked = b'"ack": true' in out
    assert driver.returncode in (0, -signal.SIGKILL), err.decode()[-3000:]
    assert acked == (driver.returncode == 0), (out, err.decode()[-3000:])
    await _gone(engine, application)
    after = await _state(engine, banks)
    where = f"{name}, killed before statement {kill_at} of {statements}, acknowledged: {acked}"
    # a queued retain commits whole documents one chunk at a time: meanwhile each document is all old or all new
    documents_whole = path.finish is not None and all(
        after.get(key) in (old.get(key), new.get(key)) for key in set(old) | set(new) | set(after))
    outcome = ("new" if after == new else "old" if after == old else "whole documents" if documents_whole
               else "half")
    _report(trial=trial, path=name, kill_at=kill_at, statements=statements, acked=acked, outcome=outcome)
    assert outcome != "half", where
    assert outcome == "new" or not acked, where
    if path.finish is not None:  # acknowledged when it was queued: the queue finishes it after the restart
        await path.finish(engine, bank, params)
        assert await _state(engine, banks) == new, where
    async with engine.db.connect() as conn:
        assert await orphans(conn, banks) == [], where
    for each in banks:
        await engine.delete_bank(each)


def _report(**trial: Any) -> None:
    """One JSON line per trial to HINDSIGHT_FAULT_REPORT, when set (``nox -s faults`` sums them up)."""
    import json

    target = os.environ.get("HINDSIGHT_FAULT_REPORT")
    if target:
        with open(target, "a") as handle:
            handle.write(json.dumps(trial) + "\n")


async def test_the_kill_test_sees_a_write_made_in_two_transactions(engine: Engine, fault_work: Path) -> None:
    """The check is not blind: a replace written as a retain and then a forget (two transactions, as the
    HTTP route once did), killed between them, is caught half written."""
    import json

    from hindsight_recall.testing.faults import PATHS, TWO_STEP_REPLACE, count_statements

    bank, twin = (f"fault-two-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for each in (bank, twin):
        await PATHS["replace"].setup(engine, each, fault_work)
    seen = [0]
    stop = count_statements(engine, None, seen)
    await engine.retain(twin, *TWO_STEP_REPLACE.first(twin))  # the first transaction alone
    stop()
    old, half = await _state(engine, [bank]), await _state(engine, [twin])
    application = f"fault-{bank}"
    spec = {"path": "two_step_replace", "url": engine.db.url + ("&" if "?" in engine.db.url else "?") +
            f"application_name={application}", "bank": bank, "params": {}, "kill_at": seen[0] + 1}
    driver = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hindsight_recall.testing.faults", json.dumps(spec), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    await asyncio.wait_for(driver.communicate(), 600)
    assert driver.returncode == -signal.SIGKILL
    await _gone(engine, application)
    after = await _state(engine, [bank])
    assert after != old and after == half  # new memories and stale ones side by side


async def test_a_database_that_is_away_or_restarting_answers_503_not_500(engine: Engine) -> None:
    """A refused connection carries no SQL state and a server starting up answers 57P03: both are the
    database's fault, answered 503 ``database_unavailable`` with Retry-After, never 500."""
    from hindsight_recall.service.errors import classify
    from hindsight_recall.testing.service import free_port

    try:
        await psycopg.AsyncConnection.connect(f"postgresql://x@127.0.0.1:{free_port()}/x", connect_timeout=2)
    except psycopg.OperationalError as exc:
        refused: BaseException = exc
    else:
        raise AssertionError("a connection to a closed port succeeded")
    injected = [await _real_error(engine, _raise_code(code)) for code in ("57P03", "57P01", "08006")]
    for exc in (refused, *injected):
        error = classify(exc)
        assert (error.status, error.code) == (503, "database_unavailable"), exc
        assert error.headers == {"Retry-After": "5"}
    assert classify(await _real_error(engine, _raise_code("22012"))).status == 500  # the request's own fault


def _raise(code: str, message: str) -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{code}'; END $$"


#: what a Citus coordinator says, with no connection SQLSTATE, when a worker it needed is gone
CITUS_LOST_WORKER = [
    ("XX000", "failure on connection marked as essential: 127.0.0.1:9701"),
    ("XX000", "could not connect to any active placements"),
    ("XX000", "could not commit transaction for shard 102008 on at least one active node"),
    ("58030", "failed to complete COPY on 127.0.0.1:9701"),
]


async def test_a_lost_citus_worker_answers_503_and_is_retried_but_other_internal_errors_do_not(engine: Engine) -> None:
    """Citus names a worker it could not reach in its own words, as an internal error (XX000) or, for a
    COPY that broke off, an I/O error (58030): the database's fault, retried, then answered 503
    ``database_unavailable`` with Retry-After and a hint naming the workers. Other internal and I/O
    errors stay the server's own (500) and final."""
    from hindsight_recall.service.errors import classify
    from hindsight_recall.store.db import database_error

    for code, message in CITUS_LOST_WORKER:
        exc = await _real_error(engine, _raise(code, message))
        error = classify(exc)
        assert (error.status, error.code, error.headers) == (503, "database_unavailable", {"Retry-After": "5"}), message
        assert is_retryable(exc), message
        assert "Citus worker" in str(database_error("recall", exc)), message
    for code, message in [("XX000", "cache lookup failed for relation 16384"), ("XX000", "injected"),
                          ("XX000", "note: failure on connection marked as essential: 127.0.0.1:9701"),
                          ("58030", "could not write to file base/5/16384: No space left on device")]:
        exc = await _real_error(engine, _raise(code, message))
        assert classify(exc).status == 500, message
        assert not is_retryable(exc), message


def test_recalls_while_the_postmaster_is_killed_answer_200_or_503(make_settings: Callable[..., Settings],
                                                                   tmp_path: Path) -> None:
    """kill -9 of the embedded server during recalls: every answer is 200 or 503 with Retry-After, and
    recalls succeed again once the service has restarted it."""
    import threading

    import httpx
    from hindsight_recall.service.wire import EXTRAS
    from hindsight_recall.testing.service import ServerThread

    data_dir = tmp_path / "killed" / "data"
    with ServerThread(make_settings(embedded_data_dir=data_dir, database_url=None)) as server, \
            httpx.Client(base_url=f"{server.url}/v1/default/banks/k", headers=EXTRAS, timeout=60) as http:
        http.post("/memories", json={"items": [{"content": "Alice works at Helios Robotics in Munich."}]})
        answers: list[tuple[int, str, str | None]] = []
        done = threading.Event()

        def recalls() -> None:
            with httpx.Client(base_url=http.base_url, headers=EXTRAS, timeout=60) as client:
                while not done.is_set():
                    reply = client.post("/memories/recall", json={"query": "Where does Alice work?"})
                    code = reply.json().get("code", "") if reply.status_code != 200 else ""
                    answers.append((reply.status_code, code, reply.headers.get("Retry-After")))

        workers = [threading.Thread(target=recalls) for _ in range(4)]
        for w in workers:
            w.start()
        try:
            for _ in range(3):
                time.sleep(0.5)
                killed = embedded.status(data_dir).pid  # type: ignore[union-attr]
                os.kill(killed, signal.SIGKILL)
                deadline = time.monotonic() + 60
                while getattr(embedded.status(data_dir), "pid", killed) == killed:  # until the service restarts it
                    assert time.monotonic() < deadline, "the service did not restart the killed server"
                    time.sleep(0.1)
        finally:
            time.sleep(1.0)
            done.set()
            for w in workers:
                w.join()
        assert answers and {(s, c) for s, c, _ in answers} <= {(200, ""), (503, "database_unavailable")}, \
            sorted({(s, c) for s, c, _ in answers})
        assert all(after for s, _, after in answers if s == 503)
        deadline = time.monotonic() + 60
        while http.post("/memories/recall", json={"query": "Where does Alice work?"}).status_code != 200:
            assert time.monotonic() < deadline, "recalls did not come back after the restart"
            time.sleep(0.2)


def test_ready_says_the_database_is_away_and_a_probe_brings_it_back(make_settings: Callable[..., Settings],
                                                                    tmp_path: Path) -> None:
    """``/health/ready`` asks the database: stopped under the service, the probe answers 503 naming it,
    restarts the embedded server, and a later probe answers ready."""
    import httpx
    from hindsight_recall.testing.service import ServerThread

    data_dir = tmp_path / "away" / "data"
    with ServerThread(make_settings(embedded_data_dir=data_dir, database_url=None)) as server:
        ready = httpx.get(f"{server.url}/health/ready", timeout=30)
        assert (ready.status_code, ready.json()) == (200, {"status": "healthy", "database": "connected"})
        assert embedded.stop_server(data_dir)
        away = httpx.get(f"{server.url}/health/ready", timeout=30)
        assert away.status_code == 503 and away.headers["Retry-After"], away.text
        assert away.json()["database"] == "disconnected" and away.json()["reason"]
        deadline = time.monotonic() + 60
        while httpx.get(f"{server.url}/health/ready", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the database did not come back"
            time.sleep(0.2)
        assert embedded.status(data_dir) is not None
