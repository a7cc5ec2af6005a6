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
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .soak import REQUEST_TIMEOUT, SoakOptions, memory_rss, query, remove_work, sentence, start_server, stop_server

#: answers that shed load on purpose: allowed, with ``Retry-After``
SHED = (429, 503)

#: wrk's script: recalls and retains in turn over the banks; answers counted by status
SCRIPT = r"""
local counter, threads = 0, {}
local bodies, paths = BODIES, PATHS
statuses, unhinted = {}, 0

function setup(thread)
  thread:set("offset", #threads)
  table.insert(threads, thread)
end

function request()
  counter = counter + 1
  local i = (counter + offset * 7919) % #bodies + 1
  local body = bodies[i]
  if i % RETAIN_EVERY == 0 then
    body = string.gsub(body, "SERIAL", offset .. "-" .. counter)
  end
  return wrk.format("POST", paths[i], {["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if (status == 503 or status == 429) and headers["Retry-After"] == nil and headers["retry-after"] == nil then
    unhinted = unhinted + 1
  end
end

function done(summary, latency, requests)
  local merged, missing = {}, 0
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do
      merged[tostring(status)] = (merged[tostring(status)] or 0) + n
    end
    missing = missing + thread:get("unhinted")
  end
  local parts = {}
  for status, n in pairs(merged) do table.insert(parts, string.format('"%s": %d', status, n)) end
  io.write(string.format(
    'RESULT {"requests": %d, "seconds": %.3f, "by_status": {%s}, "without_retry_after": %d, ' ..
    '"socket_errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}, ' ..
    '"latency_ms": {"p50": %.2f, "p90": %.2f, "p99": %.2f, "max": %.2f, "mean": %.2f}}\n',
    summary.requests, summary.duration / 1e6, table.concat(parts, ", "), missing,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout,
    summary.errors.status, latency:percentile(50) / 1e3, latency:percentile(90) / 1e3,
    latency:percentile(99) / 1e3, latency.max / 1e3, latency.mean / 1e3))
end
"""


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


def wrk_path() -> str:
    """The ``wrk`` program, or an error saying how to get it."""
    found = shutil.which("wrk")
    if found is None:
        raise RuntimeError("wrk is not installed: install it (Debian and Ubuntu: apt-get install wrk), "
                           "or put it on the PATH")
    return found


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


def lua_script(paths: list[str], bodies: list[str], retain_every: int = 0) -> str:
    """wrk's script posting ``bodies[i]`` to ``paths[i]`` in turn; with ``retain_every``, every n-th body
    has ``SERIAL`` replaced by a value of its own (a new memory per retain)."""

    def lua(values: list[str]) -> str:
        return "{" + ", ".join(json.dumps(v) for v in values) + "}"  # JSON strings are Lua strings here

    return (SCRIPT.replace("BODIES", lua(bodies)).replace("PATHS", lua(paths))
            .replace("RETAIN_EVERY", str(retain_every or len(bodies) + 1)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(url: str, lua: Path, clients: int, seconds: float, threads: int = 2) -> tuple[dict[str, Any], float]:
    """One ``wrk`` run of ``clients`` connections for ``seconds``: its result (``RESULT`` of the script) and
    the CPU seconds ``wrk`` itself used."""
    command = [wrk_path(), "-t", str(min(threads, clients)), "-c", str(clients), "-d", f"{seconds:g}s",
               "--timeout", f"{REQUEST_TIMEOUT:g}s", "-s", str(lua), url]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = done.stdout + done.stderr
    if done.returncode != 0 or "RESULT " not in output:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{output[-2000:]}")
    used = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
    return json.loads(output.split("RESULT ", 1)[1].splitlines()[0]), used


def run_wrk(options: LoadOptions, url: str, lua: Path, clients: int, server_pid: int,
            echo: Callable[[str], None]) -> dict[str, Any]:
    """One ``wrk`` run of ``clients`` connections; its result with the CPU and memory it cost."""
    load = os.getloadavg()[0]
    server_before, started = cpu_seconds(server_pid), time.monotonic()
    rss = [memory_rss(server_pid)["rss_mb"]]
    sampling = True

    def sample() -> None:
        while sampling:
            time.sleep(5)
            rss.append(memory_rss(server_pid)["rss_mb"])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result, wrk_cpu = wrk(url, lua, clients, options.seconds, options.threads)
    finally:
        sampling = False
        sampler.join()
    rss.append(memory_rss(server_pid)["rss_mb"])
    wall = time.monotonic() - started
    result.update({
        "clients": clients, "requests_per_second": round(result["requests"] / result["seconds"], 1),
        "server_cpu_percent": round(100 * (cpu_seconds(server_pid) - server_before) / wall, 1),
        "wrk_cpu_percent": round(100 * wrk_cpu / wall, 1),
        "rss_mb": {"start": rss[0], "end": rss[-1], "peak": max(rss)}, "load_before": round(load, 2),
    })
    shed = sum(n for status, n in result["by_status"].items() if int(status) in SHED)
    other = {s: n for s, n in result["by_status"].items() if int(s) != 200 and int(s) not in SHED}
    echo(f"{clients:4} clients: {result['requests']} requests, {result['requests_per_second']}/s; "
         f"p50 {result['latency_ms']['p50']:.1f} ms, p99 {result['latency_ms']['p99']:.1f} ms, "
         f"max {result['latency_ms']['max']:.1f} ms; shed {shed}, other errors {other or 0}, "
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
