"""The reranking stage, with the ``rrf`` passthrough reranker and graceful fallback."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RerankerError
from ..hookspecs import hookimpl
from ..protocols import Reranker, apply_defaults
from ..settings import Settings
from ..types import Candidate
from .scoring import normalise, passthrough_scores

log = logging.getLogger(__name__)


class PassthroughReranker:
    """Keeps the fused (RRF) order; no model, no network."""

    name = "rrf"
    passthrough = True

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    async def score(self, query: str, documents: Sequence[str], *, bank_id: str | None = None) -> list[float]:
        return [0.5] * len(documents)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def pair_text(cand: Candidate) -> str:
    """The document a reranker sees: date prefix, context, then the fact text."""
    doc = cand.row.text
    if cand.row.context:
        doc = f"{cand.row.context}: {doc}"
    start = cand.row.occurred_start
    if start is not None:
        doc = f"[Date: {start:%B} {start.day:02d}, {start.year} ({start:%Y-%m-%d})] {doc}"
    return doc


@dataclass(frozen=True)
class Backoff:
    """The pause before another start-up attempt: ``base``, doubled after each failure, at most ``cap``.

    :param base: seconds after the first failure.
    :param cap: the longest pause in seconds.
    """

    base: float = 1.0
    cap: float = 300.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failed attempts in a row (``failures >= 1``).

        :param failures: failed attempts so far.
        """
        return float(min(self.cap, self.base * 2.0 ** (failures - 1)))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class RerankStage:
    """Starts the reranker, scores candidates, and falls back to passthrough on failure.

    The reranker starts in a task of its own (bounded by ``MODEL_INIT_TIMEOUT``). Recalls wait for
    the first attempt at most ``RERANKER_TIMEOUT`` from its beginning, as they would for a score
    call, then fall back while it goes on. A failed start is tried again on a later recall once
    its :class:`Backoff` pause has passed, in the background: recalls keep falling back (or raise,
    with ``RERANKER_ON_ERROR=raise``) until it succeeds, and none waits for it. Every
    :meth:`~hindsight_recall.protocols.Reranker.score` call is bounded by ``RERANKER_TIMEOUT``.
    """

    def __init__(self, reranker: Reranker, settings: Settings, backoff: Backoff | None = None) -> None:
        apply_defaults(reranker, Reranker)  # a reranker built outside the plugin manager may omit start/close
        self.reranker = reranker
        self.settings = settings
        self.backoff = backoff or Backoff()
        #: The clock the pauses are measured on (seconds, monotonic).
        self.clock: Callable[[], float] = time.monotonic
        #: The start attempt in progress, if any.
        self.starting: asyncio.Task[None] | None = None
        self._started = False
        self._start_error: str | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._wait_until = 0.0

    async def start(self) -> str | None:
        """Start the reranker unless it runs or waits out a pause; return why it cannot rerank now, if so.

        Raises :class:`RerankerError` instead when ``RERANKER_ON_ERROR=raise``, on every recall until a
        start succeeds.
        """
        if not self._started and self.starting is None and self.clock() >= self._retry_at:
            # only the first attempt is waited for; a retry must not stall the recalls again
            self._wait_until = time.monotonic() + self.settings.reranker_timeout if not self._failures else 0.0
            self.starting = asyncio.create_task(self._attempt(), name=f"start reranker {self.reranker.name}")
        task = self.starting
        if task is not None and (wait := self._wait_until - time.monotonic()) > 0:
            await asyncio.wait({task}, timeout=wait)  # never cancels the start: it goes on for later recalls
        if self._started:
            return None
        error = self._start_error
        if error is None:
            error = (f"reranker {self.reranker.name!r} did not start within HINDSIGHT_API_RERANKER_TIMEOUT="
                     f"{self.settings.reranker_timeout:g} s and is still starting")
        if self.settings.reranker_on_error == "raise":
            wait = max(0.0, self._retry_at - self.clock())
            pending = "still starting" if self.starting is not None else f"next attempt in {wait:.0f} s"
            raise RerankerError(f"reranker {self.reranker.name!r} failed to start: {error} ({pending})")
        return error

    async def _attempt(self) -> None:
        try:
            await asyncio.wait_for(self.reranker.start(), timeout=self.settings.model_init_timeout)
        except Exception as exc:
            self._failures += 1
            pause = self.backoff.delay(self._failures)
            self._retry_at = self.clock() + pause
            self._start_error = _describe(exc)
            log.warning("reranker %r unavailable (attempt %d), using passthrough; next attempt in %.0f s: %s",
                        self.reranker.name, self._failures, pause, self._start_error)
        else:
            if self._failures:
                log.warning("reranker %r started after %d failed attempts", self.reranker.name, self._failures)
            self._started, self._start_error, self._failures = True, None, 0
        finally:
            self.starting = None

    async def close(self) -> None:
        if self.starting is not None:
            self.starting.cancel()
            await asyncio.wait({self.starting})
        await self.reranker.close()

    async def run(self, query: str, candidates: list[Candidate], bank_id: str, passthrough: bool) -> dict[str, Any]:
        """Set ``cross_encoder`` (normalised) on every candidate; return the trace details."""
        details: dict[str, Any] = {"reranker_type": self.reranker.name, "candidates_reranked": len(candidates)}
        if passthrough or self.reranker.passthrough:
            details["reranker_type"] = "rrf"
            return self._passthrough(candidates, details)
        start_error = await self.start()
        if start_error:
            return self._passthrough(candidates, details, f"fallback: {start_error}")
        try:
            raw = await self._score(query, [pair_text(c) for c in candidates], bank_id)
        except Exception as exc:
            if self.settings.reranker_on_error == "raise":
                raise
            reason = _describe(exc)
            log.warning("reranker %r failed, using passthrough: %s", self.reranker.name, reason)
            return self._passthrough(candidates, details, f"fallback: {reason}")
        for cand, value, norm in zip(candidates, raw, normalise(raw), strict=True):
            cand.cross_encoder_raw, cand.cross_encoder, cand.reranker_score = float(value), norm, norm
        return details

    async def _score(self, query: str, documents: list[str], bank_id: str) -> list[float]:
        timeout = self.settings.reranker_timeout
        try:
            raw = await asyncio.wait_for(self.reranker.score(query, documents, bank_id=bank_id), timeout)
        except TimeoutError:
            raise RerankerError(
                f"reranker {self.reranker.name!r} did not answer within HINDSIGHT_API_RERANKER_TIMEOUT={timeout:g} s"
            ) from None
        if len(raw) != len(documents):
            raise RerankerError(f"returned {len(raw)} scores for {len(documents)} documents")
        return raw

    @staticmethod
    def _passthrough(candidates: list[Candidate], details: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        # the fused order with the strategy boosts (fusion.set_boosts): without a model they decide here
        fused = passthrough_scores([c.rrf_score + c.boost for c in candidates])
        for cand, value in zip(candidates, fused, strict=True):
            cand.cross_encoder, cand.reranker_score = value, None
        details["passthrough"] = True
        if reason:
            details["fallback"] = reason
        return details


@hookimpl
def register_rerankers(register: Any) -> None:
    register(PassthroughReranker)
