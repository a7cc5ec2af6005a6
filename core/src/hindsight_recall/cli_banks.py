"""``hindsight-recall bank list | stats | delete | forget``: looking after banks from the command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from . import cli_remote

T = TypeVar("T")


def _interactive() -> bool:
    """Whether a person can answer a confirmation prompt."""
    return sys.stdin.isatty()


def _missing(bank_id: str) -> click.ClickException:
    return click.ClickException(f"bank {bank_id!r} does not exist (see 'hindsight-recall bank list')")


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the banks as JSON.")
@cli_remote.URL
@cli_remote.API_KEY
def bank_list(as_json: bool, url: str | None, api_key: str | None) -> None:
    """List the banks with their memory counts."""
    from .cli_engine import open_engine, run

    async def go() -> list[dict[str, Any]]:
        if url:
            return cli_remote.bank_list(url, api_key)
        async with open_engine() as engine:
            return await engine.list_banks()  # type: ignore[no-any-return]

    found = run(go)
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    for item in found:
        click.echo(f"{item['bank_id']}\t{item['memories']}")
    if not found:
        click.echo("no banks", err=True)


@click.command("stats")
@click.argument("bank_id")
@cli_remote.URL
@cli_remote.API_KEY
def bank_stats(bank_id: str, url: str | None, api_key: str | None) -> None:
    """Show what BANK_ID holds, as JSON."""
    from .cli_engine import open_engine, run

    async def go() -> dict[str, Any] | None:
        if url:
            return _remote(lambda: cli_remote.bank_stats(url, api_key, bank_id))
        async with open_engine() as engine:
            return await engine.bank_stats(bank_id)  # type: ignore[no-any-return]

    stats = run(go)
    if stats is None:
        raise _missing(bank_id)
    click.echo(json.dumps(stats, indent=2, ensure_ascii=False))


@click.command("delete")
@click.argument("bank_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@cli_remote.URL
@cli_remote.API_KEY
def bank_delete(bank_id: str, yes: bool, url: str | None, api_key: str | None) -> None:
    """Delete BANK_ID and everything in it."""
    from .cli_engine import open_engine, run

    if not yes:
        if not _interactive():
            raise click.ClickException(f"refusing to delete bank {bank_id!r} without --yes (no terminal to ask)")
        click.confirm(f"Delete bank {bank_id!r} and all its memories?", abort=True)

    async def go() -> bool:
        if url:
            return bool(_remote(lambda: cli_remote.bank_delete(url, api_key, bank_id)))
        async with open_engine() as engine:
            return await engine.delete_bank(bank_id)  # type: ignore[no-any-return]

    if not run(go):
        raise _missing(bank_id)
    click.echo(f"deleted bank {bank_id!r}")


@click.command("forget")
@click.argument("bank_id")
@click.argument("ids", nargs=-1, required=True)
@cli_remote.URL
@cli_remote.API_KEY
def bank_forget(bank_id: str, ids: tuple[str, ...], url: str | None, api_key: str | None) -> None:
    """Remove the memories IDS from BANK_ID, with their links and unused chunks."""
    from .cli_engine import open_engine, run

    async def go() -> int | None:
        if url:
            return _remote(lambda: cli_remote.bank_forget(url, api_key, bank_id, ids))
        async with open_engine() as engine:
            if await engine.bank_stats(bank_id) is None:
                return None
            return await engine.forget(bank_id, ids)  # type: ignore[no-any-return]

    removed = run(go)
    if removed is None:
        raise _missing(bank_id)
    click.echo(f"forgot {removed} of {len(set(ids))} memories in bank {bank_id!r}")


def _remote(call: Callable[[], T]) -> T | None:
    """A ``--url`` call; ``None`` when the service says the bank does not exist (as the local path does)."""
    from .service.client import ServiceCallError

    try:
        return call()
    except ServiceCallError as exc:
        if exc.code == "bank_not_found":
            return None
        raise


def register(group: click.Group) -> None:
    """Add the bank commands to the ``bank`` group."""
    for command in (bank_list, bank_stats, bank_delete, bank_forget):
        group.add_command(command)
