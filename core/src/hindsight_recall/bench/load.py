"""Many clients at once against ``hindsight-recall serve``, driven by ``wrk`` from its own process so that
the load generator is not the limit.

The server runs as a child process on its own embedded PostgreSQL (see :mod:`.soak`), seeded with a
few banks. For each client count, ``wrk`` keeps that many connections busy for the set time with a mix
of recalls and small retains (its Lua script counts the answers by status, and the 503 and 429 answers
that lack ``Retry-After``). Reported per run: requests and requests/s, answers by status, socket
errors, latency percentiles, the CPU of the server and of ``wrk``, and the server's memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._wrk import SHED, lua_script, shed, wrk, wrk_path
from .soak import REQUEST_TIMEOUT, SoakOptions, memory_rss, query, remove_work, sentence, start_server, stop_server


@dataclass
class LoadOptions:
    """What one load run does."""

    clients: tuple[int, ...] = (64, 256)
    seconds: float = 120.0
    banks: int = 8
    seed_memories: int = 50
    #: every n-th request is a retain of one new memory; the others are recalls
    retain_every: int = 10
    threads: int = 2
    seed: int = 0
    server_env: dict[str, str] | None = None
    log: Path | None = None

    def __post_init__(self) -> None:
        if not self.clients or min(self.clients) < 1 or self.seconds <= 0 or self.banks < 1:
            raise ValueError("clients must be at least 1, seconds above 0, banks at least 1")
        if self.retain_every < 1 or self.threads < 1 or self.seed_memories < 0:
            raise ValueError("retain_every and threads must be at least 1, seed_memories at least 0")


def script(options: LoadOptions, banks: list[str]) -> str:
    """The Lua script with its request bodies: 256 recalls and retains spread over the banks."""
    rng = random.Random(options.seed)
    bodies, paths = [], []
    for i in range(1, 257):
        bank = banks[i % len(banks)]
        if i % options.retain_every == 0:
            paths.append(f"/v1/default/banks/{bank}/memories")
            bodies.append(json.dumps({"items": [{"content": sentence(rng, "SERIAL")}]}))
        else:
            paths.append(f"/v1/default/banks/{bank}/memories/recall")
            bodies.append(json.dumps({"query": query(rng), "budget": "mid", "max_tokens": 4096}))
    return lua_script(paths, bodies, options.retain_every)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(options: LoadOptions, url: str, lua: Path, clients: int, server_pid: int,
            echo: Callable[[str], None]) -> dict[str, Any]:
    """One ``wrk`` run of ``clients`` connections; its result with the CPU and memory it cost."""
    load = os.getloadavg()[0]
    server_before, started = cpu_seconds(server_pid), time.monotonic()
    rss = [memory_rss(server_pid)["rss_mb"]]
    result, wrk_cpu = wrk(url, lua, clients, options.seconds, timeout=REQUEST_TIMEOUT, threads=options.threads,
                          every_5s=lambda: rss.append(memory_rss(server_pid)["rss_mb"]))
    wall = time.monotonic() - started
    result.update({
        "clients": clients, "requests_per_second": round(result["requests"] / result["seconds"], 1),
        "server_cpu_percent": round(100 * (cpu_seconds(server_pid) - server_before) / wall, 1),
        "wrk_cpu_percent": round(100 * wrk_cpu / wall, 1),
        "rss_mb": {"start": rss[0], "end": rss[-1], "peak": max(rss)}, "load_before": round(load, 2),
    })
    other = {s: n for s, n in result["by_status"].items() if int(s) != 200 and int(s) not in SHED}
    echo(f"{clients:4} clients: {result['requests']} requests, {result['requests_per_second']}/s; "
         f"p50 {result['latency_ms']['p50']:.1f} ms, p99 {result['latency_ms']['p99']:.1f} ms, "
         f"max {result['latency_ms']['max']:.1f} ms; shed {shed(result['by_status'])}, other errors {other or 0}, "
         f"socket errors {sum(result['socket_errors'].values()) - result['socket_errors']['status']}; "
         f"server CPU {result['server_cpu_percent']} %, wrk CPU {result['wrk_cpu_percent']} %; "
         f"RSS {rss[0]} -> {rss[-1]} MB (peak {max(rss)}); load before {load:.2f}")
    return result


def failures(run: dict[str, Any]) -> list[str]:
    """What in a run is an error: any answer but 200 and shed load with Retry-After, any socket error."""
    found = [f"{n} answers of {status}" for status, n in run["by_status"].items()
             if int(status) != 200 and int(status) not in SHED]
    if run["without_retry_after"]:
        found.append(f"{run['without_retry_after']} shed answers without Retry-After")
    found += [f"{n} socket {kind} errors" for kind, n in run["socket_errors"].items() if n and kind != "status"]
    return found


async def run_load(options: LoadOptions, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the server, seed it, run ``wrk`` once per client count; the report."""
    import httpx

    from .http import wait_ready
    from .upstream import free_port

    wrk_path()
    work = Path(tempfile.mkdtemp(prefix="hindsight-load-"))
    port, url = free_port(), ""
    banks = [f"load-{i:02d}" for i in range(options.banks)]
    runs = []
    log_path = options.log or work / "server.log"
    with log_path.open("w") as log:
        server = start_server(SoakOptions(server_env=options.server_env or {}), work, port, log)
        try:
            url = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT) as client:
                ready = await wait_ready(client, server, "/health/ready")
                echo(f"server ready in {ready} s (pid {server.pid}); seeding {options.banks} banks")
                rng = random.Random(options.seed)
                for bank in banks:
                    items = [{"content": sentence(rng, f"seed-{i}")} for i in range(options.seed_memories)]
                    if items:
                        (await client.post(f"/v1/default/banks/{bank}/memories", json={"items": items})
                         ).raise_for_status()
            lua = work / "load.lua"
            lua.write_text(script(options, banks))
            for clients in options.clients:
                runs.append(await asyncio.to_thread(run_wrk, options, url, lua, clients, server.pid, echo))
                if server.poll() is not None:
                    raise RuntimeError(f"the server exited with {server.returncode}; see {log_path}")
        finally:
            stop_server(server)
    remove_work(work, embedded=True, keep_log=options.log is not None)
    return {"options": {"clients": list(options.clients), "seconds": options.seconds, "banks": options.banks,
                        "retain_every": options.retain_every, "threads": options.threads},
            "cpus": os.cpu_count(), "runs": runs, "failures": {str(r["clients"]): failures(r) for r in runs}}
