"""Async operations over HTTP: how fast an ``async`` retain answers and completes, and two ``serve``
processes draining one queue.

``python -m hindsight_recall.bench.ops [--items 10000] [--json-out ops.json]``:

1. starts an embedded PostgreSQL in a work folder (or uses ``HINDSIGHT_API_DATABASE_URL``) and
   ``hindsight-recall serve`` on it as its own process;
2. **sync**: retains ``--items`` items synchronously, in requests of ``--sync-batch`` items (at most
   SERVICE_MAX_SYNC_RETAIN_ITEMS), into a new bank: items per second;
3. **async**: retains ``--items`` items in one ``async: true`` request into another new bank: the
   seconds until the answer, and the items per second until the operation is completed;
4. **two servers**: starts a second ``serve`` on the same database, queues ``--operations`` small
   retains over ``--banks`` banks through both, waits until all are completed, and counts how many
   times each operation was taken (``attempts``: 1 each when none ran twice) and by which server;
5. prints the numbers and writes them as JSON, with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

#: asks the service for its own fields besides upstream's (docs/service.md): each operation's ``attempts``
EXTRAS = {"X-Hindsight-Recall-Extras": "1"}


def _items(n: int, tag: str) -> list[dict[str, Any]]:
    return [{"content": f"{tag} note {i}: the courier left parcel {i} at gate {i % 97} before noon."}
            for i in range(n)]


def _wait(http: httpx.Client, bank_id: str, operation_id: str, timeout: float = 3600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        response = http.get(f"/v1/default/banks/{bank_id}/operations/{operation_id}")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        if found["status"] in ("completed", "failed", "cancelled"):
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"operation {operation_id} still {found['status']}")
        time.sleep(0.25)


def bench_sync(http: httpx.Client, n: int, batch: int) -> dict[str, Any]:
    bank_id = f"bench-sync-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    for start in range(0, n, batch):
        response = http.post(f"/v1/default/banks/{bank_id}/memories",
                             json={"items": _items(min(batch, n - start), f"sync{start}")})
        response.raise_for_status()
    seconds = time.perf_counter() - started
    return {"items": n, "batch": batch, "seconds": round(seconds, 3), "items_per_second": round(n / seconds, 1)}


def bench_async(http: httpx.Client, n: int) -> dict[str, Any]:
    bank_id = f"bench-async-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"items": _items(n, "async"), "async": True})
    started = time.perf_counter()
    response = http.post(f"/v1/default/banks/{bank_id}/memories", content=body,
                         headers={"content-type": "application/json"})
    answered = time.perf_counter() - started
    response.raise_for_status()
    done = _wait(http, bank_id, response.json()["operation_id"])
    seconds = time.perf_counter() - started
    stored = http.get(f"/v1/default/banks/{bank_id}/memories/list", params={"limit": 1}).json()["total"]
    return {"items": n, "request_bytes": len(body), "answer_seconds": round(answered, 3),
            "complete_seconds": round(seconds, 3), "items_per_second": round(n / seconds, 1),
            "status": done["status"], "stored": stored}


def bench_two_servers(clients: list[httpx.Client], pids: list[int], operations: int, banks: int,
                      per_operation: int) -> dict[str, Any]:
    names = [f"bench-queue-{uuid.uuid4().hex[:6]}-{b}" for b in range(banks)]
    queued = []
    started = time.perf_counter()
    for number in range(operations):
        bank_id = names[number % banks]
        response = clients[number % 2].post(f"/v1/default/banks/{bank_id}/memories",
                                            json={"items": _items(per_operation, f"q{number}"), "async": True})
        response.raise_for_status()
        queued.append((bank_id, response.json()["operation_id"]))
    ended = [_wait(clients[0], b, o) for b, o in queued]
    seconds = time.perf_counter() - started
    attempts: dict[int, int] = {}
    by_server: dict[str, int] = {}
    for op in ended:
        attempts[op["attempts"]] = attempts.get(op["attempts"], 0) + 1
        pid = op["result_metadata"]["worker_id"].split(":")[1]
        by_server[pid] = by_server.get(pid, 0) + 1
    stored = sum(clients[1].get(f"/v1/default/banks/{b}/memories/list", params={"limit": 1}).json()["total"]
                 for b in names)
    return {"operations": operations, "banks": banks, "items_per_operation": per_operation,
            "seconds": round(seconds, 3), "completed": sum(op["status"] == "completed" for op in ended),
            "operations_by_attempts": {str(k): v for k, v in sorted(attempts.items())},
            "ran_twice": sum(v for k, v in attempts.items() if k > 1),
            "operations_by_server": {("first" if p == str(pids[0]) else "second"): v for p, v in by_server.items()},
            "stored": stored, "expected": operations * per_operation}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--sync-batch", type=int, default=2000)
    parser.add_argument("--operations", type=int, default=40)
    parser.add_argument("--banks", type=int, default=10)
    parser.add_argument("--operation-items", type=int, default=50)
    parser.add_argument("--json-out", type=Path, default=Path("ops.json"))
    args = parser.parse_args(argv)

    from .. import embedded_server
    from ..testing.service import ServeProcess

    work = Path(tempfile.mkdtemp(prefix="bench-ops-"))
    url = os.environ.get("HINDSIGHT_API_DATABASE_URL")
    data = None if url else work / "pg"
    if data is not None:
        url = embedded_server.join(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_API_")}
    env.update({"HINDSIGHT_API_DATABASE_URL": str(url), "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
                "HINDSIGHT_API_SERVICE_MAX_SYNC_RETAIN_ITEMS": str(max(args.sync_batch, 1))})
    servers = [ServeProcess(env, (work / f"serve-{i}.log").open("w")) for i in range(2)]
    report: dict[str, Any] = {"load_average_before": list(os.getloadavg())}
    try:
        servers[0].start()
        with httpx.Client(base_url=servers[0].url, timeout=600) as http:
            report["sync"] = bench_sync(http, args.items, args.sync_batch)
            print(f"sync:  {report['sync']['items']} items in {report['sync']['seconds']} s "
                  f"({report['sync']['items_per_second']}/s)", flush=True)
            report["async"] = bench_async(http, args.items)
            a = report["async"]
            print(f"async: answered in {a['answer_seconds']} s, completed in {a['complete_seconds']} s "
                  f"({a['items_per_second']}/s), {a['stored']} stored", flush=True)
        servers[1].start()
        clients = [httpx.Client(base_url=s.url, timeout=600, headers=EXTRAS) for s in servers]
        try:
            report["two_servers"] = bench_two_servers(clients, [s.process.pid for s in servers], args.operations,
                                                      args.banks, args.operation_items)
        finally:
            for c in clients:
                c.close()
        t = report["two_servers"]
        print(f"two servers: {t['completed']}/{t['operations']} operations in {t['seconds']} s; "
              f"by attempts {t['operations_by_attempts']}; by server {t['operations_by_server']}; "
              f"{t['stored']}/{t['expected']} memories", flush=True)
    finally:
        for server in servers:
            server.stop()
        if data is not None:
            embedded_server.leave(data)
    report["load_average_after"] = list(os.getloadavg())
    args.json_out.write_text(json.dumps(report, indent=2))
    print(f"load average {report['load_average_after']}; wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
