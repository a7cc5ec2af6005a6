"""The recall pipeline: arms in parallel, fusion, rerank, scoring and packing."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ..errors import BankNotFound
from ..protocols import ArmStatement, RetrievalContext, Retriever
from ..store import banks
from ..time.window import warm_finder
from ..types import ArmResult, Candidate
from . import length_prior
from .arms._ann import AnnSettings
from .arms._compose import composable, run_composed
from .arms.semantic import semantic_floor
from .arms.temporal import window_holds_memories
from .complete import complete, incomplete, read_shown
from .context import apply_context
from .filters import tag_filter
from .floors import REFERENCE, Calibration, Calibrations, calibrated_settings, describe
from .fusion import (
    add_rank_boosts,
    arm_lists,
    cap_candidates,
    fuse,
    interleave,
    parse_boosts,
    set_boosts,
)
from .packing import pack
from .question import Question, read_question
from .request import RecallRequest
from .response import build_response, empty_response, wanted
from .scoring import apply_floors, combined, names_period, period_first, proof_score, recency
from .services import RecallServices
from .trace import Trace
from .weak import weak_candidates

log = logging.getLogger(__name__)


async def run_recall(engine: RecallServices, req: RecallRequest, semaphore_wait: float = 0.0) -> dict[str, Any]:
    """Answer one validated recall request.

    :param engine: the open engine.
    :param req: the validated request.
    :param semaphore_wait: seconds the recall waited for a RECALL_MAX_CONCURRENT slot (a diagnostic).
    """
    trace = Trace()
    trace.add("semaphore_wait", semaphore_wait)
    global _running
    _running += 1
    try:
        return await _answer(engine, req, trace)
    finally:
        _running -= 1


#: recalls running in this process: one running alone may spread its statements over idle cores
_running = 0


async def _answer(engine: RecallServices, req: RecallRequest, trace: Trace) -> dict[str, Any]:
    req = _cap_query(engine, req)
    now = req.query_timestamp or datetime.now(UTC)
    # The question is read once, before any arm starts; its vector (the longest step before the
    # arms) and the model's floors are computed while the bank is looked up.
    question_task = asyncio.ensure_future(_question(req, engine.settings, now))
    embedding_task = asyncio.ensure_future(_embed_question(engine, question_task))
    floors_task = asyncio.ensure_future(_calibration(engine))
    try:
        return await _run(engine, req, trace, _Pending(question_task, embedding_task, floors_task), now)
    finally:
        for task in (question_task, embedding_task, floors_task):
            task.cancel()


@dataclass(frozen=True)
class _Pending:
    """What a recall starts before it holds a connection."""

    question: asyncio.Future[Question]
    embedding: asyncio.Future[tuple[str, list[float]]]
    floors: asyncio.Future[Calibration | None]


async def _run(
    engine: RecallServices, req: RecallRequest, trace: Trace, pending: _Pending, now: datetime
) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        with trace.phase("backend_acquisition"):
            # held to the end of the recall and lent to whichever stage runs alone (see LimitedConnections)
            session = await stack.enter_async_context(engine.db.reading(req.bank_id))
            state = await banks.bank_state(session, req.bank_id)
        return await _recall(engine, req, trace, pending, now, session, state)


async def _recall(
    engine: RecallServices, req: RecallRequest, trace: Trace, pending: _Pending, now: datetime,
    session: Any, state: banks.BankState | None,
) -> dict[str, Any]:
    if state is None:
        raise BankNotFound(req.bank_id)
    if not req.types:
        return empty_response(req, trace)
    config = engine.settings.for_bank(state.config)
    with trace.phase("similarity_floors") as details:
        calibration = await pending.floors
        configured, config = config, calibrated_settings(config, REFERENCE, calibration)
        details.update(describe(configured, config, calibration))
    limit = engine.budget_function(config).resolve(req.budget, req.max_tokens, config)

    with trace.phase("temporal_extraction") as details:
        question = await pending.question
        if config.enable_temporal_retrieval != engine.settings.enable_temporal_retrieval:  # the bank's own
            question = await _question(req, config, now)
        details.update(question.describe())
    # the bank's length prior, and the weights of the stages that cannot see length with it (when the
    # keyword arm, which applies it, runs)
    applies = engine.text_search.length_prior and config.enable_text_search and bool(question.tokens)
    prior = length_prior.for_fact_types(state.lengths, req.types) if applies else None
    config = length_prior.weigh_stages(config, prior, tuple(arm.name for arm in engine.retrievers))
    ctx = RetrievalContext(
        bank_id=req.bank_id, query=question.text, tokens=question.tokens, embedding=(), fact_types=req.types,
        limit=limit, filter=tag_filter(req.tags, req.tags_match), settings=config,
        db=engine.db.limited(config.recall_connection_budget, lend=session, bank_id=req.bank_id),
        text_search=engine.text_search, now=now,
        window=question.window, min_semantic=req.min_scores.get("semantic"), min_keyword=req.min_scores.get("keyword"),
        indexed=state.indexed, ann_slot=state.ann_slot, length_prior=prior,
    )
    if req.query_timestamp is not None and question.source == "query" and question.semantic is not None \
            and ctx.fact_types:
        with trace.phase("date_words") as details:
            # A question asked at a stated time whose window the bank has memories in: the date words are
            # the temporal arm's, and leave the keyword search ("last" must not match "her last working
            # day"). Otherwise they stay: read against today, "4 years ago" or "last weekend" are often
            # the memories' own words (docs/benchmarks.md measures both).
            inside = await window_holds_memories(ctx)
            if inside:
                question = question.without_date_words()
                ctx = replace(ctx, query=question.text, tokens=question.tokens)
            details.update(window_holds_memories=inside, keyword_query=question.text)
    # arms that need neither the vector nor the window start now, while the query is embedded
    tasks = {arm.name: _start(arm, ctx) for arm in engine.retrievers if not arm.needs_embedding and arm.enabled(ctx)}
    try:
        with trace.phase("generate_query_embedding") as details:
            embedded, embedding = await pending.embedding
            if embedded != question.embedded:  # read again with the bank's settings
                embedding = await _embed(engine, question.embedded)
            details["overlapped_arms"] = list(tasks)
        ctx = replace(ctx, embedding=embedding)
        late = [arm for arm in engine.retrievers if arm.needs_embedding and arm.enabled(ctx)]
        # arms that can be written as one statement go together (recall/arms/_compose.py)
        statements = {arm: st for arm in late if (st := arm.statement(ctx)) is not None} if len(late) > 1 else {}
        group = list(statements)
        # A large bank's recall running alone spreads the composed statement over a connection per
        # fact type; with other recalls running the cores are busy anyway, and each extra statement
        # would add its checkout and planning (docs/benchmarks.md measures both).
        spread = ctx.indexed and _running == 1
        if len(group) > 1:
            together = _start_composed(group, list(statements.values()), ctx, spread)
            tasks.update((arm.name, together) for arm in group)
        tasks.update((arm.name, _start(arm, ctx)) for arm in late if arm not in group)
        with trace.phase("parallel_retrieval") as details:
            gathered = await asyncio.gather(*dict.fromkeys(tasks.values()))
            order = [arm.name for arm in engine.retrievers]
            results = sorted((r for rs in gathered for r in rs), key=lambda r: order.index(r.arm))  # stable
            details.update(_arm_counts(results))
            details["composed"] = [arm.name for arm in group] if len(group) > 1 else []
            details["length_prior"] = length_prior.describe(ctx.length_prior)
            details["spread_by_fact_type"] = spread and len(group) > 1
    finally:
        for task in tasks.values():
            task.cancel()
    trace.add("connection_wait", ctx.db.waited)
    for result in results:
        trace.add(
            f"retrieval_{result.arm}",
            result.duration_seconds,
            {"fact_type": result.fact_type, "count": len(result.hits)},
        )

    with trace.phase("rrf_merge") as details:
        lists = arm_lists(results, config.recall_max_candidates_per_source)
        arms = tuple(arm.name for arm in engine.retrievers)
        candidates, fused = fuse(lists, config, arms)
        boosts = parse_boosts(config.recall_strategy_boosts, arms)
        set_boosts(candidates, boosts, config, arms)  # stage 1, on the fusion's own scale
        details.update(candidates=len(candidates), **fused)
    with trace.phase("context") as details:
        candidates, found = await apply_context(ctx, candidates)
        details.update(found)
    with trace.phase("rerank_prefilter") as details:
        cap = config.reranker_cap(req.budget.value)
        candidates, dropped = cap_candidates(candidates, cap)
        details.update(
            kept=len(candidates),
            dropped=dropped,
            max_candidates=cap,
            strategy_boosts=boosts or None,
            arm_composition={arm: sum(1 for c in candidates if f"{arm}_rank" in c.source_ranks) for arm in lists},
        )

    with trace.phase("reranking") as details:
        passthrough = req.reranking != "cross_encoder" or not config.enable_reranking
        if not passthrough and not engine.rerank.reranker.passthrough:
            async with ctx.db.connect() as conn:  # the reranker reads each candidate's text
                await complete(conn, req.bank_id, candidates)
        rerank_details = await engine.rerank.run(req.query, candidates, req.bank_id, passthrough)
        details.update(rerank_details)
        if req.reranking == "interleave":
            candidates = interleave(lists, candidates)
    with trace.phase("combined_scoring") as details:
        if req.reranking == "interleave":  # the interleave order is final
            for c in candidates:
                c.final = c.rrf_score
        else:
            _score(candidates, now, config)
            # stage 2 on the model's scores; a passthrough's scores hold the stage-1 boost already
            if boosts and not rerank_details.get("passthrough"):
                add_rank_boosts(candidates, boosts)
            candidates.sort(key=lambda c: -c.final)
            if question.window is not None and config.recall_period_first and names_period(question.window, now):
                candidates = period_first(candidates, question.window)
                details["in_period"] = sum(c.period for c in candidates)
        candidates = apply_floors(candidates, req.min_scores.get("reranker"), req.min_scores.get("final"))
    if not candidates and not req.min_scores and config.recall_weak_results:
        with trace.phase("weak_results") as details:
            candidates = await weak_candidates(ctx, config.recall_weak_results)
            details.update(
                reason="no memory reached a floor of any arm and no min_scores were given: the nearest "
                       "memories that pass the filters are returned, scored 0.1 × similarity / floor",
                semantic_floor=semantic_floor(ctx), admitted=len(candidates),
                similarities=[round(c.semantic or 0.0, 4) for c in candidates],
            )

    with trace.phase("prefer_observations_dedup"):
        candidates = _prefer_observations(req, candidates, 2 * limit)
    top = candidates[: 2 * limit]
    with trace.phase("token_filtering") as details:
        count = _token_counter(engine)
        uncounted = [c for c in top if c.row.token_count is None]  # rows stored before, or recounted
        if incomplete(uncounted):
            async with ctx.db.connect() as conn:
                await complete(conn, req.bank_id, uncounted)
        packed, used, truncated = pack(top, req.max_tokens, count)
        if req.limit is not None:  # top-k of what fits: the token budget decides first, then the count
            packed = packed[: req.limit]
            used = sum(count(c) for c in packed)
            details["limit"] = req.limit
        details.update(results_selected=len(packed), tokens_used=used, max_tokens=req.max_tokens, truncated=truncated)
    # the finish: one read of what the answer shows (chunks come from the top results, before packing), then
    # the answer built from it
    with trace.phase("source_fact_fetch") as details:
        want = wanted(req, packed, top, candidates, lists)
        shown = await read_shown(ctx.db, req.bank_id, want.ids, want.owners.keys(), want.chunk_ids)
        details["rows"] = len(shown.rows)
    return build_response(req, engine.tokens, packed, shown, want, truncated, trace, limit=limit,
                          embedding=embedding, window=question.window, lists=lists, ranked=candidates)


async def _question(req: RecallRequest, config: Any, now: datetime) -> Question:
    """The question read once (its window and the text the arms search), off the event loop."""
    if not config.enable_temporal_retrieval or req.temporal_window is not None:
        return read_question(req, now, config.enable_temporal_retrieval, None)
    languages = [x.strip() for x in config.query_analyzer_languages.split(",") if x.strip()] or None
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_date_worker(), read_question, req, now, True, languages)


async def _embed_question(engine: RecallServices, question: asyncio.Future[Question]) -> tuple[str, list[float]]:
    text = (await question).embedded
    return text, await _embed(engine, text)


#: one calibration per embedding model, for the life of the process
_CALIBRATIONS = Calibrations()


async def _calibration(engine: RecallServices) -> Calibration | None:
    """The configured model's floors calibration; none (the floors as written) if it cannot be had."""
    if not engine.settings.semantic_floor_calibration:
        return None
    try:
        return await _CALIBRATIONS.get(engine.embedder, engine.settings)
    except Exception:  # the floors as configured rather than a failed recall
        log.exception("the embedding model could not be calibrated; using the floors as configured")
        return None


