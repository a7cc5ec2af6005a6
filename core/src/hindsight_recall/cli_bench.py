"""``hindsight-recall bench retain``: retain throughput through the retain model (:mod:`.bench.retain`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .cli_engine import run


@click.command("retain")
@click.option("--items", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Conversation-like items retained per run (1 to 3 facts each).")
@click.option("--batch", type=click.IntRange(min=1), default=50, show_default=True, help="Items per retain request.")
@click.option("--clients", type=click.IntRange(min=1), default=4, show_default=True,
              help="Clients sending synchronous retains at once.")
@click.option("--model-delay", type=click.FloatRange(min=0), default=0.2, show_default=True,
              help="Seconds the stand-in model takes per extraction call; the workload then runs again without.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=None,
              show_default="LLM_MAX_CONCURRENT's default, 32", help="The server's RETAIN_LLM_MAX_CONCURRENT.")
@click.option("--database-url", help="Run on this PostgreSQL (in banks of its own, deleted afterwards) "
              "instead of a fresh embedded one.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), help="Write the server's log here.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the report as JSON here.")
def bench_retain(items: int, batch: int, clients: int, model_delay: float, max_concurrent: int | None,
                 database_url: str | None, seed: int, log: Path | None, out: Path | None) -> None:
    """Retain through a stand-in chat model with a fixed delay, then without one; items/s, facts and model
    calls per item, calls in flight, and how much of the model's time the server's own work overlaps."""
    from .bench.retain import DEFAULT_MAX_CONCURRENT, RetainOptions, failures, run_retain

    options = RetainOptions(items=items, batch=batch, clients=clients, model_delay=model_delay,
                            max_concurrent=max_concurrent or DEFAULT_MAX_CONCURRENT, database_url=database_url,
                            seed=seed, log=log)
    report = run(lambda: run_retain(options, echo=click.echo))
    if out:
        out.write_text(json.dumps(report, indent=2))
        click.echo(f"wrote {out}")
    problems = failures(report)
    if problems:
        raise click.ClickException("; ".join(problems))


def register(group: click.Group) -> None:
    """Add the commands of this module to the ``bench`` group."""
    group.add_command(bench_retain)
