"""A recall's trace read for people: each result's score story, what was cut where, and "why not?".

Every number shown comes from the API's trace (``engine.recall(..., trace=True)``); nothing here
scores or ranks anything again, it only looks values up by memory id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...recall.trace import DIAGNOSTIC_PREFIXES


@dataclass
class Story:
    """What the trace says about one memory."""

    id: str
    text: str
    type: str | None = None
    #: arm -> {"rank", "score", "score_name"} from ``retrieval_results``
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``rrf_merged``: the fused score and rank, and the rank in each arm fusion saw
    fused: dict[str, Any] | None = None
    #: ``reranked``: the rank after reranking and the score's components (reranker, boosts, combined)
    reranked: dict[str, Any] | None = None
    #: the returned result's rank (1-based) and scores, when it was returned
    returned_rank: int | None = None
    scores: dict[str, Any] | None = None


@dataclass
class TraceView:
    results: list[Story]
    cut_before_rerank: list[Story]
    cut_by_packing: list[Story]
    phases: list[dict[str, Any]]
    total_seconds: float
    budget: int | None
    prefilter: dict[str, Any]
    packing: dict[str, Any]
    stories: dict[str, Story]


def _phase(phases: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next((p.get("details") or {} for p in phases if p.get("phase_name") == name), {})


def read_trace(response: dict[str, Any]) -> TraceView:
    """Index the trace of a recall response by memory id."""
    trace = response.get("trace") or {}
    summary = trace.get("summary") or {}
    phases = list(summary.get("phase_metrics") or [])
    stories: dict[str, Story] = {}

    def story(node: dict[str, Any]) -> Story:
        found = stories.get(node["node_id"])
        if found is None:
            found = stories[node["node_id"]] = Story(node["node_id"], node.get("text") or "", node.get("fact_type"))
        return found

    for arm in trace.get("retrieval_results") or []:
        for hit in arm.get("results") or []:
            story(hit).arms[arm["method_name"]] = {"rank": hit.get("rank"), "score": hit.get("score"),
                                                   "score_name": hit.get("score_name")}
    for node in trace.get("rrf_merged") or []:
        story(node).fused = node
    for node in trace.get("reranked") or []:
        story(node).reranked = node
    results = []
    for rank, result in enumerate(response.get("results") or [], start=1):
        s = stories.get(result["id"]) or stories.setdefault(result["id"], Story(result["id"], result.get("text", "")))
        s.type, s.returned_rank, s.scores = result.get("type"), rank, result.get("scores")
        results.append(s)
    returned = {s.id for s in results}
    cut_before = [s for s in stories.values() if s.arms and s.fused is None and s.reranked is None]
    cut_before.sort(key=lambda s: min(a["rank"] or 0 for a in s.arms.values()))
    cut_packing = sorted((s for s in stories.values() if s.reranked is not None and s.id not in returned),
                         key=lambda s: s.reranked["rerank_rank"] if s.reranked else 0)
    return TraceView(
        results=results, cut_before_rerank=cut_before, cut_by_packing=cut_packing, phases=phases,
        total_seconds=float(summary.get("total_duration_seconds") or 0.0),
        budget=(trace.get("query") or {}).get("budget"), prefilter=_phase(phases, "rerank_prefilter"),
        packing=_phase(phases, "token_filtering"), stories=stories,
    )


def why_not(view: TraceView, memory: dict[str, Any] | None, asked_types: list[str], tags: list[str]) -> str:
    """Where ``memory`` fell out of the recall, in one sentence, from the trace alone."""
    if memory is None:
        return "This bank has no memory with that id."
    found = view.stories.get(memory["id"])
    if found is not None and found.returned_rank is not None:
        return f"It was returned, at rank {found.returned_rank}."
    if memory.get("type") not in asked_types:
        return f"Its type ({memory.get('type')}) was not among the types asked for ({', '.join(asked_types)})."
    if tags and not set(tags) & set(memory.get("tags") or ()):
        return "It does not carry the tags asked for, so no arm could see it."
    if found is None or not found.arms:
        return ("No retrieval arm returned it: it was not among any arm's candidates for this query "
                "(too far from the query, or beyond each arm's budget).")
    arms = ", ".join(f"{arm} at rank {a['rank']}" for arm, a in found.arms.items())
    if found.reranked is None:
        kept, dropped = view.prefilter.get("kept"), view.prefilter.get("dropped")
        if dropped:
            return (f"Found by {arms}, but cut by the pre-rerank cap: the {kept} best fused candidates were kept "
                    f"and {dropped} dropped.")
        return f"Found by {arms}, but removed after fusion (a score floor or observation preference)."
    rank = found.reranked["rerank_rank"]
    if view.budget is not None and rank > 2 * view.budget:
        return (f"Found by {arms} and ranked {rank} after reranking: below the {2 * view.budget} candidates "
                "that go on to packing.")
    return (f"Found by {arms} and ranked {rank} after reranking, but cut by packing: max_tokens "
            f"{view.packing.get('max_tokens')} was filled ({view.packing.get('tokens_used')} tokens used by "
            f"{view.packing.get('results_selected')} results).")


def phase_bars(phases: list[dict[str, Any]], width: int = 560, row: int = 22) -> dict[str, Any]:
    """The phase timings as bars of an SVG chart: geometry only, the template draws them."""
    longest = max((float(p.get("duration_seconds") or 0) for p in phases), default=0.0) or 1.0
    label = 190
    bars = []
    for i, p in enumerate(phases):
        seconds = float(p.get("duration_seconds") or 0)
        name = str(p.get("phase_name"))
        fact_type = (p.get("details") or {}).get("fact_type")
        bars.append({"name": name, "label": f"{name} ({fact_type})" if fact_type else name,
                     "ms": seconds * 1000, "y": i * row, "x": label,
                     "w": max(1.0, (width - label - 70) * seconds / longest),
                     "diagnostic": name.startswith(DIAGNOSTIC_PREFIXES)})
    return {"bars": bars, "width": width, "height": max(row, len(bars) * row), "label": label, "row": row}
