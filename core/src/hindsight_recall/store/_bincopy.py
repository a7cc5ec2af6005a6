"""Binary COPY of fixed-width columns straight from numpy arrays, without a Python object per row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
TRAILER = b"\xff\xff"
CHUNK = 1_000_000


def record(columns: Sequence[np.ndarray]) -> np.dtype:
    """The binary COPY tuple of these columns: a field count, then a length and a value per field.

    :param columns: one array per column; each dtype must already be PostgreSQL's binary form
        (``V16`` for uuid, ``>f8`` for float8, ``S<n>`` for text of exactly n bytes).
    """
    fields: list[tuple[str, Any]] = [("count", ">i2")]
    for i, column in enumerate(columns):
        fields += [(f"len{i}", ">i4"), (f"col{i}", column.dtype)]
    return np.dtype(fields)


def encode(columns: Sequence[np.ndarray], start: int = 0, stop: int | None = None) -> bytes:
    """Rows ``start:stop`` of the columns as binary COPY tuples (no signature or trailer).

    :param columns: equally long arrays, as for :func:`record`.
    :param start: the first row.
    :param stop: one past the last row (default: all).
    """
    parts = [c[start:stop] for c in columns]
    block = np.empty(len(parts[0]), dtype=record(columns))
    block["count"] = len(parts)
    for i, part in enumerate(parts):
        block[f"len{i}"] = part.dtype.itemsize
        block[f"col{i}"] = part
    return block.tobytes()


def bank_column(bank_id: str, rows: int) -> np.ndarray:
    """A text column holding ``bank_id`` on every row (the bank key of rows written by COPY)."""
    encoded = bank_id.encode("utf-8", "surrogatepass")
    return np.full(rows, encoded, dtype=f"S{len(encoded)}")


async def copy_columns(raw: Any, statement: str, columns: Sequence[np.ndarray]) -> int:
    """Run ``COPY ... FROM STDIN (FORMAT BINARY)`` with the rows of ``columns``; return the row count.

    :param raw: a psycopg async connection.
    :param statement: the COPY statement, listing the columns in the same order.
    :param columns: equally long arrays, as for :func:`record`.
    """
    rows = len(columns[0]) if columns else 0
    async with raw.cursor().copy(statement) as copy:
        await copy.write(SIGNATURE)
        for start in range(0, rows, CHUNK):
            await copy.write(encode(columns, start, start + CHUNK))
        await copy.write(TRAILER)
    return rows
