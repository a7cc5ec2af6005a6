"""One reading of the question, before any arm starts.

The date expression is read once (relative to ``query_timestamp`` when given): the temporal arm gets
its window, and the keyword and semantic arms search the question without it, so that "What did
Alice do last spring?" finds what Alice did in that window rather than every memory that says
"last" or "spring".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..time.window import read_window
from ..types import TimeWindow
from .request import RecallRequest, query_tokens

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Question:
    """What the arms search for, and the window the temporal arm gets."""

    #: the text the keyword and semantic arms search
    text: str
    tokens: tuple[str, ...]
    window: TimeWindow | None = None
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
            "arms_query": self.text,
        }


def whole(req: RecallRequest) -> Question:
    """The question as asked, with the request's window if it has one."""
    return Question(req.query, req.tokens, req.temporal_window, "request" if req.temporal_window else None)


def read_question(req: RecallRequest, now: datetime, enabled: bool, languages: list[str] | None) -> Question:
    """Read the request's question once (CPU-bound: run it off the event loop).

    :param req: the validated request.
    :param now: the reference for relative expressions (``query_timestamp``, else now).
    :param enabled: ``ENABLE_TEMPORAL_RETRIEVAL``; off, the question is searched as asked.
    :param languages: the date finder's languages (``QUERY_ANALYZER_LANGUAGES``); ``None`` allows all.
    """
    if not enabled:
        return Question(req.query, req.tokens)
    if req.temporal_window is not None:
        return whole(req)
    try:
        reading = read_window(req.query, now, languages=languages)
    except Exception:  # date analysis is best effort: no window rather than a failed recall
        log.exception("date analysis failed for a query; continuing without a window")
        return whole(req)
    if reading is None:
        return whole(req)
    tokens = query_tokens(reading.rest)
    if not tokens:  # nothing but the date: search the question as asked
        return Question(req.query, req.tokens, reading.window, "query", reading.phrase)
    return Question(reading.rest, tokens, reading.window, "query", reading.phrase)
