"""Retain throughput through the retain model: ``hindsight-recall serve`` extracting facts with a stand-in
model that answers every call after a fixed delay.

The stand-in (:mod:`hindsight_recall.testing.llm_server`, OpenAI's chat completions on 127.0.0.1, in
threads of this process) makes one fact of each sentence of an item, and counts the calls and the most
in flight. ``serve`` runs as a child process (see :mod:`.soak`) configured to extract through it, with
``RETAIN_LLM_MAX_CONCURRENT`` calls in flight at most. Clients send synchronous retains of
conversation-like items (1 to 3 turns, so 1 to 3 facts each) in batches. The same workload runs
twice, into banks of its own: with the model's delay, then with none, so that the wall time with the
delay can be set against the model's share alone (calls × delay / the calls that can be in flight)
plus everything else (the run without delay): their ratio is 1 when nothing overlaps the model's time.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..service.wire import EXTRAS
from ..settings import Settings
from ..testing.http_server import FixtureServer, Reply, Request
from ..testing.llm_server import facts_for, openai_routes
from ._cpu import load_average
from .soak import PLACES, REQUEST_TIMEOUT, SoakOptions, remove_work, start_server, stop_server
from .synthetic import FIRST_NAMES

#: the stand-in's chat completions route
CHAT_PATH = "/v1/chat/completions"
#: the calls in flight that retain allows by default: ``RETAIN_LLM_MAX_CONCURRENT`` unset takes ``LLM_*``'s
DEFAULT_MAX_CONCURRENT = int(Settings.model_fields["llm_max_concurrent"].default)
TURNS = ("I moved to {place} in {year}", "my sister started learning {thing} last month",
         "we spent the weekend in {place} with {name}", "I finally finished the {thing} course",
         "{name} recommended a bakery near the station in {place}", "I ran {km} km before work on {day}",
         "the {thing} lessons with {name} are on {day} evenings now", "{name} is visiting from {place} in {year}")
THINGS = ("cello", "Rust", "pottery", "Portuguese", "sailing", "chess", "sourdough", "climbing")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass
class RetainOptions:
    """What one run of ``bench retain`` does."""

    items: int = 1000
    batch: int = 50
    clients: int = 4
    #: seconds the stand-in model waits before each answer
    model_delay: float = 0.2
    #: ``RETAIN_LLM_MAX_CONCURRENT`` of the server
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    database_url: str | None = None
    seed: int = 0
    log: Path | None = None

    def __post_init__(self) -> None:
        if min(self.items, self.batch, self.clients, self.max_concurrent) < 1:
            raise ValueError("items, batch, clients and max_concurrent must be at least 1")
        if self.model_delay < 0:
            raise ValueError(f"model_delay must be at least 0, got {self.model_delay}")


class DelayedModel:
    """The stand-in's answer to a chat completion, sent after ``delay`` seconds (changeable between runs)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self._answer = openai_routes()[("POST", CHAT_PATH)]

    def __call__(self, request: Request) -> Reply:
        return replace(self._answer(request), delay=self.delay)


def conversation(rng: random.Random) -> str:
    """An item's content: 1 to 3 turns of a chat, one sentence each, so the stand-in finds 1 to 3 facts."""
    turns = []
    for _ in range(rng.randint(1, 3)):
        said = rng.choice(TURNS).format(place=rng.choice(PLACES), year=rng.randint(2015, 2025),
                                        thing=rng.choice(THINGS), name=rng.choice(FIRST_NAMES),
                                        km=rng.randint(3, 21), day=rng.choice(DAYS))
        turns.append(f"{rng.choice(FIRST_NAMES)}: {said[0].upper()}{said[1:]}.")
    return " ".join(turns)


