"""Recall over HTTP: ``hindsight-recall serve`` (and upstream Hindsight 1.1.0's server, if asked) called
by the same client, beside an in-process recall on the same database.

``python -m hindsight_recall.bench.http --data bench/locomo/dev [--upstream-venv PATH]``:

1. starts ``hindsight-recall serve`` as its own process (embedded PostgreSQL in a work folder), and
   upstream's server when ``--upstream-venv`` is given (installed there when absent, as
   ``bench.upstream`` does);
2. retains the split into each over HTTP (ours through ``/v1/default/memories/import``, upstream
   through its retain route), and opens an in-process engine on our service's database;
3. times every question on every system one at a time, a block at a time, the order of the systems
   flipping per block; then the throughput of each HTTP system at each ``--concurrency``, from ``wrk``
   in its own process (so the clients are not the limit, and its CPU is reported apart), counting
   errors;
4. measures what a recall costs in CPU: each system's server process and PostgreSQL server (one at
   a time and during each throughput run), and our in-process recall per phase and per arm;
5. prints the table and writes ``http.json``: latency percentiles, the HTTP layer's cost (our HTTP
   p50 minus our in-process p50), throughput, errors and CPU per recall per concurrency.

Our service and the in-process engine share one database: ``HINDSIGHT_API_EMBEDDED_DATA_DIR`` when
set, else a folder in the work directory. Run it on an otherwise idle machine: under load the timings
say nothing (CPU per recall still does).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..event_loop import new_runner
from ..recall.cost import Meter
from ._cpu import PhaseCpu, Stretch, describe, load_average, postmaster_of_data_dir
from ._wrk import lua_script, shed, wrk, wrk_path
from .upstream import (
    UPSTREAM_BODY,
    alternate,
    ensure_upstream,
    free_port,
    load_split,
    percentiles,
    recall_ours,
    recall_path,
    recall_upstream,
    retain_upstream,
    split_exists,
    tcp_postgres,
    upstream_env,
)

Recaller = Callable[[dict[str, Any]], Awaitable[list[str]]]
#: an HTTP system's base URL and recall body, for the load generator
Target = tuple[str, dict[str, Any]]
#: our request body for the benchmark's recall: the in-process options of ``recall_ours``
OUR_BODY = {"budget": "mid", "max_tokens": 4096, "include": {"entities": None}}


async def recall_http(client: Any, q: dict[str, Any]) -> list[str]:
    """One recall through our service; the memory ids in rank order."""
    response = await client.post(recall_path(q), json={"query": q["question"], **OUR_BODY})
    response.raise_for_status()
    return [r["id"] for r in response.json()["results"]]


async def throughput(recaller: Recaller, questions: list[dict[str, Any]], clients: int,
                     seconds: float, meter: Meter | None = None) -> dict[str, Any]:
    """``clients`` callers looping over the questions for ``seconds``; recalls per second, errors and,
    with a ``meter`` (the system's server process and database), CPU milliseconds per recall."""
    done, errors = 0, 0
    stretch = Stretch(meter) if meter is not None else None
    deadline = time.perf_counter() + seconds

    async def caller(offset: int) -> None:
        nonlocal done, errors
        i = offset
        while time.perf_counter() < deadline:
            try:
                await recaller(questions[i % len(questions)])
                done += 1
            except Exception:  # counted, not fatal: the point is how many fail
                errors += 1
            i += clients

    started = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(clients)))
    elapsed = time.perf_counter() - started
    out: dict[str, Any] = {"clients": clients, "recalls": done, "errors": errors,
                           "per_second": round(done / elapsed, 1)}
    if stretch is not None:
        out["cpu_ms_per_recall"] = stretch.per_recall(done)
    return out


