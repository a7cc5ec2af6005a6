"""Where one ``bench scale`` run puts its memories: the banks' names, how a size is spread over them,
which bank each recall asks, the server they live on, their share of its disk, and their removal.

Every bank id starts with the run's prefix (``bench-scale-<hex>``), so a run on a shared server
(``--database-url``) writes to no bank it did not make, and deletes exactly the banks it made, also
when it fails or is interrupted.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ..errors import redact
from .synthetic import SyntheticBank, split

#: the stride of bench/banks.py: a prime, so that consecutive questions go to different banks and
#: every bank is asked before one is asked twice (for fewer than 7,919 banks)
STRIDE = 7919


def run_prefix() -> str:
    """A bank id prefix no other run has: ``bench-scale-`` and eight hex digits."""
    return f"bench-scale-{secrets.token_hex(4)}"


def check_database_url(url: str) -> str:
    """``url`` if it names a PostgreSQL server.

    :raises ValueError: it does not parse as a ``postgresql://`` URL (the message shows the form).
    """
    try:
        backend = make_url(url).get_backend_name()
    except (ArgumentError, ValueError):
        backend = None
    if backend != "postgresql":
        raise ValueError(f"{redact(url)!r} is not a PostgreSQL URL; expected "
                         "postgresql://user:password@host:port/database")
    return url


def spread(bank: SyntheticBank, count: int, prefix: str) -> dict[str, tuple[Sequence[Any], Any]]:
    """The generated memories as ``count`` banks ``<prefix>-00000`` upwards: bank id -> (memories, vectors).

    The slices are contiguous (:func:`hindsight_recall.bench.synthetic.split`); fewer than ``count`` come
    out when the last slices would be empty.
    """
    if count == 1:  # the bank as generated: no copy of a million memories
        return {f"{prefix}-00000": (bank.memories, bank.vectors)}
    return {f"{prefix}-{name.removeprefix('bank-')}": part for name, part in split(bank, count).items()}


def round_robin(bank_ids: Sequence[str], count: int) -> list[str]:
    """The bank each of ``count`` recalls asks, in turn (with bench/banks.py's stride)."""
    return [bank_ids[(k * STRIDE) % len(bank_ids)] for k in range(count)]


@contextlib.asynccontextmanager
async def bench_engine(make: Callable[..., Any], database_url: str | None, data_dir: Path, bank_ids: Sequence[str],
                       keep: bool) -> AsyncIterator[Any]:
    """An open engine on ``database_url``, or on a fresh embedded server in ``data_dir`` (``None``).

    On exit, also after an error or Ctrl-C, the banks ``bank_ids`` are deleted from the server at
    ``database_url``, and the embedded server's directory is removed unless ``keep``.
    """
    from ..engine import Engine  # late: keeps the module import cheap

    if database_url is None:
        shutil.rmtree(data_dir, ignore_errors=True)  # a fresh server per size: sizes never share indexes
    # database_url=None overrides HINDSIGHT_API_DATABASE_URL: without --database-url no server is written to
    engine = Engine(make(reranker_provider="rrf", database_url=database_url, embedded_data_dir=data_dir))
    try:
        async with engine:
            try:
                yield engine
            finally:
                if database_url is not None:  # leave the server as it was found
                    await delete_banks(engine, bank_ids)
    finally:
        if database_url is None and not keep:
            shutil.rmtree(data_dir, ignore_errors=True)


async def delete_banks(engine: Any, bank_ids: Sequence[str]) -> int:
    """Delete each of ``bank_ids`` that exists, one call per bank (its index slot, if any, given back);
    how many existed."""
    deleted = 0
    for bank_id in bank_ids:
        deleted += await engine.delete_bank(bank_id)
    return deleted


async def share_on_disk(engine: Any, bank_ids: Sequence[str], tables: Sequence[str]) -> dict[str, Any]:
    """Bytes on disk per table that belong to ``bank_ids``, with the memory links they hold.

    On a server of its own (the embedded one) a table's whole size is the run's. On a shared server
    each table's size is shared out by the run's share of its rows (counted), and on a Citus
    coordinator the size is ``citus_total_relation_size`` (every shard on every node).
    """
    shared = engine.settings.database_url is not None
    found = await engine.diagnostics.disk_share(bank_ids, tables, shared=shared)
    return {"bytes": found["bytes"], "links": found["links"], "shared_with_other_banks": shared,
            "size_function": found["size_function"]}
