"""Reading an extraction reply into facts, or saying exactly what is wrong with it.

Whatever a reply holds ends up in the bank, so nothing is taken on trust: the reply must fit the
schema, every date must be one PostgreSQL can store and no range may end before it starts, and a
causal link must point at another fact of the same reply. The first problem found is named (with
the fact's place and field) so that the repair request can tell the model what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from .. import limits
from ..llm.structured import cut_off, json_in, schema_problem
from ..llm.types import ChatReply

#: what a model writes for a dimension that does not apply
NOT_APPLICABLE = frozenset({"", "n/a", "na", "none", "null", "unknown"})


@dataclass(frozen=True)
class Fact:
    """One fact of an item: its text, type, dates, entities, the item's facts that caused it, its chunk.

    :param text: ``what``, then ``when``, ``where``, ``who`` and ``why`` where they apply, as upstream
        joins them, so the stored text carries all five.
    :param fact_type: ``world`` or ``experience`` (the model's ``assistant``).
    :param caused_by: places of this item's facts that caused this one (never itself).
    :param chunk: the place of the chunk it was found in, among the item's chunks.
    """

    text: str
    fact_type: str = "world"
    occurred_start: datetime | None = None
    occurred_end: datetime | None = None
    entities: tuple[str, ...] = ()
    caused_by: tuple[int, ...] = ()
    chunk: int = 0


@dataclass(frozen=True)
class Reading:
    """The facts of one reply, or why it cannot be used (``problem``)."""

    facts: tuple[Fact, ...] = ()
    problem: str | None = None


class _Refused(ValueError):
    """One fact's problem, raised from deep in the reading and returned as the reply's problem."""


def read_facts(reply: ChatReply, schema: Mapping[str, Any], *, causal: bool, zone: tzinfo | None,
               chunk: int) -> Reading:
    """Read one reply.

    :param reply: the model's reply.
    :param schema: the reply schema the request carried.
    :param causal: causal relations were asked for (otherwise any are ignored).
    :param zone: the zone of a date given without one: the item's timestamp's, else UTC.
    :param chunk: the chunk the reply is about, recorded on each fact.
    """
    cut = cut_off(reply.finish_reason, "HINDSIGHT_API_RETAIN_MAX_COMPLETION_TOKENS")
    parsed = json_in(reply.text)
    if isinstance(parsed, list) and all(isinstance(f, dict) for f in parsed):
        parsed = {"facts": parsed}  # the array alone, as some models answer
    if not isinstance(parsed, dict):
        return Reading(problem=f"it is not a JSON object{cut}")
    problem = schema_problem(parsed, schema, "reply")
    if problem is not None:
        return Reading(problem=problem + cut)
    raw: list[dict[str, Any]] = parsed["facts"]
    try:
        facts = tuple(_fact(f, i, len(raw), causal, zone or UTC, chunk) for i, f in enumerate(raw))
    except _Refused as exc:
        return Reading(problem=str(exc))
    return Reading(facts)


def _fact(raw: Mapping[str, Any], index: int, count: int, causal: bool, zone: tzinfo, chunk: int) -> Fact:
    at = f"reply.facts.{index}"
    what = raw["what"].strip()
    if not what:
        raise _Refused(f"{at}.what: must not be empty")
    labels = (("when", "When: "), ("where", "Where: "), ("who", "Involving: "), ("why", ""))
    text = " | ".join([what, *(label + v for name, label in labels if (v := _given(raw.get(name))))])
    _check(limits.unicode_problem(text), f"{at}.what")
    start = _date(raw.get("occurred_start"), f"{at}.occurred_start", zone)
    end = _date(raw.get("occurred_end"), f"{at}.occurred_end", zone)
    start, end = start or end, end or start
    if start is not None and end is not None and end < start:
        raise _Refused(f"{at}: occurred_end {end.isoformat()} is before occurred_start {start.isoformat()}")
    return Fact(text, "experience" if raw["fact_type"] == "assistant" else "world", start, end,
                _entities(raw.get("entities") or (), at),
                _causes(raw.get("causal_relations") or (), index, count, at) if causal else (), chunk)


def _given(value: Any) -> str | None:
    """The value of a dimension, or ``None`` when the model wrote that it does not apply."""
    text = value.strip() if isinstance(value, str) else ""
    return None if text.lower() in NOT_APPLICABLE else text


def _date(value: Any, at: str, zone: tzinfo) -> datetime | None:
    text = _given(value)
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise _Refused(f"{at}: {text!r} is not an ISO 8601 date such as 2024-06-09 or 2024-06-09T14:30:00Z") from None
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)
    _check(limits.date_problem(parsed), at)
    return parsed


def _entities(given: Sequence[str], at: str) -> tuple[str, ...]:
    for number, name in enumerate(given):
        _check(limits.key_problem(name.strip()), f"{at}.entities.{number}")
    return unique_names(given)


def unique_names(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` trimmed, blank ones dropped, each once: the first spelling of names alike but for case.

    :param names: entity names.
    """
    seen: dict[str, str] = {}
    for name in (n.strip() for n in names):
        if name:
            seen.setdefault(name.casefold(), name)
    return tuple(seen.values())


def _causes(relations: Sequence[Mapping[str, Any]], index: int, count: int, at: str) -> tuple[int, ...]:
    causes: list[int] = []
    for number, relation in enumerate(relations):
        target = int(relation["target_index"])  # the schema's integer admits 1.0
        where = f"{at}.causal_relations.{number}.target_index"
        if target == index:
            raise _Refused(f"{where}: {target} is the fact itself; a fact cannot cause itself")
        if not 0 <= target < count:
            raise _Refused(f"{where}: {target} is out of range; the reply has {count} facts (0 to {count - 1})")
        if target not in causes:
            causes.append(target)
    return tuple(causes)


def _check(problem: str | None, at: str) -> None:
    if problem is not None:
        raise _Refused(f"{at}: {problem}")
