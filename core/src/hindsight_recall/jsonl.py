"""Memories as JSON lines: each line read and validated (one JSON object per line), and written back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import RetainError
from .limits import unicode_problem
from .types import FACT_TYPES, Memory

MAX_TEXT_CHARS = 1_000_000
_LIST_FIELDS = ("entities", "tags", "causes", "sources")
_STRING_FIELDS = ("context", "chunk", "document_id", "bank")
_DATE_FIELDS = ("occurred_at", "occurred_start", "occurred_end", "mentioned_at")
KNOWN_FIELDS = frozenset(
    {"id", "text", "type", "proof_count", "position", "metadata", *_LIST_FIELDS, *_STRING_FIELDS, *_DATE_FIELDS}
)


def parse_datetime(value: Any, field: str, line: int | None = None) -> datetime:
    """Parse an ISO-8601 timestamp (``Z`` allowed); naive values are read as UTC."""
    if not isinstance(value, str):
        raise RetainError(line, field, f"expected an ISO-8601 string, got {type(value).__name__}")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise RetainError(line, field, f"{value!r} is not an ISO-8601 date such as 2024-05-01T12:00:00Z") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _string(value: Any, field: str, line: int | None, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise RetainError(line, field, "is required")
        return None
    if not isinstance(value, str):
        raise RetainError(line, field, f"expected a string, got {type(value).__name__}")
    problem = unicode_problem(value)
    if problem:
        raise RetainError(line, field, problem)
    if len(value) > MAX_TEXT_CHARS:
        raise RetainError(line, field, f"is {len(value)} characters long; the limit is {MAX_TEXT_CHARS}")
    if required and not value.strip():
        raise RetainError(line, field, "must not be empty")
    return value


def _strings(value: Any, field: str, line: int | None, *, strip: bool = True) -> tuple[str, ...]:
    """A list of non-blank strings, without repeats; names are stripped, ids (``strip=False``) kept exact."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RetainError(line, field, f"expected a list of strings, got {type(value).__name__}")
    items = tuple(_string(v, f"{field}[{i}]", line, required=True) or "" for i, v in enumerate(value))
    return tuple(dict.fromkeys(s.strip() if strip else s for s in items))


def parse_memory(obj: Any, line: int | None = None) -> tuple[str | None, Memory]:
    """Validate one JSON object; return its ``bank`` field (or None) and the memory.

    :param obj: the decoded JSON object.
    :param line: its line number, for error messages.
    """
    if not isinstance(obj, Mapping):
        raise RetainError(line, "memory", f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - KNOWN_FIELDS)
    if unknown:
        raise RetainError(line, unknown[0], f"unknown field (known: {', '.join(sorted(KNOWN_FIELDS))})")
    mem_id = _string(obj.get("id"), "id", line, required=True)
    text = _string(obj.get("text"), "text", line, required=True)
    fact_type = obj.get("type", "world")
    if fact_type not in FACT_TYPES:
        raise RetainError(line, "type", f"{fact_type!r} is not one of {', '.join(FACT_TYPES)}")
    dates = {f: parse_datetime(obj[f], f, line) for f in _DATE_FIELDS if obj.get(f) is not None}
    if "occurred_at" in dates and ({"occurred_start", "occurred_end"} & dates.keys()):
        raise RetainError(line, "occurred_at", "give either occurred_at or occurred_start/occurred_end")
    start = dates.get("occurred_start", dates.get("occurred_at"))
    end = dates.get("occurred_end", dates.get("occurred_at"))
    if start and end and end < start:
        raise RetainError(line, "occurred_end", "is before occurred_start")
    proof = obj.get("proof_count", 1)
    if not isinstance(proof, int) or isinstance(proof, bool) or proof < 1:
        raise RetainError(line, "proof_count", f"expected a positive integer, got {proof!r}")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and "\x00" not in k + v for k, v in metadata.items()
    ):
        raise RetainError(line, "metadata", "expected an object of string keys to string values")
    bank = _string(obj.get("bank"), "bank", line)
    fields: dict[str, Any] = dict(
        id=mem_id or "",
        text=text or "",
        type=fact_type,
        occurred_start=start,
        occurred_end=end,
        mentioned_at=dates.get("mentioned_at"),
        context=_string(obj.get("context"), "context", line),
        entities=_strings(obj.get("entities"), "entities", line),
        tags=_strings(obj.get("tags"), "tags", line),
        chunk=_string(obj.get("chunk"), "chunk", line),
        document_id=_string(obj.get("document_id"), "document_id", line),
        proof_count=proof,
        metadata=dict(metadata),
        # ids are exact strings, spaces included: a reference names its memory as its `id` does
        causes=_strings(obj.get("causes"), "causes", line, strip=False),
        source_ids=_strings(obj.get("sources"), "sources", line, strip=False),
        position=obj.get("position"),  # checked by Memory, with PostgreSQL's limits
    )
    try:
        memory = Memory(**fields)
    except RetainError as exc:  # Memory checks PostgreSQL's limits itself; add the line number
        raise RetainError(line, exc.field, exc.why) from None
    return bank, memory


def memory_line(memory: Memory) -> dict[str, Any]:
    """The JSON object :func:`parse_memory` reads back as ``memory`` (fields at their defaults left out)."""
    line: dict[str, Any] = {"id": memory.id, "text": memory.text, "type": memory.type}
    for name in ("occurred_start", "occurred_end", "mentioned_at"):
        if (value := getattr(memory, name)) is not None:
            line[name] = value.isoformat()
    for name in ("context", "chunk", "document_id", "position"):
        if (value := getattr(memory, name)) is not None:
            line[name] = value
    for name, key in (("entities", "entities"), ("tags", "tags"), ("causes", "causes"), ("source_ids", "sources")):
        if values := getattr(memory, name):
            line[key] = list(values)
    if memory.metadata:
        line["metadata"] = dict(memory.metadata)
    if memory.proof_count != 1:
        line["proof_count"] = memory.proof_count
    return line


def read_jsonl(path: Path | str, default_bank: str | None = None) -> Iterator[tuple[str, int, Memory]]:
    """Yield (bank, line number, memory) for every non-blank line of a JSONL file."""
    with open(path, encoding="utf-8") as handle:
        yield from parse_lines(_decoded(handle, path), default_bank)


def _decoded(handle: Iterable[str], path: Path | str) -> Iterator[str]:
    """The file's lines; bytes that are not UTF-8 become a :class:`RetainError` naming the line."""
    number = 0
    lines = iter(handle)
    while True:
        try:
            raw = next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise RetainError(number + 1, "file", f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                                                  "cannot be decoded); save it as UTF-8") from None
        number += 1
        yield raw


def parse_lines(lines: Iterable[str], default_bank: str | None = None) -> Iterator[tuple[str, int, Memory]]:
    """Parse JSONL lines; a memory's own ``bank`` wins over ``default_bank``."""
    if default_bank is not None and unicode_problem(default_bank):
        raise RetainError(None, "bank", f"--bank {unicode_problem(default_bank)}")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RetainError(number, "json", f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        bank, memory = parse_memory(obj, number)
        bank = bank or default_bank
        if not bank:
            raise RetainError(number, "bank", "no bank: give --bank or a 'bank' field on every line")
        yield bank, number, memory
