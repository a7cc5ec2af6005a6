"""A memory soak of ``hindsight-recall serve``: a steady mix of recalls and small retains for a set time,
with the server's resident memory sampled as it goes.

The server runs as a child process on a free port of 127.0.0.1, on an embedded PostgreSQL in a fresh
temporary data directory (or on ``database_url``, in banks of its own that are deleted afterwards).
Each client loops until the deadline: a recall (by default 80 %) or a retain of 1 to 8 new memories
to one of the banks. The RSS of the server's Python process is read from ``/proc`` every
``sample_seconds``; at the end every bank's stored count is compared with the memories the server
acknowledged, and a sample of the acknowledged texts is recalled to show they can be found.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .synthetic import COMMON_WORDS, FIRST_NAMES, LAST_NAMES

#: request timeout of the clients (seconds): a request that takes longer counts as an error
REQUEST_TIMEOUT = 120.0
#: words a memory's text and a query are made of, beyond the common ones
PLACES = ("Lisbon", "Osaka", "Nairobi", "Quito", "Tallinn", "Hobart", "Leeds", "Porto", "Tromsø", "Cusco")


@dataclass
class SoakOptions:
    """What one soak does."""

    minutes: float = 5.0
    clients: int = 4
    banks: int = 20
    #: share of requests that are recalls; the rest retain 1 to ``max_items`` memories
    recall_share: float = 0.8
    max_items: int = 8
    #: memories retained into each bank before the clock starts (so that early recalls find something)
    seed_memories: int = 20
    sample_seconds: float = 60.0
    #: acknowledged memories recalled by their text at the end
    checks: int = 200
    database_url: str | None = None
    seed: int = 0
    #: extra environment of the server (for example MALLOC_ARENA_MAX)
    server_env: dict[str, str] = field(default_factory=dict)
    log: Path | None = None

    def __post_init__(self) -> None:
        if self.minutes <= 0 or self.clients < 1 or self.banks < 1 or self.max_items < 1:
            raise ValueError("minutes must be above 0; clients, banks and max_items at least 1")
        if not 0 <= self.recall_share <= 1:
            raise ValueError(f"recall_share must be between 0 and 1, got {self.recall_share}")
        if self.sample_seconds <= 0 or self.seed_memories < 0 or self.checks < 0:
            raise ValueError("sample_seconds must be above 0; seed_memories and checks at least 0")


def memory_rss(pid: int) -> dict[str, float]:
    """Resident memory of process ``pid`` in MB: all of it (``rss``) and its anonymous part (``anon``)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "VmHWM", "Threads"):
            fields[name] = int(value.split()[0])
    return {"rss_mb": round(fields["VmRSS"] / 1024, 1), "anon_mb": round(fields.get("RssAnon", 0) / 1024, 1),
            "peak_mb": round(fields.get("VmHWM", 0) / 1024, 1), "threads": fields.get("Threads", 0)}


def sentence(rng: random.Random, serial: str) -> str:
    """A memory's text: a person, a place and 4 to 60 words, ending with a serial that makes it unique."""
    words = " ".join(rng.choices(COMMON_WORDS, k=rng.randint(4, 60)))
    who = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    return f"{who} in {rng.choice(PLACES)}: {words} (note {serial})"


def query(rng: random.Random) -> str:
    """A recall query of 2 to 14 words."""
    return " ".join([rng.choice(FIRST_NAMES), *rng.choices(COMMON_WORDS, k=rng.randint(1, 12)), rng.choice(PLACES)])


def growth(samples: list[dict[str, Any]], window_minutes: float, *, in_mb: bool = False) -> float | None:
    """Growth of RSS over the last ``window_minutes`` of the samples, in percent (or MB); None if too few."""
    if len(samples) < 2:
        return None
    end = samples[-1]
    start = next((s for s in samples if s["minute"] >= end["minute"] - window_minutes - 1e-9), samples[0])
    if start is end:
        return None
    first, last = float(start["rss_mb"]), float(end["rss_mb"])
    return round(last - first, 1) if in_mb else round(100 * (last - first) / first, 2)