def throughput_wrk(url: str, body: dict[str, Any], questions: list[dict[str, Any]], clients: int, seconds: float,
                   lua: Path, meter: Meter | None = None) -> dict[str, Any]:
    """``wrk`` in its own process keeping ``clients`` connections busy with the questions for ``seconds``:
    recalls per second (200 answers), answers shed on purpose (503 or 429), errors (any other answer or
    socket error), latency percentiles, the CPU ``wrk`` itself used and, with a ``meter``, the system's
    CPU milliseconds per recall."""
    lua.write_text(lua_script([recall_path(q) for q in questions],
                              [json.dumps({"query": q["question"], **body}) for q in questions]))
    stretch = Stretch(meter) if meter is not None else None
    result, wrk_cpu = wrk(url, lua, clients, seconds, timeout=300)
    done, refused = result["by_status"].get("200", 0), shed(result["by_status"])
    socket = sum(n for kind, n in result["socket_errors"].items() if kind != "status")
    out: dict[str, Any] = {"clients": clients, "recalls": done, "shed": refused,
                           "errors": result["requests"] - done - refused + socket,
                           "per_second": round(done / result["seconds"], 1), "load_generator": "wrk",
                           "latency_ms": result["latency_ms"], "by_status": result["by_status"],
                           "wrk_cpu_ms_per_recall": round(1000 * wrk_cpu / max(done, 1), 2)}
    if stretch is not None:
        out["cpu_ms_per_recall"] = stretch.per_recall(done)
    return out


def data_dir(work: Path) -> Path:
    """Where our service's embedded server keeps its data, which the in-process engine opens too:
    ``HINDSIGHT_API_EMBEDDED_DATA_DIR`` when set, else ``ours-pg`` in the work folder."""
    given = os.environ.get("HINDSIGHT_API_EMBEDDED_DATA_DIR")
    return Path(given).expanduser().resolve() if given else work / "ours-pg"


def start_ours(data: Path, port: int, log: Any) -> subprocess.Popen[bytes]:
    """``hindsight-recall serve`` on 127.0.0.1:``port`` with its embedded server in ``data``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HINDSIGHT_API_PORT": str(port),
           "HINDSIGHT_API_HOST": "127.0.0.1", "HINDSIGHT_API_SERVICE_ACCESS_LOG": "off",
           "HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data)}
    env.setdefault("HINDSIGHT_API_RERANKER_PROVIDER", "rrf")
    return subprocess.Popen([sys.executable, "-m", "hindsight_recall.cli", "serve"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


async def wait_ready(client: Any, server: subprocess.Popen[bytes], path: str, timeout: float = 900) -> float:
    """Seconds until ``path`` answers 200; an error if the server exits first."""
    import httpx

    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if server.poll() is not None:
            raise RuntimeError(f"a server exited with {server.returncode} before it was ready; see its log")
        try:
            if (await client.get(path)).status_code == 200:
                return round(time.perf_counter() - started, 1)
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.5)
    raise RuntimeError(f"a server was not ready after {timeout:.0f} s")


async def run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the servers, load the split, time every system, print the table and write ``http.json``."""
    import httpx

    from ..engine import Engine
    from ..settings import load_settings

    banks, questions = load_split(args.data)
    if args.limit:
        questions = questions[:args.limit]
    work = Path(tempfile.mkdtemp(prefix="hindsight-bench-http-"))
    args.out.mkdir(parents=True, exist_ok=True)
    servers: list[subprocess.Popen[bytes]] = []
    report: dict[str, Any] = {"questions": len(questions), "memories": sum(map(len, banks.values())),
                              "concurrency": args.concurrency, "systems": {}, "load_average_before": load_average()}
    meters: dict[str, Meter] = {}
    port = free_port()
    data = data_dir(work)
    servers.append(start_ours(data, port, (args.out / "ours-server.log").open("w")))
    limits = httpx.Limits(max_connections=max(args.concurrency) + 4)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300, limits=limits) as ours:
            report["systems"]["ours-http"] = {"ready_seconds": await wait_ready(ours, servers[0], "/health/ready")}
            objects = [{**o, "bank": bank} for bank, objs in banks.items() for o in objs]
            (await ours.post("/v1/default/memories/import", json={"memories": objects})).raise_for_status()
            settings = load_settings(embedded_data_dir=data, reranker_provider="rrf")
            async with Engine(settings) as engine:
                recallers: dict[str, Recaller] = {
                    "ours-http": lambda q: recall_http(ours, q),
                    "ours-inprocess": lambda q: recall_ours(engine, q),
                }
                postmaster = postmaster_of_data_dir(data)
                meters["ours-http"] = Meter(postmaster, process=servers[0].pid)
                meters["ours-inprocess"] = Meter(postmaster)
                report["cpu_inprocess"] = await _phase_cpu(engine, questions, postmaster, echo)
                targets: dict[str, Target] = {"ours-http": (str(ours.base_url).rstrip("/"), OUR_BODY)}
                if args.upstream_venv:
                    await _with_upstream(args, work, servers, questions, banks, recallers, report, echo, meters,
                                         targets)
                else:
                    await _measure(args, work, questions, recallers, report, echo, meters, targets)
    finally:
        for server in servers:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
    report["load_average_after"] = load_average()
    (args.out / "http.json").write_text(json.dumps(report, indent=2))
    echo(table(report))
    echo(f"wrote {args.out / 'http.json'}")
    return report


