"""``wrk`` as the load generator of the benchmarks: its Lua script, counting answers by status, and one run
of it in its own process, so that the clients are not the limit and their CPU is counted apart."""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: answers that shed load on purpose: allowed, with ``Retry-After``
SHED = (429, 503)

#: wrk's script: each connection posts the bodies in turn to their paths; answers counted by status
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


def wrk_path() -> str:
    """The ``wrk`` program, or an error saying how to get it."""
    found = shutil.which("wrk")
    if found is None:
        raise RuntimeError("wrk is not installed: install it (Debian and Ubuntu: apt-get install wrk), "
                           "or put it on the PATH")
    return found


def lua_script(paths: list[str], bodies: list[str], retain_every: int = 0) -> str:
    """wrk's script posting ``bodies[i]`` to ``paths[i]`` in turn; with ``retain_every``, every n-th body
    has ``SERIAL`` replaced by a value of its own (a new memory per retain)."""

    def lua(values: list[str]) -> str:
        return "{" + ", ".join(json.dumps(v) for v in values) + "}"  # JSON strings are Lua strings here

    return (SCRIPT.replace("BODIES", lua(bodies)).replace("PATHS", lua(paths))
            .replace("RETAIN_EVERY", str(retain_every or len(bodies) + 1)))


def wrk(url: str, lua: Path, clients: int, seconds: float, *, timeout: float, threads: int = 2,
        every_5s: Callable[[], None] | None = None) -> tuple[dict[str, Any], float]:
    """One ``wrk`` run of ``clients`` connections for ``seconds``: its result (``RESULT`` of the script) and
    the CPU seconds ``wrk`` itself used. A request unanswered after ``timeout`` seconds is a timeout error;
    ``every_5s`` is called while it runs (to sample the server)."""
    command = [wrk_path(), "-t", str(min(threads, clients)), "-c", str(clients), "-d", f"{seconds:g}s",
               "--timeout", f"{timeout:g}s", "-s", str(lua), url]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while run.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.wait(timeout=5)
        if every_5s is not None:
            every_5s()
    output = run.stdout.read() if run.stdout else ""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0 or "RESULT " not in output:
        raise RuntimeError(f"wrk failed ({run.returncode}):\n{output[-2000:]}")
    used = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
    return json.loads(output.split("RESULT ", 1)[1].splitlines()[0]), used


def shed(by_status: dict[str, int]) -> int:
    """Answers (of a run's ``by_status``) that shed load on purpose."""
    return sum(n for status, n in by_status.items() if int(status) in SHED)