def warm_date_parser() -> Future[None]:
    """Load the date finder's language data ahead of the first temporal query (about a second); the
    future is done once it is loaded."""
    return _date_worker().submit(warm_finder)


@functools.cache
def _date_worker() -> ThreadPoolExecutor:
    # One worker: date parsing is CPU-bound, and dateparser's caches are not built for threads.
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="hindsight-dates")


def _cap_query(engine: RecallServices, req: RecallRequest) -> RecallRequest:
    allowed = engine.settings.recall_max_query_tokens
    if not allowed or engine.tokens.count(req.query) <= allowed:
        return req
    log.warning("query has more than %d tokens; using only the first %d", allowed, allowed)
    from .request import query_tokens

    query = engine.tokens.truncate(req.query, allowed)
    return replace(req, query=query, tokens=query_tokens(query))


async def _embed(engine: RecallServices, query: str) -> list[float]:
    return await engine.query_vectors.vector(query)


def _start_composed(
    arms: list[Retriever], statements: list[ArmStatement], ctx: RetrievalContext, spread: bool
) -> asyncio.Task[list[ArmResult]]:
    """Run arms as one statement (or one per fact type: ``spread``), within ``DB_COMMAND_TIMEOUT``;
    apart when they cannot be composed or the statement outlives an arm's own timeout (each arm's
    fallback then applies)."""
    async def run() -> list[ArmResult]:
        if composable(statements):
            try:
                return await run_composed(ctx, statements, _COMPOSED_ANN, spread=spread)
            except TimeoutError:
                log.warning("arms %s took too long as one statement; running them apart",
                            ", ".join(arm.name for arm in arms))
        return [r for rs in await asyncio.gather(*(arm.retrieve(ctx) for arm in arms)) for r in rs]

    return asyncio.ensure_future(asyncio.wait_for(run(), ctx.settings.db_command_timeout or None))


