"""The ``hindsight-recall`` command line."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from . import cli_banks, cli_bench, cli_remote
from .cli_engine import open_engine, run
from .errors import describe_error
from .types import FACT_TYPES, Budget, TagsMatch

T = TypeVar("T")


class _Main(click.Group):
    """The command group: known errors become ``Error: ...`` and exit 1, without a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            message = describe_error(exc)
            if message is None and not logging.getLogger().isEnabledFor(logging.INFO):
                message = f"{type(exc).__name__}: {exc} (run with -v for the traceback)"
            if message is None:
                raise
            raise click.ClickException(message) from None


@click.group(cls=_Main)
@click.version_option(package_name="hindsight-recall")
@click.option("-v", "--verbose", is_flag=True, help="Log progress and warnings.")
def main(verbose: bool) -> None:
    """Recall engine for AI-agent memory on PostgreSQL + pgvector.

    Settings come from HINDSIGHT_API_* environment variables; with HINDSIGHT_API_DATABASE_URL unset,
    an embedded PostgreSQL server is started.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@main.command()
@click.option("--bank", default="demo", show_default=True, help="Bank to load the sample into.")
@click.option("--replace", is_flag=True, help="Delete the bank first if it exists.")
def demo(bank: str, replace: bool) -> None:
    """Load a small sample bank and answer a few questions about it."""
    from .demo import run_demo

    run(lambda: run_demo(open_engine(), bank, click.echo, replace=replace))


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--bank", help="Bank for lines without a 'bank' field.")
@cli_remote.URL
@cli_remote.API_KEY
def retain(file: Path, bank: str | None, url: str | None, api_key: str | None) -> None:
    """Store the memories of a JSONL FILE, one memory per line."""
    from .jsonl import read_jsonl

    if url:
        click.echo(run(lambda: _sync(cli_remote.retain, url, api_key, file, bank)))
        return

    async def go() -> None:
        batches: dict[str, list[Any]] = {}
        lines: dict[str, list[int]] = {}
        for bank_id, line, memory in read_jsonl(file, bank):
            batches.setdefault(bank_id, []).append(memory)
            lines.setdefault(bank_id, []).append(line)
        async with open_engine() as engine:
            stats = await engine.retain_many(batches, lines=lines)
        click.echo(
            f"retained {stats.memories} memories in {stats.banks} bank(s) in {stats.seconds:.2f} s "
            f"({stats.per_second:.0f} memories/s; embedding {stats.embedding_seconds:.2f} s, "
            f"links {stats.link_seconds:.2f} s, {stats.links} links)"
        )

    run(go)


@main.command()
@click.argument("query")
@click.option("--bank", required=True, help="Bank to search.")
@click.option("--budget", type=click.Choice([b.value for b in Budget]), default="mid", show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1), default=4096, show_default=True)
@click.option("--query-timestamp", help="ISO-8601 anchor for relative dates and recency.")
@click.option("--types", help=f"Comma list of fact types ({', '.join(FACT_TYPES)}).")
@click.option("--tags", help="Comma list of tags.")
@click.option("--tags-match", type=click.Choice([t.value for t in TagsMatch]), default="any", show_default=True)
@click.option(
    "--chunks", "chunk_tokens", type=click.IntRange(min=0), help="Include source chunks within this many tokens."
)
@click.option("--trace", is_flag=True, help="Include the trace.")
@click.option("--json", "as_json", is_flag=True, help="Print the response body as JSON.")
@click.option("--limit", type=click.IntRange(min=1), help="Keep at most this many results (after --max-tokens).")
@cli_remote.URL
@cli_remote.API_KEY
def recall(query: str, bank: str, budget: str, max_tokens: int, query_timestamp: str | None, types: str | None,
           tags: str | None, tags_match: str, chunk_tokens: int | None, trace: bool, as_json: bool,
           limit: int | None, url: str | None, api_key: str | None) -> None:
    """Find the memories of BANK most relevant to QUERY."""
    options: dict[str, Any] = dict(budget=budget, max_tokens=max_tokens, query_timestamp=query_timestamp,
                                   types=_split(types), tags=_split(tags), tags_match=tags_match,
                                   include_chunks=chunk_tokens, trace=trace, limit=limit)

    async def go() -> dict[str, Any]:
        if url:
            return await _sync(cli_remote.recall, url, api_key, bank, query, options)
        async with open_engine() as engine:
            result: dict[str, Any] = await engine.recall(bank, query, **options)
            return result

    body = run(go)
    if as_json:
        click.echo(json.dumps(body, indent=2, ensure_ascii=False, default=str))
        return
    for i, result in enumerate(body["results"], start=1):
        click.echo(f"{i:3d}. [{result['scores']['final']:.3f}] {result['id']}: {result['text']}")
    if not body["results"]:
        click.echo("no memories found", err=True)
    if trace:
        for phase in body["trace"]["summary"]["phase_metrics"]:
            click.echo(f"  {phase['phase_name']:28s} {phase['duration_seconds'] * 1000:8.2f} ms  {phase['details']}")


@main.command()
def mcp() -> None:
    """Serve recall, retain and the bank listing as MCP tools over stdin/stdout.

    For an agent that launches its tools as processes; stdout carries the protocol only, logs go to
    stderr.
    """
    from .service.mcp import serve_stdio  # late: the MCP SDK is not needed by other commands

    run(lambda: serve_stdio(open_engine(long_lived=True)))


@main.command()
def plugins() -> None:
    """List installed plugins and what they provide, as JSON."""
    from .plugins import get_plugin_manager

    manager = get_plugin_manager()
    click.echo(json.dumps([r.as_json() for r in manager.registrations], indent=2))


@main.group()
def bank() -> None:
    """Manage banks."""


@bank.command("config")
@click.argument("bank_id")
@click.argument("assignments", nargs=-1)
@cli_remote.URL
@cli_remote.API_KEY
def bank_config(bank_id: str, assignments: tuple[str, ...], url: str | None, api_key: str | None) -> None:
    """Show or set BANK_ID's setting overrides: NAME=VALUE (NAME= removes one)."""
    values: dict[str, Any] = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="ASSIGNMENTS")
        values[name.strip().lower().removeprefix("hindsight_api_")] = value or None

    async def go() -> dict[str, Any]:
        if url:
            return await _sync(cli_remote.bank_config, url, api_key, bank_id, values)
        async with open_engine() as engine:
            if values:
                return await engine.banks.configure(bank_id, values)  # type: ignore[no-any-return]
            return await engine.banks.config(bank_id) or {}

    click.echo(json.dumps(run(go), indent=2))