class Soak:
    """One run: the server, the clients, the samples and the final check."""

    def __init__(self, options: SoakOptions, echo: Callable[[str], None]) -> None:
        self.options, self.echo = options, echo
        run = secrets.token_hex(3)
        self.bank_ids = [f"soak-{run}-{i:02d}" for i in range(options.banks)]
        #: bank -> texts the server acknowledged as stored
        self.acknowledged: dict[str, list[str]] = {b: [] for b in self.bank_ids}
        self.counts = {"recalls": 0, "retains": 0, "errors": 0}
        self.errors: dict[str, int] = {}
        self.samples: list[dict[str, Any]] = []

    def _error(self, what: str) -> None:
        self.counts["errors"] += 1
        self.errors[what] = self.errors.get(what, 0) + 1

    async def _retain(self, client: Any, bank: str, texts: list[str]) -> None:
        response = await client.post(f"/v1/default/banks/{bank}/memories",
                                     json={"items": [{"content": t} for t in texts]})
        if response.status_code == 200:
            self.acknowledged[bank].extend(texts)
            self.counts["retains"] += 1
        else:
            self._error(f"retain {response.status_code}")

    async def _recall(self, client: Any, bank: str, text: str) -> list[str] | None:
        response = await client.post(f"/v1/default/banks/{bank}/memories/recall",
                                     json={"query": text, "budget": "mid", "max_tokens": 4096})
        if response.status_code != 200:
            self._error(f"recall {response.status_code}")
            return None
        self.counts["recalls"] += 1
        return [r["text"] for r in response.json()["results"]]

    async def _client(self, client: Any, number: int, deadline: float, server: subprocess.Popen[bytes]) -> None:
        """Requests until the deadline (or the server's exit); each one bounded by the request timeout."""
        import httpx

        rng = random.Random(self.options.seed * 1000 + number)
        serial = 0
        while time.monotonic() < deadline and server.poll() is None:
            bank = rng.choice(self.bank_ids)
            try:
                if rng.random() < self.options.recall_share:
                    await self._recall(client, bank, query(rng))
                else:
                    texts = []
                    for _ in range(rng.randint(1, self.options.max_items)):
                        serial += 1
                        texts.append(sentence(rng, f"c{number}-{serial}"))
                    await self._retain(client, bank, texts)
            except httpx.HTTPError as exc:  # counted, not fatal: the point is how many fail
                self._error(type(exc).__name__)

    async def _sampler(self, server: subprocess.Popen[bytes], started: float, stop: asyncio.Event) -> None:
        while server.poll() is None:
            sample: dict[str, Any] = {"minute": round((time.monotonic() - started) / 60, 2), **memory_rss(server.pid),
                      **self.counts, "load": [round(x, 2) for x in os.getloadavg()]}
            self.samples.append(sample)
            self.echo(f"  {sample['minute']:6.2f} min  RSS {sample['rss_mb']:7.1f} MB  (anon {sample['anon_mb']:.1f})"
                      f"  recalls {sample['recalls']}  retains {sample['retains']}  errors {sample['errors']}"
                      f"  load {sample['load'][0]}")
            if stop.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.options.sample_seconds)  # set: one last sample

    async def run(self, server: subprocess.Popen[bytes], base_url: str) -> dict[str, Any]:
        """Seed the banks, run the clients while sampling, then check what was stored."""
        import httpx

        from .http import wait_ready

        o = self.options
        limits = httpx.Limits(max_connections=o.clients + 4)
        async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
            ready = await wait_ready(client, server, "/health/ready")
            self.echo(f"server ready in {ready} s (pid {server.pid}); seeding {o.banks} banks")
            rng = random.Random(o.seed)
            for bank in self.bank_ids:
                texts = [sentence(rng, f"seed-{i}") for i in range(o.seed_memories)]
                if texts:
                    await self._retain(client, bank, texts)
            self.counts = {"recalls": 0, "retains": 0, "errors": 0}
            self.errors.clear()
            started = time.monotonic()
            deadline = started + o.minutes * 60
            stop = asyncio.Event()
            sampler = asyncio.create_task(self._sampler(server, started, stop))
            await asyncio.gather(*(self._client(client, k, deadline, server) for k in range(o.clients)))
            stop.set()
            await sampler
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with {server.returncode} during the soak; see its log")
            return await self._verify(client, rng, time.monotonic() - started)

    async def _verify(self, client: Any, rng: random.Random, seconds: float) -> dict[str, Any]:
        """Stored against acknowledged per bank, and a sample of acknowledged texts recalled by their text."""
        acknowledged = stored = 0
        short: dict[str, int] = {}
        for bank, texts in self.acknowledged.items():
            response = await client.get(f"/v1/default/banks/{bank}/memories/list", params={"limit": 1})
            total = response.json()["total"] if response.status_code == 200 else 0
            acknowledged, stored = acknowledged + len(texts), stored + total
            if total != len(texts):
                short[bank] = len(texts) - total
        pairs = [(bank, text) for bank, texts in self.acknowledged.items() for text in texts]
        sample = rng.sample(pairs, min(self.options.checks, len(pairs)))
        found = 0
        for bank, text in sample:
            results = await self._recall(client, bank, text)
            found += bool(results) and text in results  # type: ignore[operator]
        return {"seconds": round(seconds, 1), "acknowledged": acknowledged, "stored": stored,
                "banks_short": short, "recall_checks": len(sample), "recalled": found}


