"""Shaping the answer: what it must read (:func:`wanted`), then results, entities, chunks and the trace
built from what was read (:func:`build_response`), without reading anything."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any

from ..tokens import TokenCounter
from ..types import Candidate, Hit, MemoryRow, TimeWindow
from .complete import Entities, Shown, fill, incomplete
from .request import RecallRequest
from .trace import Trace


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def result_json(
    c: Candidate, external: Mapping[uuid.UUID, str], entities: Mapping[uuid.UUID, list[str]] | None
) -> dict[str, Any]:
    """One result of a recall; optional fields appear only when set (a field at a time: a recall
    shapes a hundred results or more)."""
    row = c.row
    out: dict[str, Any] = {"id": row.external_id, "text": row.text, "type": row.fact_type}
    if entities is not None:
        out["entities"] = entities.get(row.id, [])
    if row.context is not None:
        out["context"] = row.context
    if row.occurred_start is not None:
        out["occurred_start"] = row.occurred_start.isoformat()
    if row.occurred_end is not None:
        out["occurred_end"] = row.occurred_end.isoformat()
    if row.mentioned_at is not None:
        out["mentioned_at"] = row.mentioned_at.isoformat()
    if row.document_id is not None:
        out["document_id"] = row.document_id
    if row.metadata:
        out["metadata"] = row.metadata
    if row.chunk_id is not None:
        out["chunk_id"] = row.chunk_id
    if row.tags:
        out["tags"] = list(row.tags)
    if row.source_memory_ids:
        out["source_fact_ids"] = [external.get(s, str(s)) for s in row.source_memory_ids]
    out["scores"] = {"final": c.final, "reranker": c.reranker_score, "semantic": c.semantic, "keyword": c.keyword,
                     "context": c.context}
    return out


@dataclass(frozen=True)
class Wanted:
    """What an answer needs read beyond the arms' rows (see :func:`~.complete.read_shown`)."""

    #: memories to read whole: the shown rows an arm read in part, sources of observations, and with the
    #: trace every row it names
    ids: list[uuid.UUID]
    #: memory -> the shown results it gives entities to (itself, and an observation's sources)
    owners: dict[uuid.UUID, list[uuid.UUID]]
    #: chunks of the top results, in rank order
    chunk_ids: list[str]


def wanted(req: RecallRequest, packed: Sequence[Candidate], top: Sequence[Candidate], ranked: Sequence[Candidate],
           lists: Mapping[str, Sequence[Hit]]) -> Wanted:
    """What the answer to ``req`` must read: one read after packing, so only shown rows are read whole."""
    ids = [*incomplete(packed), *dict.fromkeys(s for c in packed for s in c.row.source_memory_ids)]
    if req.trace:
        ids += [*incomplete(ranked), *(h.row.id for hits in lists.values() for h in hits if not h.row.complete)]
    owners = _entity_owners(packed) if req.include_entities is not None else {}
    chunk_ids = list(dict.fromkeys(c.row.chunk_id for c in top if c.row.chunk_id)) \
        if req.include_chunks is not None else []
    return Wanted(list(dict.fromkeys(ids)), owners, chunk_ids)