cli_banks.register(bank)


@main.group()
def server() -> None:
    """The embedded PostgreSQL server (used while HINDSIGHT_API_DATABASE_URL is unset)."""


def _server_data_dir(data_dir: Path | None) -> Path:
    from .embedded_server import data_dir as resolve
    from .settings import load_settings

    settings = load_settings()
    if settings.database_url and data_dir is None:
        raise click.ClickException("HINDSIGHT_API_DATABASE_URL is set, so no embedded server is used")
    return resolve(data_dir or settings.embedded_data_dir)


_DATA_DIR = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
                         help="Data directory (default: HINDSIGHT_API_EMBEDDED_DATA_DIR or the per-user default).")


@server.command("status")
@_DATA_DIR
def server_status(data_dir: Path | None) -> None:
    """Show whether the embedded server runs, its socket and the processes using it."""
    from . import embedded_server

    path = _server_data_dir(data_dir)
    found = embedded_server.status(path)
    if found is None:
        click.echo(f"not running (data dir {path})")
        return
    click.echo(f"running: pid {found.pid}, data dir {path}\nsocket: {found.socket_dir} (port {found.port})\n"
               f"url: {found.url()}\nused by: {', '.join(map(str, found.users)) or 'no live process'}")


@server.command("stop")
@_DATA_DIR
def server_stop(data_dir: Path | None) -> None:
    """Stop the embedded server now (fast shutdown: open sessions are disconnected)."""
    from . import embedded_server

    path = _server_data_dir(data_dir)
    click.echo(f"stopped the server in {path}" if embedded_server.stop(path) else f"not running (data dir {path})")


@main.group()
def bench() -> None:
    """Benchmarks."""


