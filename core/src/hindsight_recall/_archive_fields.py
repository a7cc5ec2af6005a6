"""Reading the fields of a transfer archive's entries, each checked: a malformed one is refused with
its entry and field named (see :mod:`.archive_reader`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .archive import NO_DOCUMENT, OURS
from .errors import RetainError
from .jsonl import parse_datetime
from .types import FACT_TYPES, Memory

LINK_TYPES = ("semantic", "temporal", "causes", "caused_by", "enables", "prevents")


class Refused(Exception):
    """The archive is not one this server takes; the message says where and why."""


def depth_checked(value: Any, limit: int, where: str) -> Any:
    """``value`` when no container in it is nested deeper than ``limit``; else :class:`Refused`."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise Refused(f"{where}: nested deeper than {limit} levels (HINDSIGHT_API_ARCHIVE_MAX_DEPTH)")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return value


def read_text(obj: dict[str, Any], name: str, where: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise Refused(f"{where}.{name}: must be a string, got {type(value).__name__}")
    return value


def read_date(obj: dict[str, Any], name: str, where: str, *, upstream: bool) -> datetime | None:
    value = obj.get(name)
    if value is None:
        return None
    try:
        parsed = parse_datetime(value, name)
    except RetainError as exc:
        raise Refused(f"{where}.{name}: {exc.why}") from None
    # upstream writes an open bound as year 1 or 9999: read it as unknown, as upstream's importer does
    return None if upstream and parsed.year in (1, 9999) else parsed


def _strings(obj: dict[str, Any], name: str, where: str) -> tuple[str, ...]:
    value = obj.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Refused(f"{where}.{name}: must be a list of strings")
    return tuple(dict.fromkeys(v for v in value if v.strip()))


def _object(obj: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    value = obj.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(f"{where}.{name}: must be an object, got {type(value).__name__}")
    return value


def _integer(obj: dict[str, Any], name: str, where: str) -> int | None:
    value = obj.get(name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise Refused(f"{where}.{name}: must be an integer, got {value!r}"[:300])
    return value


def _metadata(obj: dict[str, Any], name: str, where: str) -> dict[str, str]:
    found = _object(obj, name, where)
    for key, value in found.items():
        if not isinstance(value, str | int | float | bool) or value is None:
            raise Refused(f"{where}.{name}.{key}: must be a string, got {type(value).__name__}")
    return {str(k): str(v) for k, v in found.items()}


def _memory(fields: dict[str, Any], where: str) -> Memory:
    fields["causes"] = tuple(dict.fromkeys(fields.get("causes") or ()))
    try:
        return Memory(**fields)
    except RetainError as exc:
        raise Refused(f"{where}.{exc.field}: {exc.why}") from None


def read_document(doc: Any, entry: str, *, own_links: bool, merge: bool
                  ) -> tuple[str, list[tuple[Memory, datetime | None]], Any]:
    """A document entry as (document id, its memories with their creation times, its dates and chunk
    indexes): ids are ours, else upstream's source id, else the document id and ordinal; causes come from
    upstream's causal relations unless the archive carries our links (``own_links``). In a ``merge`` the
    facts cite no sources (they would name memories outside the document)."""
    if not isinstance(doc, dict):
        raise Refused(f"{entry}: must be a JSON object")
    raw_id = doc.get("id")
    if not isinstance(raw_id, str) or not raw_id:
        raise Refused(f"{entry}: id: a document needs a non-empty string id")
    where = f"{entry} (document {raw_id!r})"
    for name in ("facts", "chunks"):
        if not isinstance(doc.get(name, []), list):
            raise Refused(f"{where}: {name}: must be a list")
    chunks: dict[int, str] = {}
    for number, chunk in enumerate(doc.get("chunks") or []):
        at = f"{where}: chunks[{number}]"
        if not isinstance(chunk, dict):
            raise Refused(f"{at}: must be an object")
        index, text = _integer(chunk, "chunk_index", at), chunk.get("chunk_text")
        if index is None or not isinstance(text, str):
            raise Refused(f"{at}: a chunk needs an integer chunk_index and a string chunk_text")
        chunks[index] = text
    document_id = None if raw_id == NO_DOCUMENT else raw_id
    facts = doc.get("facts") or []
    fields: list[dict[str, Any]] = []
    created: list[datetime | None] = []
    for index, fact in enumerate(facts):
        at = f"{where}: facts[{index}]"
        if not isinstance(fact, dict):
            raise Refused(f"{at}: must be an object")
        if not isinstance(fact.get("text"), str):
            raise Refused(f"{at}.text: a fact needs a string text, got {type(fact.get('text')).__name__}")
        ours = _object(fact, OURS, at)
        upstream = OURS not in fact
        fact_type = fact.get("fact_type", "world")
        if fact_type not in FACT_TYPES:
            raise Refused(f"{at}.fact_type: {fact_type!r} is not one of {', '.join(FACT_TYPES)}"[:300])
        memory_id = read_text(ours, "id", f"{at}.{OURS}") or read_text(fact, "source_id", at) or f"{raw_id}:{index}"
        start, end = read_date(fact, "occurred_start", at, upstream=upstream), read_date(fact, "occurred_end", at,
                                                                                 upstream=upstream)
        mentioned = read_date(fact, "mentioned_at", at, upstream=upstream)
        event = read_date(fact, "event_date", at, upstream=upstream)
        chunk_index = _integer(fact, "chunk_index", at)
        relations = fact.get("causal_relations")
        if relations is not None and not isinstance(relations, list):
            raise Refused(f"{at}.causal_relations: must be a list, got {type(relations).__name__}")
        for number, rel in enumerate(relations or []):
            if not isinstance(rel, dict):
                raise Refused(f"{at}.causal_relations[{number}]: must be an object")
            _integer(rel, "target_fact_index", f"{at}.causal_relations[{number}]")
            read_text(rel, "relation_type", f"{at}.causal_relations[{number}]")
        proof = _integer(ours, "proof_count", f"{at}.{OURS}")
        fields.append(dict(
            id=memory_id, text=fact["text"], type=fact_type, occurred_start=start, occurred_end=end,
            mentioned_at=mentioned or (None if start or end else event), context=read_text(fact, "context", at),
            entities=_strings(fact, "entities", at), tags=_strings(fact, "tags", at),
            chunk=chunks.get(chunk_index) if chunk_index is not None else None, document_id=document_id,
            proof_count=1 if proof is None else proof, metadata=_metadata(fact, "metadata", at), causes=[],
            source_ids=() if merge else _strings(ours, "sources", f"{at}.{OURS}"),
            position=_integer(ours, "position", f"{at}.{OURS}"),
        ))
        created.append(read_date(fact, "created_at", at, upstream=False))
    if not own_links:
        for index, fact in enumerate(facts):
            for rel in fact.get("causal_relations") or []:
                target = rel.get("target_fact_index")
                if not isinstance(target, int) or not 0 <= target < len(fields) or target == index:
                    continue
                kind = rel.get("relation_type")
                if kind == "causes":
                    fields[index]["causes"].append(fields[target]["id"])
                elif kind == "caused_by":
                    fields[target]["causes"].append(fields[index]["id"])
    memories = [(_memory(f, f"{where}: facts[{i}]"), created[i]) for i, f in enumerate(fields)]
    ours_doc = _object(doc, OURS, where)
    dates = (read_date(doc, "created_at", where, upstream=False), read_date(ours_doc, "updated_at", f"{where}.{OURS}",
                                                                    upstream=False))
    indexes = {text: index for index, text in chunks.items()}
    return raw_id, memories, (dates, indexes)


def read_observation(obs: Any, where: str, index: int, by_document: dict[str, list[str]]
                     ) -> tuple[Memory, datetime | None]:
    """An observation as a memory; upstream's sources (document and fact ordinal) become memory ids."""
    if not isinstance(obs, dict) or not isinstance(obs.get("text"), str):
        raise Refused(f"{where}.text: an observation needs a string text")
    ours = _object(obs, OURS, where)
    upstream = OURS not in obs
    sources = _strings(ours, "sources", f"{where}.{OURS}")
    cited = obs.get("sources")
    if cited is not None and not isinstance(cited, list):
        raise Refused(f"{where}.sources: must be a list, got {type(cited).__name__}")
    if not sources:
        found: list[str] = []
        for number, source in enumerate(cited or []):
            if not isinstance(source, dict):
                raise Refused(f"{where}.sources[{number}]: must be an object")
            fact_index = _integer(source, "fact_index", f"{where}.sources[{number}]")
            ids = by_document.get(str(source.get("document_id")), [])
            if fact_index is not None and 0 <= fact_index < len(ids):
                found.append(ids[fact_index])
        sources = tuple(dict.fromkeys(found))
    start, end = read_date(obs, "occurred_start", where, upstream=upstream), read_date(obs, "occurred_end", where,
                                                                               upstream=upstream)
    proof = _integer(obs, "proof_count", where)
    memory = _memory(dict(
        id=read_text(ours, "id", f"{where}.{OURS}") or read_text(obs, "source_id", where) or f"observation:{index}",
        text=obs["text"], type="observation", occurred_start=start, occurred_end=end,
        mentioned_at=read_date(obs, "mentioned_at", where, upstream=upstream) or (
            None if start or end else read_date(obs, "event_date", where, upstream=upstream)),
        context=read_text(ours, "context", f"{where}.{OURS}"), entities=_strings(ours, "entities", f"{where}.{OURS}"),
        tags=_strings(obs, "tags", where), chunk=read_text(ours, "chunk", f"{where}.{OURS}"),
        proof_count=proof or 1, metadata=_metadata(ours, "metadata", f"{where}.{OURS}"),
        source_ids=sources, position=_integer(ours, "position", f"{where}.{OURS}"),
    ), where)
    return memory, read_date(obs, "created_at", where, upstream=False)


def read_link(obj: Any, where: str) -> tuple[str, str, str, float]:
    """One line of our links entry: (from, to, type, weight)."""
    if not isinstance(obj, dict):
        raise Refused(f"{where}: must be a JSON object")
    for name in ("from", "to"):
        if not isinstance(obj.get(name), str):
            raise Refused(f"{where}.{name}: must be a memory id (a string)")
    kind, weight = obj.get("type"), obj.get("weight")
    if kind not in LINK_TYPES:
        raise Refused(f"{where}.type: {kind!r} is not one of {', '.join(LINK_TYPES)}"[:300])
    if not isinstance(weight, int | float) or isinstance(weight, bool) or not 0 <= weight <= 1:
        raise Refused(f"{where}.weight: must be a number from 0 to 1, got {weight!r}"[:300])
    return obj["from"], obj["to"], kind, float(weight)