def build_response(
    req: RecallRequest,
    tokens: TokenCounter,
    packed: list[Candidate],
    shown: Shown,
    want: Wanted,
    truncated: bool,
    trace: Trace,
    *,
    limit: int,
    embedding: Sequence[float],
    window: TimeWindow | None,
    lists: Mapping[str, MutableSequence[Hit]],
    ranked: list[Candidate],
) -> dict[str, Any]:
    """The answer's body from the packed candidates and what was read for them; reads nothing."""
    fill(shown.rows, [*packed, *ranked], lists if req.trace else None)
    packed = [c for c in packed if c.row.complete]  # a memory deleted since the arms read it
    chunks_json = None
    if req.include_chunks is not None:
        with trace.phase("chunk_fetch") as details:
            chunks_json = _chunks(req, tokens, want.chunk_ids, shown.chunks)
            details["chunks"] = len(chunks_json)
    source_json: dict[str, Any] | None = None
    source_truncated: bool | None = None
    if req.include_source_facts is not None:
        source_json, source_truncated = _source_facts(req, tokens, packed, shown.rows)
    entity_map: dict[uuid.UUID, list[str]] | None = None
    entities_json: dict[str, Any] | None = None
    if req.include_entities is not None:
        with trace.phase("entity_build"):
            entity_map, entities_json = _entities(req, tokens, packed, want.owners, shown.entities)
    trace.finish()
    external = {uid: row.external_id for uid, row in shown.rows.items()}
    body: dict[str, Any] = {
        "results": [result_json(c, external, entity_map) for c in packed],
        "results_truncated": truncated,
        "entities": entities_json,
        "chunks": chunks_json,
        "source_facts": source_json,
        "trace": None,
    }
    if req.include_source_facts is not None:
        body["source_facts_truncated"] = source_truncated
    if req.trace:
        body["trace"] = _trace(req, trace, limit, embedding, window, lists, ranked, len(packed))
    return body


def _source_facts(req: RecallRequest, tokens: TokenCounter, packed: list[Candidate],
                  rows: Mapping[uuid.UUID, MemoryRow]) -> tuple[dict[str, Any], bool]:
    """Sources of packed observations in rank order, within the total and per-observation budgets."""
    budget, per_obs = req.include_source_facts or 0, req.source_facts_per_observation
    out: dict[str, Any] = {}
    truncated = False
    for cand in packed:
        spent = 0
        for uid in cand.row.source_memory_ids:
            row = rows.get(uid)
            if row is None or row.external_id in out:
                continue
            cost = tokens.count(row.text)
            if cost > budget or (per_obs >= 0 and spent + cost > per_obs):
                truncated = True
                continue
            budget -= cost
            spent += cost
            fact = result_json(Candidate(row=row, rrf_score=0.0), {}, None)
            fact.pop("scores")
            out[row.external_id] = fact
    return out, truncated


def empty_response(req: RecallRequest, trace: Trace) -> dict[str, Any]:
    """The answer for an unknown bank or an empty type list: no results, same shape."""
    return {
        "results": [], "results_truncated": False,
        "entities": {} if req.include_entities is not None else None,
        "chunks": {} if req.include_chunks is not None else None,
        "source_facts": None,
        "trace": {"summary": trace.summary(0)} if req.trace else None,
    }


def _entity_owners(packed: Sequence[Candidate]) -> dict[uuid.UUID, list[uuid.UUID]]:
    """Memory -> the packed results it gives entities to: itself, and an observation's sources."""
    owners: dict[uuid.UUID, list[uuid.UUID]] = {}
    for c in packed:
        for uid in (c.row.id, *c.row.source_memory_ids):
            owners.setdefault(uid, []).append(c.row.id)
    return owners


def _entities(
    req: RecallRequest, tokens: TokenCounter, packed: list[Candidate],
    owners: Mapping[uuid.UUID, list[uuid.UUID]], unit_entities: Entities,
) -> tuple[dict[uuid.UUID, list[str]], dict[str, Any]]:
    """Each result's entity names (sorted, its sources' included) and the answer's entities within
    ``include_entities`` tokens, in rank order."""
    names: dict[uuid.UUID, set[str]] = {c.row.id: set() for c in packed}
    ids: dict[str, str] = {}
    for uid, pairs in unit_entities.items():
        for entity_id, name in pairs:
            ids[name] = str(entity_id)
            for owner in owners.get(uid, ()):
                if owner in names:
                    names[owner].add(name)
    per_unit = {uid: sorted(found) for uid, found in names.items()}
    budget, used = req.include_entities or 0, 0
    out: dict[str, Any] = {}
    for c in packed:
        for name in per_unit[c.row.id]:
            if name in out:
                continue
            cost = tokens.count(name)
            if used + cost > budget:
                continue
            used += cost
            out[name] = {"entity_id": ids[name], "canonical_name": name, "observations": []}
    return per_unit, out