#: hnsw.* settings the server rejected, for composed statements
_COMPOSED_ANN = AnnSettings()


def _start(arm: Retriever, ctx: RetrievalContext) -> asyncio.Task[list[ArmResult]]:
    """Run one arm as a task, within ``DB_COMMAND_TIMEOUT``."""
    timeout = ctx.settings.db_command_timeout or None
    return asyncio.ensure_future(asyncio.wait_for(arm.retrieve(ctx), timeout))


def _token_counter(engine: RecallServices) -> Any:
    """Tokens of what a candidate returns: the count stored at retain, else counted now (rows stored
    before counts were, or counted under another TOKENIZER_ENCODING)."""
    def count(c: Candidate) -> int:
        stored = c.row.token_count
        return stored if stored is not None else engine.tokens.count_returned(c.row.text, c.row.context,
                                                                               c.row.metadata)
    return count


def _arm_counts(results: list[ArmResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.arm] = counts.get(r.arm, 0) + len(r.hits)
    return counts


def _score(candidates: list[Candidate], now: datetime, config: Any) -> None:
    for c in candidates:
        c.recency = recency(c.row.date, now, config.recency_decay_function,
                            config.recency_decay_linear_window_days, config.recency_decay_halflife_days)
        c.temporal = c.temporal_proximity if c.temporal_proximity is not None else 0.5
        c.proof = proof_score(c.row.proof_count)
        c.final = combined(c.cross_encoder, c.recency, c.temporal, c.proof)


def _prefer_observations(req: RecallRequest, candidates: list[Candidate], window: int) -> list[Candidate]:
    """Drop facts that an observation in the first ``window`` results already summarises."""
    if not req.prefer_observations or "observation" not in req.types or len(req.types) < 2:
        return candidates
    covered = {sid for c in candidates[:window] if c.row.fact_type == "observation" for sid in c.row.source_memory_ids}
    return [c for c in candidates if c.row.fact_type == "observation" or c.row.id not in covered]