@bench.command("recall")
@click.option("--memories", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--queries", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--budget", type=click.Choice([b.value for b in Budget]), default="mid", show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1), default=4096, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write {qid, ids} lines here.")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), help="Write the metrics as JSON here.")
@click.option("--per-arm", is_flag=True, help="Also score each arm's own ranking (from the trace).")
@click.option("--replace", is_flag=True, help="Delete the split's banks first if they exist.")
def bench_recall(memories: Path, queries: Path, budget: str, max_tokens: int, out: Path | None, json_out: Path | None,
                 per_arm: bool, replace: bool) -> None:
    """Retain a split (LoCoMo's JSONL format) into fresh banks, recall every question and score the ranking.

    Each question is asked at its query_timestamp when it has one; plain BM25 is scored beside."""
    from .bench.locomo import run_locomo

    report = run(lambda: run_locomo(open_engine(), memories, queries, budget=budget, max_tokens=max_tokens,
                                    out=out, echo=click.echo, per_arm=per_arm, replace=replace))
    if json_out:
        json_out.write_text(json.dumps(report, indent=2))


bench.add_command(bench_recall, "locomo")  # its first name, kept
cli_bench.register(bench)


@bench.command("scale")
@click.option("--sizes", default="10000,100000", show_default=True, help="Comma list of bank sizes (10k, 1M allowed).")
@click.option("--budget", "budgets", default="low,mid,high", show_default=True, help="Comma list of budgets to time.")
@click.option("--embeddings", type=click.Choice(["random", "model"]), default="random", show_default=True,
              help="Low-rank synthetic vectors, or the real embedding model (slow beyond ~20k).")
@click.option("--concurrency", default="1,8,32", show_default=True, help="Comma list of concurrent recall counts.")
@click.option("--queries", "query_count", type=click.IntRange(min=3), default=60, show_default=True,
              help="Questions per budget and configuration.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-scale"), show_default=True)
@click.option("--plot/--no-plot", default=True, show_default=True, help="Write scale.png (needs matplotlib).")
@click.option("--keep", is_flag=True, help="Keep each size's embedded database directory.")
@click.option("--query-vectors", type=click.Choice(["model", "synthetic"]), default="model", show_default=True,
              help="Search with the embedder's query vector, or the topic's synthetic one (--embeddings random).")
@click.option("--reranker/--no-reranker", default=True, show_default=True,
              help="Also time the default cross-encoder's shape (random weights) on the capped candidates.")
@click.option("--database-url", help="Run on this PostgreSQL or Citus coordinator instead of a fresh embedded "
              "server, in banks of the run's own (bench-scale-<hex>-...), deleted after each size.")
@click.option("--banks", "bank_count", type=click.IntRange(min=1), default=1, show_default=True,
              help="Spread each size over this many banks; each recall asks one of them, in turn.")
@click.option("--compare-embedded", is_flag=True,
              help="With --database-url: also measure a fresh embedded server on the same data, side by side.")
def bench_scale(sizes: str, budgets: str, embeddings: str, concurrency: str, query_count: int, seed: int,
                out: Path, plot: bool, keep: bool, query_vectors: str, reranker: bool, database_url: str | None,
                bank_count: int, compare_embedded: bool) -> None:
    """Ingest synthetic banks of each size; time ingest, recall per phase and concurrent recalls."""
    from .bench.scale import ScaleOptions, int_list, run_scale

    levels = _split(budgets) or []
    if not levels or set(levels) - {b.value for b in Budget}:
        raise click.BadParameter(f"{budgets!r}: give budgets out of low, mid, high", param_hint="--budget")
    try:
        options = ScaleOptions(sizes=int_list(sizes), budgets=levels,
                               embeddings=embeddings, concurrency=int_list(concurrency), queries=query_count,
                               seed=seed, out=out, plot=plot, keep=keep, query_vectors=query_vectors,
                               reranker=reranker, database_url=database_url, banks=bank_count,
                               compare_embedded=compare_embedded)
        options.check()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    run(lambda: run_scale(options, echo=click.echo))


@bench.command("soak")
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), default=5, show_default=True)
@click.option("--clients", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--banks", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--recall-share", type=click.FloatRange(0, 1), default=0.8, show_default=True,
              help="Share of requests that are recalls; the others retain 1 to 8 memories.")
