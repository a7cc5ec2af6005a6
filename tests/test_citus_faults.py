"""Citus: a worker lost under load, and back.

The HTTP service runs on the coordinator; clients retain (a few memories, or enough for COPY and a
two-phase commit), recall (through the bank's alias) and rename banks on both workers while one worker
is killed (SIGKILL of all its processes, as a crash leaves it) and, a while later, started again on the
same port:

- banks on the other worker answer 200 throughout;
- banks on the lost worker answer 503 ``database_unavailable`` with Retry-After, never 500;
- once the worker is back, every bank answers 200 again, the service never restarted;
- every retain batch is whole or absent, and a batch answered 200 is whole.

The figures (requests by status, latencies, seconds until the lost banks answer again) are printed.

It needs a cluster this run starts (``nox -s 'tests(citus)'``): a cluster given by URL has no worker
the test may kill, and it skips.
"""

from __future__ import annotations

import collections
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.store.citus import DISTRIBUTED
from hindsight_recall.testing.service import ServerThread

#: set by tests(citus): a missing cluster fails the run instead of skipping
REQUIRED_ENV = "HINDSIGHT_TEST_CITUS"
#: clients at work, each with one bank on either worker
CLIENTS = 4
#: what the clients ask, in turn
KINDS = ("retain", "recall", "rename")
#: memories per retain request: a few (written by array inserts), or past ARRAY_MAX_ROWS (by COPY, which
#: Citus commits in two phases)
SIZES = (5, 40)
#: seconds of load before the kill, with the worker away, and after it is back
BEFORE, AWAY, AFTER = 3.0, 10.0, 3.0
#: seconds the banks of the lost worker have to answer 200 again once it runs
RECOVERY_LIMIT = 90.0


@dataclass(frozen=True)
class Answer:
    """One request and how it ended."""

    bank: str
    kind: str
    started: float
    ended: float
    status: int
    code: str
    retry_after: str | None
    #: for a retain, the text prefix its memories share, and how many it sent
    batch: str = ""
    size: int = 0


def _worker_of(url: str, schema: str, bank: str) -> int:
    """The port of the worker holding ``bank``'s shard of every bank-keyed table (one worker: colocated)."""
    with psycopg.connect(url, autocommit=True, options=f'-c search_path="{schema}",public') as conn:
        rows = conn.execute(
            "SELECT DISTINCT s.nodeport FROM unnest(CAST(%s AS text[])) AS t(name) JOIN citus_shards s ON s.shardid = "
            "get_shard_id_for_distribution_column(CAST(t.name AS regclass), CAST(%s AS text))",
            (list(DISTRIBUTED), bank)).fetchall()
    assert len(rows) == 1, f"{bank}: shards on {rows}"
    return int(rows[0][0])


def _batch_sizes(url: str, schema: str, banks: list[str]) -> dict[str, int]:
    """How many memories each retain batch into ``banks`` left (a memory's text starts with its batch's tag)."""
    with psycopg.connect(url, autocommit=True, options=f'-c search_path="{schema}",public') as conn:
        rows = conn.execute("SELECT split_part(text, ' ', 1), count(*) FROM memory_units WHERE bank_id = ANY(%s) "
                            "GROUP BY 1", (banks,)).fetchall()
    return collections.defaultdict(int, {tag: int(n) for tag, n in rows})


def _write_under_way(worker: Any, timeout: float = 30) -> str:
    """Wait until a write into a bank's shard runs on ``worker`` (so that the kill lands inside a
    transaction); the statement seen, or "" when none was seen in time."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(worker.url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT query FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND xact_start IS NOT NULL "
                "AND state <> 'idle' AND query ~* '^\\s*(insert|copy|update|delete|prepare transaction)' LIMIT 1"
            ).fetchone()
            if row is not None:
                return str(row[0])
            time.sleep(0.002)
    return ""


def durable(server: Any, on: bool) -> None:
    """Make the server's commits wait for their WAL (or not, as the test servers run)."""
    server.execute("ALTER SYSTEM SET synchronous_commit = on" if on else "ALTER SYSTEM RESET synchronous_commit",
                   "SELECT pg_reload_conf()")


def _items(tag: str, size: int) -> list[dict[str, Any]]:
    topics = ("harbour", "lighthouse", "ferry", "reef", "beacon")
    return [{"content": f"{tag} note {i}: the {topics[i % 5]} keeper logged vessel {i * 13}."} for i in range(size)]


def alias_of(bank: str) -> str:
    return f"{bank}-alias"


def _ask(client: httpx.Client, bank: str, kind: str, tag: str = "", size: int = SIZES[0]) -> Answer:
    """A retain (``tag`` starts its memories' texts), a recall (through the bank's alias) or a rename of
    the bank (a bank-level write, after which the service reloads its alias map)."""
    started = time.monotonic()
    if kind == "retain":
        reply = client.post(f"/{bank}/memories", json={"items": _items(tag, size)})
    elif kind == "recall":
        reply = client.post(f"/{alias_of(bank)}/memories/recall",
                            json={"query": "Which vessel did the harbour keeper log?"})
    else:
        reply = client.put(f"/{bank}", json={"name": tag})
    code = "" if reply.status_code == 200 else str(reply.json().get("code", ""))
    return Answer(bank, kind, started, time.monotonic(), reply.status_code, code, reply.headers.get("Retry-After"),
                  tag, size if kind == "retain" else 0)


