"""The context stage: a memory's neighbours in its document lift it, and so does its document's best.

In a conversation, a meeting or a notes file, the words of a question often sit one memory before
or after the memory that answers it ("Where did you go?" - "To the lake."), and a story runs over
several memories. After fusion, every candidate's fused score ``s`` (scaled so the best is 1)
becomes

    s + a·max(s_prev, s_next) + b·(best s in its document)

where ``prev``/``next`` are the memories just before and after it in its document (its
``document_id``, else its chunk), and a neighbour that no arm found enters with ``s = 0``. Only
the best ``expand`` candidates and their neighbours are placed (further down, a lift cannot reach
the top), so the stage costs one statement on the (bank, document, position) index. Memories without
a position (no document and no chunk) keep their score.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

from ..protocols import RetrievalContext
from ..store.driver import fetch
from ..store.schema import DOCUMENT_KEY
from ..types import Candidate, MemoryRow
from .arms._rows import COLUMNS, row_reader

K = TypeVar("K", bound=Hashable)
Place = tuple[str, int]


def lift(scores: Mapping[K, float], places: Mapping[K, Place], neighbour: float, document: float) -> dict[K, float]:
    """What context adds to each memory: ``a·max(s_prev, s_next) + b·best s in the document``.

    :param scores: memory -> score in [0, 1]; memories absent from it score 0.
    :param places: memory -> (document, position), for every memory scored or to be lifted.
    :param neighbour: ``a``, the weight of the better neighbour.
    :param document: ``b``, the weight of the document's best score.
    """
    at = {place: key for key, place in places.items()}
    best: dict[str, float] = {}
    for key, s in scores.items():
        if key in places:
            doc = places[key][0]
            best[doc] = max(best.get(doc, 0.0), s)
    added: dict[K, float] = {}
    for key, (doc, pos) in places.items():
        before, after = at.get((doc, pos - 1)), at.get((doc, pos + 1))
        near = max(0.0 if before is None else scores.get(before, 0.0), 0.0 if after is None else scores.get(after, 0.0))
        added[key] = neighbour * near + document * best.get(doc, 0.0)
    return added


async def apply_context(ctx: RetrievalContext, candidates: list[Candidate]) -> tuple[list[Candidate], dict[str, Any]]:
    """Re-rank fused candidates by their context; add the neighbours of the best ones.

    :param ctx: the recall's retrieval context (bank, fact types, filter, settings, database).
    :param candidates: fused candidates, best first.
    :returns: the candidates re-ranked (``rrf_score`` and ``rrf_rank`` updated, ``context`` set) and
        the trace details.
    """
    config = ctx.settings
    a, b = config.recall_context_neighbour_weight, config.recall_context_document_weight
    if not config.recall_context_enabled or not candidates or (a <= 0 and b <= 0):
        return candidates, {"enabled": False}
    async with ctx.db.connect() as conn:
        found = await _around(conn, ctx, [c.row.id for c in candidates[: config.recall_context_expand]])
    places = {row.id: place for place, row in found.items()}
    known = {c.row.id: c for c in candidates} if places else {}
    top = max(c.rrf_score for c in candidates) or 1.0
    for c in candidates:  # on the scale where the best is 1; the boost is on the fused score's scale
        c.rrf_score /= top
        c.boost /= top
        c.context = 0.0
    # in document order: neighbours often tie, and the rows' order from the server is no order at all
    # (it differs between plans, e.g. one server and a Citus worker)
    fresh = [Candidate(row=row, rrf_score=0.0) for place, row in sorted(found.items()) if row.id not in known]
    entering = {c.row.id: c for c in fresh}
    # only placed memories are lifted, and lift reads only their scores
    added = lift({key: known[key].rrf_score for key in places if key in known}, places, a, b)
    for key, extra in added.items():
        c = known[key] if key in known else entering[key]
        c.context = extra
        c.rrf_score += extra
    everything = candidates + fresh
    everything.sort(key=lambda c: -c.rrf_score)
    for i, c in enumerate(everything, start=1):
        c.rrf_rank = i
    return everything, {"enabled": True, "neighbour_weight": a, "document_weight": b, "placed": len(places),
                        "neighbours_added": len(fresh)}


async def _around(conn: Any, ctx: RetrievalContext, ids: Sequence[uuid.UUID]) -> dict[Place, MemoryRow]:
    """In one statement: the rows at, just before and just after each given memory in its document,
    of the request's fact types and passing its filter, by (document, position)."""
    if not ids:
        return {}
    keys, rows = await fetch(conn, (
        f"SELECT {COLUMNS}, {DOCUMENT_KEY} AS doc_key, position FROM memory_units "
        f"JOIN (SELECT DISTINCT {DOCUMENT_KEY} AS doc, position + d AS pos FROM memory_units "
        f"CROSS JOIN (VALUES (-1), (0), (1)) AS s(d) "
        f"WHERE bank_id = :bank_id AND id = ANY(:ids) AND position IS NOT NULL) AS w "
        f"ON {DOCUMENT_KEY} = w.doc AND position = w.pos "
        f"WHERE bank_id = :bank_id AND fact_type = ANY(:fact_types) AND {ctx.filter.sql}"
    ), {"bank_id": ctx.bank_id, "ids": list(ids), "fact_types": list(ctx.fact_types), **ctx.filter.params})
    read, at_doc, at_position = row_reader(keys), keys.index("doc_key"), keys.index("position")
    return {(r[at_doc], r[at_position]): read(r) for r in rows}