@click.option("--seed-memories", type=click.IntRange(min=0), default=20, show_default=True,
              help="Memories retained into each bank before the clock starts.")
@click.option("--sample-seconds", type=click.FloatRange(min=0, min_open=True), default=60, show_default=True)
@click.option("--checks", type=click.IntRange(min=0), default=200, show_default=True,
              help="Acknowledged memories recalled by their text at the end.")
@click.option("--database-url", help="Run on this PostgreSQL (in banks of its own, deleted afterwards) "
              "instead of a fresh embedded one.")
@click.option("--server-env", multiple=True, help="NAME=VALUE added to the server's environment (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), help="Write the server's log here.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the report as JSON here.")
@click.option("--flat-within", type=click.FloatRange(min=0), metavar="MB",
              help="Fail unless RSS grew by at most MB over the second half of the run (after warm-up), "
              "no request failed and every acknowledged memory was stored.")
def bench_soak(minutes: float, clients: int, banks: int, recall_share: float, seed_memories: int,
               sample_seconds: float, checks: int, database_url: str | None, server_env: tuple[str, ...],
               seed: int, log: Path | None, out: Path | None, flat_within: float | None) -> None:
    """Run `serve` under recalls and small retains for a while; report its memory (RSS) per sample."""
    from .bench.soak import SoakOptions, failures, run_soak

    if any("=" not in item for item in server_env):
        raise click.BadParameter("give NAME=VALUE", param_hint="--server-env")
    env = dict(item.partition("=")[::2] for item in server_env)
    options = SoakOptions(minutes=minutes, clients=clients, banks=banks, recall_share=recall_share,
                          seed_memories=seed_memories, sample_seconds=sample_seconds, checks=checks,
                          database_url=database_url, seed=seed, server_env=env, log=log)
    report = run(lambda: run_soak(options, echo=click.echo))
    if out:
        out.write_text(json.dumps(report, indent=2))
    if flat_within is not None and (failed := failures(report, flat_within)):
        raise click.ClickException("; ".join(failed))


@bench.command("load")
@click.option("--clients", default="64,256", show_default=True, help="Connections per run, comma separated.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=120, show_default=True,
              help="Length of each run.")
@click.option("--banks", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--retain-every", type=click.IntRange(min=1), default=10, show_default=True,
              help="Every n-th request retains one memory; the others recall.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), help="Write the server's log here.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the report as JSON here.")
def bench_load(clients: str, seconds: float, banks: int, retain_every: int, log: Path | None,
               out: Path | None) -> None:
    """Drive `serve` with many clients at once from wrk; report answers by status, latency, CPU and memory."""
    from .bench.load import LoadOptions, run_load
    from .bench.scale import int_list

    try:
        options = LoadOptions(clients=tuple(int_list(clients)), seconds=seconds, banks=banks,
                              retain_every=retain_every, log=log)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    report = run(lambda: run_load(options, echo=click.echo))
    if out:
        out.write_text(json.dumps(report, indent=2))
    problems = {n: found for n, found in report["failures"].items() if found}
    if problems:
        raise click.ClickException(f"errors under load: {problems}")


@main.command()
@click.option("--host", help="Address to bind (default HINDSIGHT_API_HOST, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default HINDSIGHT_API_PORT, 8888).")
def serve(host: str | None, port: int | None) -> None:
    """Serve upstream Hindsight's HTTP API (recall, retain, banks) with one warm engine."""
    from .service.run import configure_logging
    from .service.run import serve as run_service
    from .settings import load_settings

    overrides = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    settings = load_settings(**overrides)
    configure_logging("info")
    click.echo(f"hindsight-recall serving on http://{settings.host}:{settings.port}", err=True)
    click.echo(f"console at http://{settings.host}:{settings.port}/ui/" if settings.console_enabled
               else "console off (HINDSIGHT_API_CONSOLE_ENABLED=false)", err=True)
    run_service(settings)


async def _sync(function: Callable[..., T], *args: Any) -> T:
    """Run a blocking client call (the ``--url`` mode) where a coroutine is expected."""
    return function(*args)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
