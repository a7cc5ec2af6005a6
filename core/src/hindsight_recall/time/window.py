"""Resolve the date window a recall query talks about.

Order: NFKC + lower-case; Chinese rules for text with CJK ideographs; a cheap keyword gate (no digit
and no date word ⇒ no window, without loading the date finder); the fixed rules; then, when a number
or a month, weekday or "now" word could make a match count, dateparser's ``search_dates`` scored by
the words around each match, whose winning match gives a one-day window. Windows are whole UTC days:
start 00:00:00, end 23:59:59.999999. Any error means no window.

Beyond the fixed table of phrases ("yesterday", "last week", "in 2023", ...), our own choices **[D]**:

- Seasons are meteorological; northern: spring Mar–May, summer Jun–Aug, autumn/fall Sep–Nov,
  winter Dec–Feb; ``southern_hemisphere`` shifts them by six months. "<season> <year>" is the
  season that *starts* in that year, so "winter 2022" is Dec 2022 – Feb 2023. "last <season>" is the
  most recent one that ended before the reference day; "next" the first that starts after it; "this"
  the one of the reference year, or, for a season that spans New Year, the one holding the reference
  day, else the nearer of the two touching the reference year. A bare season needs "in"/"during"
  ("in the spring"), meaning the latest one that has started; alone, "fall" is left to be a verb.
- Ranges open towards the past start on Jan 1 of R.year−120. "before X" ends the day before X;
  "until X" ends with X; "after X" starts the day after X and "since X" with X, both ending on the
  reference day, or on Dec 31 of R.year+20 when X lies after it. "between X and Y" and
  "from X to Y" span both. A month name without a year after these words ("until June") is the
  latest such month that has started by the reference day; so is "in/during <month>".
- Quarters and halves ("Q3 2023", "the third quarter of 2023", "H1 2024", "second half of last
  year") need a year; "last/this/next quarter" are calendar quarters. "early/mid/late <year>" are
  Jan–Apr / May–Aug / Sep–Dec; "early/mid/late <month>" are days 1–10 / 11–20 / 21–end.
- "this/next week|month|year|weekend" are calendar periods; "the past N days" and "the past week"
  are rolling windows ending on the reference day.
- "may", "march", "sat", "sun", "wed" (and "fall") count as date words only after a word such as
  "in", "on", "last" or "early", or before a number, so "Where may Alice work?" has no window.
  "hier" is the French "yesterday" unless the query looks German ("Was ist hier passiert?").
- Chinese: "N天前" is that day; "N周前", "N个月前" and "N年前" are the calendar week, month and
  year that held the day N units back; "最近N天" is a rolling window; a bare weekday (周三) is the
  latest one, today included; a month or quarter without a year is the latest one that has started.
- Only the first ``MAX_QUERY_CHARS`` characters are analysed (the engine cuts queries to 500 tokens
  anyway) and the date finder sees only the first ``MAX_FINDER_CHARS``: cost grows with length.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time

from ..types import TimeWindow
from ._rules import Ctx, Span, alt, false_friend, find_expression
from ._rules_cjk import find_cjk_expression
from ._words import (
    AMBIGUOUS,
    CONTEXT,
    DAY_WORDS,
    LANGS,
    MONTHS,
    NOW_WORDS,
    PERIOD_KINDS,
    PERIOD_WORDS,
    WEEKDAYS,
)

__all__ = ["MAX_FINDER_CHARS", "MAX_QUERY_CHARS", "Reading", "read_window", "resolve_window", "score_match",
           "warm_finder"]

logger = logging.getLogger(__name__)

#: Longest prefix of a query that is analysed at all, and the part handed to the date finder.
MAX_QUERY_CHARS = 4000
MAX_FINDER_CHARS = 500

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# NUL and other control characters, and lone surrogates that cannot be encoded.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")
_DIGITS = re.compile(r"\d+")
#: numbers in a shape a date or time has: an ordinal (17th), day and month (05/17, 12.05.2023), a time of
#: day (5 pm, 10:30); a bare number ("scored 3 goals", "Entity 05") names no day on its own
_DATE_DIGITS = re.compile(r"\d(?:st|nd|rd|th)\b|\d\s*[/.:\-]\s*\d|\d\s*(?:[ap]\.?m\b|h\b|o'?clock)")
_AFTER_CONTEXT = re.compile(rf"\b(?:{CONTEXT})\s+$")
# The gate lets "in the fall" through to the season rule; a scored "in the sun" is no Sunday.
_GATE_CONTEXT = re.compile(rf"\b(?:{CONTEXT})\s+(?:the\s+)?$")
_THEN_DIGIT = re.compile(r"\.?,?\s*\d")
_LEADING_PREP = re.compile(r"\b(?:in|on|at|during|throughout|over|of|for)(?:\s+the)?\s*$", re.IGNORECASE)
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([?!.,;:])")
_WORD = re.compile(r"\w")
_MONTH_WORDS = re.compile(rf"\b(?:{alt(MONTHS.values())})\b")
#: Finder scoring: points per kind of word in a match.
_SCORES: tuple[tuple[re.Pattern[str], int], ...] = (
    (_MONTH_WORDS, 50),
    (re.compile(rf"\b(?:{NOW_WORDS})\b"), 50),
    (re.compile(rf"\b(?:{WEEKDAYS})\b"), 30),
    (re.compile(rf"\b(?:{PERIOD_WORDS})\b"), 20),
)
#: The gate: every rule and every scoring word needs one of these (or a digit) to fire.
_GATE = re.compile(r"\d|\b(?:" + alt((
    *MONTHS.values(), WEEKDAYS, NOW_WORDS, PERIOD_WORDS, *DAY_WORDS.values(), *PERIOD_KINDS.values(),
    *(w for lang in LANGS.values() for w in (lang.last, lang.this, lang.next, *lang.seasons.values())),
)) + r")\b")


@dataclass(frozen=True)
class Reading:
    """What a query says about time: the window, the words that said it, and the rest of the query."""

    window: TimeWindow
    #: the date expression as it stands in the query
    phrase: str
    #: the query without the date expression (and a preposition just before it); the query itself
    #: when nothing but the date would be left
    rest: str


def resolve_window(
    query: str,
    reference: datetime,
    *,
    languages: Sequence[str] | None = None,
    southern_hemisphere: bool = False,
) -> TimeWindow | None:
    """Find the date window a query asks about, or ``None`` when it names no date.

    :param query: the recall query, in any language.
    :param reference: "now" for relative expressions; a naive value is read as UTC.
    :param languages: dateparser language codes the date finder may use; ``None`` allows all.
    :param southern_hemisphere: flip the seasons by six months.
    """
    reading = read_window(query, reference, languages=languages, southern_hemisphere=southern_hemisphere)
    return reading.window if reading else None


def read_window(
    query: str,
    reference: datetime,
    *,
    languages: Sequence[str] | None = None,
    southern_hemisphere: bool = False,
) -> Reading | None:
    """Read a query's date expression once: its window and the query without it.

    The parameters are those of :func:`resolve_window`.
    """
    try:
        ref = reference.replace(tzinfo=UTC) if reference.tzinfo is None else reference.astimezone(UTC)
        head = query[:MAX_QUERY_CHARS]
        text = unicodedata.normalize("NFKC", _UNSAFE.sub(" ", head))
        text = _UNSAFE.sub(" ", text).lower()
        ctx = Ctx(ref.date(), southern_hemisphere)
        found = find_cjk_expression(text, ctx) if _CJK.search(text) else None
        if found is None and _may_be_temporal(text):
            found = find_expression(text, ctx)
            if found is None and _may_name_a_day(text):
                day = _finder_day(text, ref, languages)
                found = ((day[0], day[0]), day[1], day[2]) if day else None
        if found is None:
            return None
        window = _window(found[0])
        if window is None:
            return None
        # positions in the normalised text are the query's own unless normalising changed its length
        source = head if len(head) == len(text) else text
        start, end = found[1], found[2]
        return Reading(window, source[start:end].strip(), _rest(source, start, end, query))
    except Exception:
        # Analysis never fails a recall; it only loses the temporal arm.
        logger.debug("date analysis failed for %r", query[:200] if isinstance(query, str) else query,
                     exc_info=True)
        return None


def _rest(source: str, start: int, end: int, query: str) -> str:
    """``source`` without ``[start, end)`` and a preposition just before it; ``query`` when no word is left."""
    before = _LEADING_PREP.sub("", source[:start])
    rest = _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join(f"{before} {source[end:]}".split()))
    return rest if _WORD.search(rest) else query


def warm_finder() -> None:
    """Load the date finder's language data (about a second), so no recall waits for it."""
    _finder_day("on march 3rd 2023 at noon", datetime.now(UTC), None)


