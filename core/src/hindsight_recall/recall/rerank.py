"""The reranking stage, with the ``rrf`` passthrough reranker and graceful fallback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from ..errors import RerankerError
from ..hookspecs import hookimpl
from ..protocols import Reranker
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


def pair_text(cand: Candidate) -> str:
    """The document a reranker sees: date prefix, context, then the fact text."""
    doc = cand.row.text
    if cand.row.context:
        doc = f"{cand.row.context}: {doc}"
    start = cand.row.occurred_start
    if start is not None:
        doc = f"[Date: {start:%B} {start.day:02d}, {start.year} ({start:%Y-%m-%d})] {doc}"
    return doc


class RerankStage:
    """Starts the reranker once, scores candidates, and falls back to passthrough on failure."""

    def __init__(self, reranker: Reranker, settings: Settings) -> None:
        self.reranker = reranker
        self.settings = settings
        self._started = False
        self._start_error: str | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Load the model or reach the service, bounded by MODEL_INIT_TIMEOUT; remember a failure."""
        async with self._lock:
            if self._started:
                return
            self._started = True
            start = getattr(self.reranker, "start", None)
            if start is None:
                return
            try:
                await asyncio.wait_for(start(), timeout=self.settings.model_init_timeout)
            except Exception as exc:
                self._start_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if self.settings.reranker_on_error == "raise":
                    raise RerankerError(f"reranker {self.reranker.name!r} failed to start: {self._start_error}") from exc
                log.warning("reranker %r unavailable, using passthrough: %s", self.reranker.name, self._start_error)

    async def close(self) -> None:
        close = getattr(self.reranker, "close", None)
        if close is not None:
            await close()

    async def run(self, query: str, candidates: list[Candidate], bank_id: str, passthrough: bool) -> dict[str, Any]:
        """Set ``cross_encoder`` (normalised) on every candidate; return the trace details."""
        details: dict[str, Any] = {"reranker_type": self.reranker.name, "candidates_reranked": len(candidates)}
        if passthrough or self.reranker.passthrough:
            details["reranker_type"] = "rrf"
            return self._passthrough(candidates, details)
        await self.start()
        if self._start_error:
            return self._passthrough(candidates, details, f"fallback: {self._start_error}")
        try:
            raw = await self.reranker.score(query, [pair_text(c) for c in candidates], bank_id=bank_id)
            if len(raw) != len(candidates):
                raise RerankerError(f"returned {len(raw)} scores for {len(candidates)} documents")
        except Exception as exc:
            if self.settings.reranker_on_error == "raise":
                raise
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("reranker %r failed, using passthrough: %s", self.reranker.name, reason)
            return self._passthrough(candidates, details, f"fallback: {reason}")
        for cand, value, norm in zip(candidates, raw, normalise(raw), strict=True):
            cand.cross_encoder_raw, cand.cross_encoder, cand.reranker_score = float(value), norm, norm
        return details

    @staticmethod
    def _passthrough(candidates: list[Candidate], details: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        for cand, value in zip(candidates, passthrough_scores([c.rrf_score for c in candidates]), strict=True):
            cand.cross_encoder, cand.reranker_score = value, None
        details["passthrough"] = True
        if reason:
            details["fallback"] = reason
        return details


@hookimpl
def register_rerankers(register: Any) -> None:
    register(PassthroughReranker)