def start_server(options: SoakOptions, work: Path, port: int, log: Any) -> subprocess.Popen[bytes]:
    """``hindsight-recall serve`` on 127.0.0.1:``port``: its own embedded database in ``work``, or the URL."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HINDSIGHT_API_DATABASE_URL", "HINDSIGHT_API_EMBEDDED_DATA_DIR")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HINDSIGHT_API_HOST": "127.0.0.1",
                "HINDSIGHT_API_PORT": str(port), "HINDSIGHT_API_SERVICE_ACCESS_LOG": "off"})
    env.setdefault("HINDSIGHT_API_RERANKER_PROVIDER", "rrf")  # no trained cross-encoder ships with the package
    if options.database_url:
        env["HINDSIGHT_API_DATABASE_URL"] = options.database_url
    else:
        env["HINDSIGHT_API_EMBEDDED_DATA_DIR"] = str(work / "pg")
    env.update(options.server_env)
    return subprocess.Popen([sys.executable, "-m", "hindsight_recall.cli", "serve"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Stop ``serve`` as SIGTERM does (SIGKILL after a minute)."""
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def remove_work(work: Path, *, embedded: bool, keep_log: bool) -> None:
    """Stop the run's embedded server and remove its work folder (but the server's log, when it is kept)."""
    if embedded:
        from .. import embedded_server

        with contextlib.suppress(Exception):
            embedded_server.stop(work / "pg")
    shutil.rmtree(work if keep_log else work / "pg", ignore_errors=True)  # the log stays, if it is in there


async def run_soak(options: SoakOptions, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one soak and return its report (the samples, the counts and the final check)."""
    import httpx

    from .upstream import free_port

    work = Path(tempfile.mkdtemp(prefix="hindsight-soak-"))
    port = free_port()
    log_path = options.log or work / "server.log"
    soak = Soak(options, echo)
    echo(f"soak: {options.minutes:g} min, {options.clients} clients, {options.banks} banks, "
         f"{options.recall_share:.0%} recalls; server log {log_path}")
    with log_path.open("w") as log:
        server = start_server(options, work, port, log)
        try:
            check = await soak.run(server, f"http://127.0.0.1:{port}")
            if options.database_url:  # leave the database as it was found
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=REQUEST_TIMEOUT) as client:
                    for bank in soak.bank_ids:
                        await client.delete(f"/v1/default/banks/{bank}")
        finally:
            stop_server(server)
    remove_work(work, embedded=not options.database_url, keep_log=options.log is not None)
    report = {
        "options": {"minutes": options.minutes, "clients": options.clients, "banks": options.banks,
                    "recall_share": options.recall_share, "max_items": options.max_items,
                    "seed_memories": options.seed_memories, "server_env": options.server_env,
                    "database": "url" if options.database_url else "embedded"},
        "samples": soak.samples, "requests": soak.counts, "errors_by_kind": soak.errors, **check,
        "rss_growth_pct": growth(soak.samples, options.minutes),
        "rss_growth_last_10_min_pct": growth(soak.samples, 10) if options.minutes > 10 else None,
        # after warm-up: the second half of the run, in MB
        "rss_growth_second_half_mb": growth(soak.samples, options.minutes / 2, in_mb=True),
        "cpus": os.cpu_count(),
    }
    echo(summary(report))
    return report


def failures(report: dict[str, Any], flat_within_mb: float) -> list[str]:
    """What keeps a soak's report from passing: memory that grew by more than ``flat_within_mb`` over the
    second half of the run, failed requests, acknowledged memories that were not stored."""
    failed = []
    grew = report["rss_growth_second_half_mb"]
    if grew is None:
        failed.append("too few samples to tell the growth over the second half (lower --sample-seconds)")
    elif grew > flat_within_mb:
        failed.append(f"RSS grew by {grew} MB over the second half, more than {flat_within_mb:g} MB")
    if report["requests"]["errors"]:
        failed.append(f"{report['requests']['errors']} requests failed: {report['errors_by_kind']}")
    if report["stored"] != report["acknowledged"]:
        failed.append(f"{report['acknowledged']} memories acknowledged, {report['stored']} stored")
    return failed


def summary(report: dict[str, Any]) -> str:
    """The end of a soak in a few lines."""
    first, last = report["samples"][0], report["samples"][-1]
    lines = [f"requests: {report['requests']['recalls']} recalls, {report['requests']['retains']} retains, "
             f"{report['requests']['errors']} errors {report['errors_by_kind'] or ''}".rstrip(),
             f"memories: {report['acknowledged']} acknowledged, {report['stored']} stored; "
             f"{report['recalled']} of {report['recall_checks']} sampled recalled by their text",
             f"RSS: {first['rss_mb']} -> {last['rss_mb']} MB ({report['rss_growth_pct'] or 0:+.1f} %)"]
    if report["rss_growth_second_half_mb"] is not None:
        lines.append(f"RSS growth over the second half: {report['rss_growth_second_half_mb']:+.1f} MB")
    if report["rss_growth_last_10_min_pct"] is not None:
        lines.append(f"RSS growth over the last 10 minutes: {report['rss_growth_last_10_min_pct']:+.2f} %")
    return "\n".join(lines)