async def _with_upstream(args: argparse.Namespace, work: Path, servers: list[subprocess.Popen[bytes]],
                         questions: list[dict[str, Any]], banks: dict[str, list[dict[str, Any]]],
                         recallers: dict[str, Recaller], report: dict[str, Any],
                         echo: Callable[[str], None], meters: dict[str, Meter], targets: dict[str, Target]) -> None:
    """Add upstream's server (on its own PostgreSQL) to the recallers, then measure everything."""
    import httpx

    script = ensure_upstream(args.upstream_venv.resolve(), echo)
    port = free_port()
    with tcp_postgres(work / "upstream-pg", free_port()) as url:
        log = (args.out / "upstream-server.log").open("w")
        servers.append(subprocess.Popen([str(script)], env=upstream_env(script, url, port), stdout=log,
                                        stderr=subprocess.STDOUT))
        limits = httpx.Limits(max_connections=max(args.concurrency) + 4)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300, limits=limits) as theirs:
            report["systems"]["upstream-http"] = {"ready_seconds": await wait_ready(theirs, servers[-1], "/health")}
            await retain_upstream(theirs, banks)
            recallers["upstream-http"] = lambda q: recall_upstream(theirs, q)
            meters["upstream-http"] = Meter(postmaster_of_data_dir(work / "upstream-pg"), process=servers[-1].pid)
            targets["upstream-http"] = (str(theirs.base_url).rstrip("/"), UPSTREAM_BODY)
            await _measure(args, work, questions, recallers, report, echo, meters, targets)


async def _phase_cpu(engine: Any, questions: list[dict[str, Any]], postmaster: int | None,
                     echo: Callable[[str], None]) -> dict[str, Any]:
    """Our in-process recall's CPU per recall, per phase and per arm, one question at a time."""
    metered = PhaseCpu(postmaster)
    for q in questions:
        await metered.recall(functools.partial(recall_ours, engine, q))
    summary = metered.summary()
    echo(describe(summary))
    return summary