def score_match(phrase: str) -> int:
    """Score one date-finder match; 0 means "not a date".

    :param phrase: the matched text, normalised and lower-cased.
    """
    digits = _DIGITS.findall(phrase)
    # A lone 4-digit number ("2023 widgets") is no date by itself.
    score = 100 if digits and not (len(digits) == 1 and len(digits[0]) == 4) else 0
    for pattern, points in _SCORES:
        if any(_is_date_word(m, phrase, _AFTER_CONTEXT) for m in pattern.finditer(phrase)):
            score += points
    return score


def _is_date_word(m: re.Match[str], text: str, context: re.Pattern[str]) -> bool:
    """An ambiguous word ("may") counts only after a context word or before a number."""
    return (m[0] not in AMBIGUOUS or bool(context.search(text[max(0, m.start() - 24):m.start()]))
            or bool(_THEN_DIGIT.match(text, m.end())))


def _may_be_temporal(text: str) -> bool:
    return any(_is_date_word(m, text, _GATE_CONTEXT) for m in _GATE.finditer(text))


def _may_name_a_day(text: str) -> bool:
    """Whether the date finder could score a match here: a number in a date's or a time's shape, or a
    month, weekday or "now" word.

    A period word alone ("what day", "which year") or a bare number ("Entity 05") never makes a match
    count, and the finder takes about 30 ms (the slowest step of such a recall), so it is not asked.
    """
    return bool(_DATE_DIGITS.search(text)) or any(
        _is_date_word(m, text, _AFTER_CONTEXT) for pattern, points in _SCORES[:3] for m in pattern.finditer(text))