def workload(options: RetainOptions) -> list[dict[str, Any]]:
    """The items every run retains (the same ones: the seed fixes them)."""
    rng = random.Random(options.seed)
    return [{"content": conversation(rng), "context": "a chat between friends",
             "timestamp": f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00Z"} for i in range(options.items)]


def expected_facts(items: list[dict[str, Any]]) -> int:
    """The memories the stand-in's facts make of ``items``: as many as it finds sentences."""
    return sum(len(facts_for(f"<text>\n{item['content']}\n</text>")["facts"]) for item in items)


def _batches(items: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    return (items[i:i + size] for i in range(0, len(items), size))


class Runner:
    """The server, the stand-in and the clients of one invocation; :meth:`workload_run` is one measured run."""

    def __init__(self, options: RetainOptions, client: Any, model: FixtureServer, delayed: DelayedModel,
                 echo: Callable[[str], None]) -> None:
        self.options, self.client, self.model, self.delayed, self.echo = options, client, model, delayed, echo
        self.banks: list[str] = []
        #: names this invocation's banks
        self.run_id = secrets.token_hex(3)

    async def retain_all(self, bank: str, items: list[dict[str, Any]], label: str) -> dict[str, Any]:
        """Retain ``items`` into ``bank`` in batches from the clients; counts, errors and request times."""
        self.banks.append(bank)
        pending = _batches(items, self.options.batch)
        seconds: list[float] = []
        done = {"items": 0, "memories": 0, "requests": 0}
        errors: dict[str, int] = {}
        step, shown = max(1, len(items) // 10), 0

        async def client() -> None:
            nonlocal shown
            for batch in pending:  # one shared iterator: each batch goes to the first free client
                began = time.perf_counter()
                try:
                    response = await self.client.post(f"/v1/default/banks/{bank}/memories", json={"items": batch})
                    failed = "" if response.status_code == 200 else f"status {response.status_code}"
                except Exception as exc:  # counted, not fatal: the report says how many failed
                    failed = type(exc).__name__
                seconds.append(time.perf_counter() - began)
                if failed:
                    errors[failed] = errors.get(failed, 0) + 1
                    continue
                answer = response.json()
                done["requests"] += 1
                done["items"] += int(answer["items_count"])
                done["memories"] += int(answer["memories"])
                if done["items"] >= shown + step:
                    shown = done["items"] - done["items"] % step
                    self.echo(f"  {label}: {done['items']}/{len(items)} items, {time.perf_counter() - started:.1f} s")

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(self.options.clients)))
        wall = time.perf_counter() - started
        ordered = sorted(seconds)
        return {"wall_seconds": round(wall, 3), "requests": done["requests"], "items_acknowledged": done["items"],
                "memories_acknowledged": done["memories"], "errors": errors,
                "request_seconds": {"p50": round(ordered[len(ordered) // 2], 3),
                                    "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
                                    "max": round(ordered[-1], 3)}}

    async def stored(self, bank: str) -> int:
        """The memories the bank holds, as the API lists them."""
        response = await self.client.get(f"/v1/default/banks/{bank}/memories/list", params={"limit": 1})
        response.raise_for_status()
        return int(response.json()["total"])

    async def workload_run(self, delay: float, items: list[dict[str, Any]]) -> dict[str, Any]:
        """One measured run of the workload into a new bank, the stand-in answering after ``delay`` seconds."""
        label = f"model delay {delay:g} s"
        self.delayed.delay = delay
        self.model.reset()
        load = load_average()
        self.echo(f"{label}: {len(items)} items; load average {' '.join(map(str, load))}")
        got = await self.retain_all(f"bench-retain-{self.run_id}-{len(self.banks)}", items, label)
        calls = len(self.model.requests_to("POST", CHAT_PATH))
        stored = await self.stored(self.banks[-1])
        run = {"model_delay": delay, "items": len(items), "load_average_start": load, **got,
               "items_per_second": round(got["items_acknowledged"] / got["wall_seconds"], 2),
               "memories_stored": stored, "memories_expected": expected_facts(items),
               "facts_per_item": round(stored / len(items), 3), "model_calls": calls,
               "calls_per_item": round(calls / len(items), 3), "max_in_flight_at_model": self.model.max_in_flight}
        self.echo(f"{label}: {run['items_acknowledged']} items in {run['wall_seconds']:.1f} s = "
                  f"{run['items_per_second']:.1f} items/s; {run['facts_per_item']:.2f} memories per item "
                  f"({stored} stored of {run['memories_expected']} expected); {run['calls_per_item']:.2f} model "
                  f"calls per item; at most {run['max_in_flight_at_model']} in flight at the model; "
                  f"errors {sum(got['errors'].values())} {got['errors'] or ''}".rstrip())
        return run


def overlap(options: RetainOptions, delayed: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """The run with the delay against the model's time alone plus the run without it.

    The model alone needs ``calls × delay / ceiling`` seconds, ``ceiling`` being the calls that can be in
    flight: ``max_concurrent``, or fewer when the clients' batches hold fewer items (each is one call here).
    The ratio is 1 when the two add up (nothing overlaps the model's time), the floor what complete
    overlap would give (the longer of the two over their sum); above 1, waiting costs more than the
    model's share, as when a request's calls wait for its slowest in waves of ``ceiling``.
    """
    ceiling = min(options.max_concurrent, options.clients * options.batch)
    model = delayed["model_calls"] * delayed["model_delay"] / ceiling
    other = plain["wall_seconds"]
    return {"model_bound_seconds": round(model, 3), "calls_in_flight_ceiling": ceiling,
            "wall_with_delay_seconds": delayed["wall_seconds"], "wall_without_delay_seconds": other,
            "ratio": round(delayed["wall_seconds"] / (model + other), 3),
            "complete_overlap_ratio": round(max(model, other) / (model + other), 3)}


def describe_overlap(o: dict[str, Any], delayed: dict[str, Any]) -> str:
    """The overlap in one line."""
    return (f"overlap: wall {o['wall_with_delay_seconds']:.1f} s with the delay vs model-bound "
            f"{o['model_bound_seconds']:.1f} s ({delayed['model_calls']} calls × {delayed['model_delay']:g} s / "
            f"{o['calls_in_flight_ceiling']}) + non-model work {o['wall_without_delay_seconds']:.1f} s (the run "
            f"without delay): ratio {o['ratio']:.2f} (1.00: they add up, no overlap; "
            f"{o['complete_overlap_ratio']:.2f}: complete overlap)")


async def run_retain(options: RetainOptions, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the stand-in and the server, warm up, run the workload with the delay and without; the report."""
    import httpx

    from .http import wait_ready
    from .upstream import free_port

    load = load_average()
    echo(f"bench retain: {options.items} items in batches of {options.batch} from {options.clients} clients; "
         f"model delay {options.model_delay:g} s, at most {options.max_concurrent} calls in flight; "
         f"load average {' '.join(map(str, load))}")
    items = workload(options)
    work = Path(tempfile.mkdtemp(prefix="hindsight-bench-retain-"))
    log_path = options.log or work / "server.log"
    delayed = DelayedModel(options.model_delay)
    runs: list[dict[str, Any]] = []
    with FixtureServer({("POST", CHAT_PATH): delayed}) as model, log_path.open("w") as log:
        url = model.url + "/v1"
        env = {f"HINDSIGHT_API_{prefix}LLM_{name}": value for prefix in ("", "RETAIN_") for name, value in
               (("PROVIDER", "openai"), ("BASE_URL", url), ("API_KEY", "bench-key"), ("MODEL", "stub-model"))}
        env["HINDSIGHT_API_RETAIN_LLM_MAX_CONCURRENT"] = str(options.max_concurrent)
        port = free_port()
        server = start_server(SoakOptions(database_url=options.database_url, server_env=env), work, port, log)
        limits = httpx.Limits(max_connections=options.clients + 2)
        try:
            # the extras header: the answers count the memories each retain wrote
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=REQUEST_TIMEOUT,
                                         limits=limits, headers=EXTRAS) as client:
                echo(f"server ready in {await wait_ready(client, server, '/health/ready')} s (pid {server.pid}); "
                     f"stand-in model at {url}; server log {log_path}")
                runner = Runner(options, client, model, delayed, echo)
                try:
                    await runner.retain_all(f"bench-retain-warm-{runner.run_id}", items[:options.batch], "warm-up")
                    for delay in dict.fromkeys((options.model_delay, 0.0)):
                        runs.append(await runner.workload_run(delay, items))
                finally:
                    if options.database_url and server.poll() is None:  # leave the database as it was found
                        for bank in runner.banks:
                            await client.delete(f"/v1/default/banks/{bank}")
        finally:
            stop_server(server)
            remove_work(work, embedded=not options.database_url, keep_log=options.log is not None)
    report: dict[str, Any] = {
        "options": {**asdict(options), "log": str(options.log) if options.log else None,
                    "database_url": None,  # it may hold a password
                    "database": "url" if options.database_url else "embedded"},
        "cpus": os.cpu_count(), "load_average_start": load, "runs": runs,
        "items_per_second": runs[0]["items_per_second"], "facts_per_item": runs[0]["facts_per_item"],
        "calls_per_item": runs[0]["calls_per_item"], "max_in_flight_at_model": runs[0]["max_in_flight_at_model"],
        "overlap": overlap(options, runs[0], runs[1]) if len(runs) == 2 else None,
        "load_average_end": load_average()}
    if report["overlap"]:
        echo(describe_overlap(report["overlap"], runs[0]))
    return report


def failures(report: dict[str, Any]) -> list[str]:
    """What in a report is an error: a failed retain, an item not acknowledged, a memory missing or extra."""
    found = []
    for run in report["runs"]:
        label = f"model delay {run['model_delay']:g} s"
        found += [f"{label}: {n} retains failed with {what}" for what, n in run["errors"].items()]
        if run["items_acknowledged"] != run["items"]:
            found.append(f"{label}: {run['items_acknowledged']} of {run['items']} items acknowledged")
        if not run["memories_stored"] == run["memories_acknowledged"] == run["memories_expected"]:
            found.append(f"{label}: {run['memories_stored']} memories stored, {run['memories_acknowledged']} "
                         f"acknowledged, {run['memories_expected']} expected")
    return found