def test_a_lost_worker_takes_only_its_banks_away_and_they_come_back(
    citus_workers: list[Any], serve: Callable[..., ServerThread]
) -> None:
    service = serve()
    if not service.engine.db.citus:
        reason = "needs a Citus coordinator (nox -s 'tests(citus)')"
        if os.environ.get(REQUIRED_ENV, "") not in ("", "0"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    url, schema = service.engine.db.url, service.engine.settings.database_schema
    run = uuid.uuid4().hex[:8]
    base = f"{service.url}/v1/default/banks"
    on: dict[int, list[str]] = collections.defaultdict(list)
    with httpx.Client(base_url=base, headers=EXTRAS, timeout=120) as http:
        number = 0
        while min((len(on[w.port]) for w in citus_workers[:2]), default=0) < CLIENTS:
            bank = f"lost-{run}-{number}"
            number += 1
            answer = _ask(http, bank, "retain", f"{bank}/seed")
            assert answer.status == 200, answer
            assert http.post(f"/{bank}/aliases", json={"alias": alias_of(bank)}).status_code == 201
            on[_worker_of(url, schema, bank)].append(bank)
        kept_worker, lost_worker = citus_workers[0], citus_workers[1]
        # the throwaway servers commit without waiting for their WAL to be written, which a killed process
        # loses: durable commits here, as on any production server, or an acknowledged retain could vanish
        durable(lost_worker, True)
        kept, lost = on[kept_worker.port][:CLIENTS], on[lost_worker.port][:CLIENTS]

        answers: list[Answer] = []
        done = threading.Event()
        away = False
        deadline = time.monotonic() + BEFORE + AWAY + RECOVERY_LIMIT + AFTER + 120  # bounded whatever happens

        def client(number: int) -> None:
            banks, turn = (kept[number], lost[number]), 0
            with httpx.Client(base_url=base, headers=EXTRAS, timeout=120) as mine:
                while not done.is_set() and time.monotonic() < deadline:
                    bank = banks[turn % 2]
                    kind = KINDS[turn // 2 % len(KINDS)]
                    size = SIZES[turn // (2 * len(KINDS)) % len(SIZES)]
                    answers.append(_ask(mine, bank, kind, f"{bank}/{number}-{turn}", size))
                    turn += 1

        threads = [threading.Thread(target=client, args=(n,), name=f"client-{n}") for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(BEFORE)
            caught = _write_under_way(lost_worker)
            away = True
            lost_worker.kill()
            killed = time.monotonic()
            time.sleep(AWAY)
            restarting = time.monotonic()
            lost_worker.start()
            away, restarted = False, time.monotonic()
            # back when every bank of the lost worker recalls and retains (the clients' requests, or ours)
            recovered = None
            while recovered is None and time.monotonic() < restarted + RECOVERY_LIMIT:
                probe = time.monotonic()
                if all(_ask(http, b, k, f"{b}/probe-{probe}").status == 200 for b in lost for k in KINDS):
                    recovered = time.monotonic()
                else:
                    time.sleep(0.5)
            time.sleep(AFTER)
        finally:
            done.set()
            for thread in threads:
                thread.join()
            if away:  # the cluster outlives the test: its worker runs again
                lost_worker.start()
            durable(lost_worker, False)

    statuses = collections.Counter(a.status for a in answers)
    by_side = {side: collections.Counter((a.kind, a.status) for a in answers if a.bank in banks)
               for side, banks in (("kept", kept), ("lost", lost))}
    recovery = None if recovered is None else round(recovered - restarting, 2)

    def median(found: list[Answer]) -> str:
        return f"{statistics.median(a.ended - a.started for a in found):.2f} s" if found else "-"

    print(f"\nlost worker: {len(answers)} requests, by status {dict(statuses)}; kept banks {dict(by_side['kept'])}, "
          f"lost banks {dict(by_side['lost'])}; median seconds, kept banks before the kill "
          f"{median([a for a in answers if a.bank in kept and a.ended < killed])}, while away "
          f"{median([a for a in answers if a.bank in kept and killed < a.started < restarting])}, a lost bank's 503 "
          f"{median([a for a in answers if a.status == 503])}; the worker's start took {restarted - restarting:.2f} s, "
          f"and all its banks answered 200 {recovery} s after the start began; COPY retains "
          f"{collections.Counter(a.status for a in answers if a.size > SIZES[0])}; killed during {caught[:60]!r}")

    assert set(statuses) <= {200, 503}, f"answers other than 200 and 503: {statuses}"
    unavailable = [a for a in answers if a.status == 503]
    assert all(a.code == "database_unavailable" and a.retry_after for a in unavailable), unavailable[:3]
    while_away = [a for a in answers if a.started > killed and a.ended < restarting]
    assert [a for a in while_away if a.bank in kept and a.status != 200] == [], "a bank on the other worker failed"
    away_lost = [a for a in while_away if a.bank in lost]
    assert away_lost and all(a.status == 503 for a in away_lost), collections.Counter(a.status for a in away_lost)
    assert all(a.status == 200 for a in answers if a.started > restarting and a.bank in kept)
    assert recovered is not None, f"the lost worker's banks did not answer 200 within {RECOVERY_LIMIT:g} s"
    late = [a for a in answers if a.started > recovered]
    assert late and all(a.status == 200 for a in late), collections.Counter((a.kind, a.status) for a in late)

    retains = [a for a in answers if a.kind == "retain"]
    sizes = _batch_sizes(url, schema, kept + lost)
    half = {a.batch: (sizes[a.batch], a.size) for a in retains if sizes[a.batch] not in (0, a.size)}
    assert not half, f"half-written retains: {half}"
    lost_acks = [a.batch for a in retains if a.status == 200 and sizes[a.batch] != a.size]
    assert not lost_acks, f"retains answered 200 but not stored: {lost_acks}"