async def _measure(args: argparse.Namespace, work: Path, questions: list[dict[str, Any]],
                   recallers: dict[str, Recaller], report: dict[str, Any], echo: Callable[[str], None],
                   meters: dict[str, Meter], targets: dict[str, Target]) -> None:
    latencies, _ = await alternate(recallers, questions, args.rounds, args.block, echo)
    for name, values in latencies.items():
        entry = report["systems"].setdefault(name, {})
        entry["latency_ms"] = percentiles(values)  # already in milliseconds
    for name, recaller in recallers.items():  # one at a time, each system alone: its CPU per recall
        stretch = Stretch(meters[name])
        for q in questions:
            await recaller(q)
        entry = report["systems"][name]
        entry["cpu_ms_per_recall"] = stretch.per_recall(len(questions))
        echo(f"{name} one at a time: CPU ms per recall {entry['cpu_ms_per_recall']}")
    report["http_overhead_ms_p50"] = round(report["systems"]["ours-http"]["latency_ms"]["p50"]
                                           - report["systems"]["ours-inprocess"]["latency_ms"]["p50"], 2)
    for clients in args.concurrency:
        for name, (url, body) in targets.items():
            if args.load_generator == "wrk":
                got = await asyncio.to_thread(throughput_wrk, url, body, questions, clients, args.seconds,
                                              work / f"{name}.lua", meters.get(name))
            else:
                got = await throughput(recallers[name], questions, clients, args.seconds, meters.get(name))
            report["systems"][name].setdefault("throughput", []).append(got)
            spent = got.get("cpu_ms_per_recall", {})
            echo(f"{name} at {clients} clients: {got['per_second']} recalls/s, {got.get('shed', 0)} shed (503 or "
                 f"429 with Retry-After), {got['errors']} errors, CPU ms per "
                 f"recall {spent.get('process_ms', '-')} + {spent.get('server_ms', '-')}"
                 + (f", p50 {got['latency_ms']['p50']} ms, p99 {got['latency_ms']['p99']} ms, wrk "
                    f"{got['wrk_cpu_ms_per_recall']} ms" if "wrk_cpu_ms_per_recall" in got else ""))


def table(report: dict[str, Any]) -> str:
    """The systems side by side as a markdown table."""
    rows = ["| system | p50 ms | p95 ms | CPU ms/recall (server + database) | "
            + " | ".join(f"recalls/s at {c}" for c in report["concurrency"]) + " |",
            "|---|---:|---:|---:|" + "---:|" * len(report["concurrency"])]
    for name, entry in report["systems"].items():
        rates = {t["clients"]: f"{t['per_second']} ({t['errors']} err"
                 + (f", {t['shed']} shed)" if t.get("shed") else ")") for t in entry.get("throughput", [])}
        cpu = entry.get("cpu_ms_per_recall")
        spent = f"{cpu.get('process_ms', 0)} + {cpu.get('server_ms', '-')}" if cpu else "-"
        rows.append(f"| {name} | {entry['latency_ms']['p50']} | {entry['latency_ms']['p95']} | {spent} | "
                    + " | ".join(rates.get(c, "-") for c in report["concurrency"]) + " |")
    rows.append(f"\nHTTP layer (ours, p50 over HTTP minus in-process): {report['http_overhead_ms_p50']} ms")
    if "load_average_before" in report:
        rows.append(f"Load average {report['load_average_before']}: timings need an idle machine, CPU per recall "
                    "does not")
    return "\n".join(rows)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m hindsight_recall.bench.http", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("bench/locomo/dev"),
                   help="folder with memories.jsonl and queries.jsonl")
    p.add_argument("--upstream-venv", type=Path, default=None,
                   help="also run upstream Hindsight 1.1.0 from this venv (installed there when absent)")
    p.add_argument("--rounds", type=int, default=2, help="passes over the questions per system")
    p.add_argument("--block", type=int, default=50, help="questions per block before switching systems")
    p.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")
    p.add_argument("--concurrency", type=lambda v: [int(x) for x in v.split(",") if x.strip()], default=[8, 32],
                   help="comma list of concurrent clients for the throughput runs")
    p.add_argument("--seconds", type=float, default=20, help="length of each throughput run")
    p.add_argument("--load-generator", choices=("wrk", "python"), default="wrk",
                   help="the throughput runs' clients: wrk in its own process (default; apt-get install wrk), "
                        "or asyncio clients in this one, which can be the limit")
    p.add_argument("--out", type=Path, default=Path("bench-http"))
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hindsight_recall.bench.http``."""
    args = parser().parse_args(argv)
    if not split_exists(args.data):
        return 2
    if args.load_generator == "wrk":
        try:
            wrk_path()
        except RuntimeError as exc:
            print(f"{exc}; or pass --load-generator python", file=sys.stderr)
            return 2
    with new_runner() as runner:  # the service's loop: the in-process pass runs on it too
        runner.run(run(args))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