def _chunks(req: RecallRequest, tokens: TokenCounter, order: Sequence[str], found: Mapping[str, tuple[str, int]]
            ) -> dict[str, Any]:
    """Whole chunks in rank order while they fit; the first misfit is cut and the walk stops."""
    budget, out = req.include_chunks or 0, {}
    for chunk_id in order:
        if chunk_id not in found:
            continue
        chunk_text, index = found[chunk_id]
        cost = tokens.count(chunk_text)
        if cost <= budget:
            out[chunk_id] = {"id": chunk_id, "text": chunk_text, "chunk_index": index, "truncated": False}
            budget -= cost
            continue
        if budget > 0:
            out[chunk_id] = {"id": chunk_id, "text": tokens.truncate(chunk_text, budget), "chunk_index": index,
                             "truncated": True}
        break
    return out


def _node(row: MemoryRow) -> dict[str, Any]:
    return {"node_id": row.external_id, "text": row.text, "context": row.context,
            "event_date": _iso(row.date), "fact_type": row.fact_type}


def _trace(
    req: RecallRequest,
    trace: Trace,
    limit: int,
    embedding: Sequence[float],
    window: TimeWindow | None,
    lists: Mapping[str, Sequence[Hit]],
    ranked: list[Candidate],
    returned: int,
) -> dict[str, Any]:
    score_names = {
        "semantic": "similarity",
        "keyword": "bm25_score",
        "graph": "graph_score",
        "temporal": "temporal_score",
    }
    retrieval: list[dict[str, Any]] = []
    for arm, hits in lists.items():
        for ft in req.types:
            typed = [h for h in hits if h.row.fact_type == ft]
            retrieval.append(
                {
                    "method_name": arm,
                    "fact_type": ft,
                    "duration_seconds": next(
                        (
                            p["duration_seconds"]
                            for p in trace.phases
                            if p["phase_name"] == f"retrieval_{arm}" and p["details"].get("fact_type") == ft
                        ),
                        None,
                    ),
                    "metadata": {},
                    "results": [
                        {"rank": i, **_node(h.row), "score": h.score, "score_name": score_names.get(arm, "score")}
                        for i, h in enumerate(typed, start=1)
                    ],
                }
            )
    by_rrf = sorted(ranked, key=lambda c: c.rrf_rank)
    return {
        "query": {
            "query_text": req.query,
            "query_embedding": list(embedding),
            "timestamp": _iso(req.query_timestamp),
            "budget": limit,
            "max_tokens": req.max_tokens,
            "tags": list(req.tags),
            "tags_match": req.tags_match.value,
            "temporal_constraint": None if window is None else {"start": _iso(window.start), "end": _iso(window.end)},
        },
        "retrieval_results": retrieval,
        "rrf_merged": [
            {
                "node_id": c.row.external_id,
                "text": c.row.text,
                "rrf_score": c.rrf_score,
                "source_ranks": dict(c.source_ranks),
                "final_rrf_rank": c.rrf_rank,
            }
            for c in by_rrf
        ],
        "reranked": [
            {
                "node_id": c.row.external_id,
                "text": c.row.text,
                "rerank_score": c.final,
                "rerank_rank": i,
                "rrf_rank": c.rrf_rank,
                "rank_change": c.rrf_rank - i,
                "score_components": {
                    "cross_encoder_score": c.cross_encoder_raw,
                    "cross_encoder_score_normalized": c.cross_encoder,
                    "rrf_score": c.rrf_score,
                    "context": c.context,
                    "temporal": c.temporal,
                    "recency": c.recency,
                    "proof_norm": c.proof,
                    "in_period": c.period,
                    "combined_score": c.final,
                },
            }
            for i, c in enumerate(ranked, start=1)
        ],
        "entry_points": [_node(h.row) | {"score": h.score} for h in list(lists.get("semantic", ()))[:10]],
        "summary": trace.summary(returned),
    }