def _finder_day(
    text: str, reference: datetime, languages: Sequence[str] | None
) -> tuple[date, int, int] | None:
    # Imported here: dateparser takes ~0.1 s to import and more to load its language data.
    from dateparser.search import search_dates

    snippet = text[:MAX_FINDER_CHARS]
    settings = {"RELATIVE_BASE": reference.replace(tzinfo=None), "PREFER_DATES_FROM": "past"}
    found = search_dates(snippet, languages=list(languages) if languages else None, settings=settings)
    best: tuple[int, int] = (0, 0)
    day: tuple[date, int, int] | None = None
    cursor = 0
    for phrase, when in found or ():
        at = snippet.find(phrase, cursor)
        cursor = at + len(phrase) if at >= 0 else cursor
        if (at >= 0 and _inside_cjk_word(snippet, at, at + len(phrase))) or false_friend(phrase, snippet):
            continue
        key = (score_match(phrase), len(phrase))
        if key[0] > 0 and key > best:
            best = key
            where = (at, at + len(phrase)) if at >= 0 else (0, 0)
            day = ((when.astimezone(UTC) if when.tzinfo else when).date(), *where)
    return day


def _inside_cjk_word(text: str, start: int, end: int) -> bool:
    """Whether a match's CJK edge runs on into more ideographs (a piece of a longer word)."""
    return bool(
        (start > 0 and _CJK.match(text, start) and _CJK.match(text, start - 1))
        or (end < len(text) and _CJK.match(text, end - 1) and _CJK.match(text, end))
    )


def _window(span: Span) -> TimeWindow | None:
    start, end = span
    if start > end:
        return None
    return TimeWindow(datetime.combine(start, time.min, UTC), datetime.combine(end, time.max, UTC))
