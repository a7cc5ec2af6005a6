"""PostgreSQL's storage limits, checked before a value reaches the database.

A value past one of these limits would fail deep inside a load (or, for dates, on every later
recall that reads the row), so retain rejects it up front with a message naming the limit.
"""

from __future__ import annotations

from datetime import UTC, datetime

#: ``int`` columns (``proof_count``) are 32-bit.
INT32_MAX = 2**31 - 1
#: B-tree and GIN index entries are capped near 2,700 bytes (a third of a page); ids, tags and
#: entity names are index keys, and some keys join a bank id with a memory or document id.
MAX_KEY_BYTES = 1024
#: A ``tsvector`` holds at most 1 MiB of lexemes; CJK bigrams can double the text, so the indexed
#: text (text plus context) stays at a quarter of that.
MAX_INDEXED_TEXT_BYTES = 262_144
#: Rows are read back as Python datetimes in the session's time zone, so stored instants keep a
#: day's margin inside Python's years 1..9999.
MIN_DATE = datetime(1, 1, 2, tzinfo=UTC)
MAX_DATE = datetime(9999, 12, 30, 23, 59, 59, tzinfo=UTC)


def unicode_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as PostgreSQL UTF-8 text, or ``None`` when it can."""
    if "\x00" in value:
        return "contains a NUL byte, which PostgreSQL text cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode: a lone surrogate {value[exc.start]!r} at character {exc.start}"
    return None


def key_problem(value: str) -> str | None:
    """Why ``value`` cannot be an index key (too long, or not storable text)."""
    problem = unicode_problem(value)
    if problem:
        return problem
    size = len(value.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        return f"is {size} bytes long (UTF-8); ids, tags and names are index keys, limited to {MAX_KEY_BYTES} bytes"
    return None


def date_problem(value: datetime) -> str | None:
    """Why ``value`` is outside the range a stored date must keep, or ``None``."""
    try:
        utc = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except OverflowError:
        utc = None
    if utc is None or not MIN_DATE <= utc <= MAX_DATE:
        return (f"{value.isoformat()} is outside the supported range {MIN_DATE.date()} .. {MAX_DATE.date()} "
                "(in UTC)")
    return None


def int32_problem(value: int) -> str | None:
    """Why ``value`` does not fit a 32-bit ``int`` column, or ``None``."""
    if not -INT32_MAX - 1 <= value <= INT32_MAX:
        return f"{value} does not fit a 32-bit integer (at most {INT32_MAX})"
    return None


def place_problem(value: object) -> str | None:
    """Why ``value`` cannot be a memory's ``position`` (a non-negative 32-bit integer), or ``None``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return f"expected a non-negative integer, got {value!r}"
    return int32_problem(value)
