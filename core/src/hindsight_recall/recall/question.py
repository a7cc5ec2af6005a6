"""One reading of the question, before any arm starts.

The date expression is read once (relative to ``query_timestamp`` when given): the temporal arm gets
its window, and the semantic arms (semantic, graph seeds, the temporal arm's similarity) embed the
question without it. The keyword arm searches the question as asked unless the question is anchored
(``query_timestamp``) and its window holds memories (recall/pipeline): conversations say "last
weekend" and "last summer" in so many words, and on LoCoMo dev leaving the date words out of the
keyword arm loses more than it gains (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..time.window import read_window
from ..types import TimeWindow
from .request import RecallRequest, query_tokens

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Question:
    """What the arms search for, and the window the temporal arm gets."""

    #: the text the keyword arm searches
    text: str
    tokens: tuple[str, ...]
    window: TimeWindow | None = None
    #: the text the semantic arms search (embedded); ``None`` is :attr:`text`
    semantic: str | None = None
    #: where the window came from: "request", "query", or None for no window
    source: str | None = None
    #: the date expression left out of :attr:`text`
    phrase: str | None = None

    def describe(self) -> dict[str, Any]:
        """The trace's account of the reading."""
        window = self.window
        return {
            "window": None if window is None else {"start": window.start.isoformat(), "end": window.end.isoformat()},
            "source": self.source,
            "date_phrase": self.phrase,
            "keyword_query": self.text,
            "semantic_query": self.embedded,
        }

    def without_date_words(self) -> Question:
        """The question the keyword arm searches once the window is known to be the bank's."""
        return replace(self, text=self.embedded, tokens=query_tokens(self.embedded))

    @property
    def embedded(self) -> str:
        """The text whose vector the semantic, graph and temporal arms use."""
        return self.text if self.semantic is None else self.semantic


def whole(req: RecallRequest) -> Question:
    """The question as asked, with the request's window if it has one."""
    return Question(text=req.query, tokens=req.tokens, window=req.temporal_window,
                    source="request" if req.temporal_window else None)


def read_question(req: RecallRequest, now: datetime, enabled: bool, languages: list[str] | None) -> Question:
    """Read the request's question once (CPU-bound: run it off the event loop).

    :param req: the validated request.
    :param now: the reference for relative expressions (``query_timestamp``, else now).
    :param enabled: ``ENABLE_TEMPORAL_RETRIEVAL``; off, the question is searched as asked.
    :param languages: the date finder's languages (``QUERY_ANALYZER_LANGUAGES``); ``None`` allows all.
    """
    if not enabled:
        return Question(text=req.query, tokens=req.tokens)
    if req.temporal_window is not None:
        return whole(req)
    try:
        reading = read_window(req.query, now, languages=languages)
    except Exception:  # date analysis is best effort: no window rather than a failed recall
        log.exception("date analysis failed for a query; continuing without a window")
        return whole(req)
    if reading is None:
        return whole(req)
    semantic = reading.rest if query_tokens(reading.rest) else None  # nothing but the date: as asked
    return Question(text=req.query, tokens=req.tokens, semantic=semantic, window=reading.window, source="query",
                    phrase=reading.phrase)
