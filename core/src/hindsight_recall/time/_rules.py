"""Calendar arithmetic and the fixed rules that turn a normalised query into a date span.

Rules are tried in priority order and the first match that resolves wins. Ranges ("since …") come
first because they contain other expressions; the fixed table of phrases comes after the longer forms that
contain its phrases ("the first half of last year" must not stop at "last year").
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TypeVar

from ._words import (
    AMBIGUOUS,
    ART,
    CONN,
    DAY_WORDS,
    EN_NUMBERS,
    FALSE_FRIENDS,
    FEW_AGO,
    LANGS,
    MONTHS,
    ORDINALS,
    PARTS,
    PERIOD_KINDS,
    Lang,
)

Span = tuple[date, date]
K = TypeVar("K")

#: Open-ended ranges reach this far; bare years are bounded the same way.
PAST_YEARS = 120
FUTURE_YEARS = 20


@dataclass(frozen=True)
class Ctx:
    """What rules resolve against: the reference day (UTC) and the hemisphere for seasons."""

    today: date
    southern: bool = False


def alt(parts: Iterable[str]) -> str:
    """Join regex alternatives, each wrapped so that its inner ``|`` stays local."""
    return "|".join(f"(?:{p})" for p in parts)


def classify(text: str, table: Mapping[K, str]) -> K | None:
    """The key of the first table entry whose pattern matches all of ``text``."""
    for key, pattern in table.items():
        if re.fullmatch(pattern, text):
            return key
    return None


# ---- calendar arithmetic -------------------------------------------------------------------------

def add_months(year: int, month: int, delta: int) -> tuple[int, int]:
    """Shift a (year, month) pair by ``delta`` months."""
    index = year * 12 + month - 1 + delta
    return index // 12, index % 12 + 1


def month_span(year: int, month: int) -> Span:
    """First and last day of a calendar month."""
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def months_span(year: int, first: int, count: int) -> Span:
    """``count`` whole months from month ``first`` of ``year`` (may run into the next year)."""
    return date(year, first, 1), month_span(*add_months(year, first, count - 1))[1]


def year_span(year: int) -> Span:
    """January 1 to December 31."""
    return date(year, 1, 1), date(year, 12, 31)


def week_span(day: date) -> Span:
    """Monday to Sunday of the week holding ``day``."""
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=6)


def season_span(year: int, season: int, southern: bool) -> Span:
    """The meteorological season (0 spring … 3 winter) that starts in ``year``."""
    return months_span(year, (2 + 3 * season + (6 if southern else 0)) % 12 + 1, 3)


def open_start(ctx: Ctx) -> date:
    """The start of a range that is open towards the past."""
    return date(max(1, ctx.today.year - PAST_YEARS), 1, 1)


def in_year_range(year: int, ctx: Ctx) -> bool:
    """Whether a 4-digit number is a plausible year: R.year−120 … R.year+20."""
    return ctx.today.year - PAST_YEARS <= year <= ctx.today.year + FUTURE_YEARS


def latest_month(month: int, ctx: Ctx) -> Span:
    """The most recent occurrence of a month that has started by the reference day."""
    return month_span(ctx.today.year if month <= ctx.today.month else ctx.today.year - 1, month)


def relative_span(unit: str, offset: int, ctx: Ctx) -> Span:
    """Calendar week, month, quarter, year or weekend ``offset`` units from the reference day."""
    today = ctx.today
    if unit == "week":
        return week_span(today + timedelta(weeks=offset))
    if unit == "month":
        return month_span(*add_months(today.year, today.month, offset))
    if unit == "quarter":
        return months_span(*add_months(today.year, today.month - (today.month - 1) % 3, 3 * offset), 3)
    if unit == "year":
        return year_span(today.year + offset)
    if offset < 0:
        # "last weekend": the Saturday strictly before today, and the Sunday after it.
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7) - timedelta(weeks=-offset - 1)
    else:
        saturday = week_span(today)[0] + timedelta(days=5 + 7 * offset)
    return saturday, saturday + timedelta(days=1)


def season_occurrence(season: int, offset: int | None, ctx: Ctx) -> Span:
    """The occurrence of a season a modifier points at: -1 last, 0 this, +1 next, None bare."""
    today = ctx.today
    spans = [season_span(y, season, ctx.southern) for y in range(today.year - 2, today.year + 2)]
    if offset is not None and offset < 0:
        return [s for s in spans if s[1] < today][offset]
    if offset is not None and offset > 0:
        return [s for s in spans if s[0] > today][offset - 1]
    if offset is None:
        return [s for s in spans if s[0] <= today][-1]
    if spans[0][0].year == spans[0][1].year:
        return season_span(today.year, season, ctx.southern)
    # A season across New Year: the one holding today, else the nearer of the two touching this year.
    near = [s for s in spans if s[0].year in (today.year - 1, today.year)]
    return min(near, key=lambda s: max((s[0] - today).days, (today - s[1]).days, 0))


# ---- rules ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """A compiled pattern and the function that turns one of its matches into a span."""

    pattern: re.Pattern[str]
    resolve: Callable[[re.Match[str], Ctx], Span | None]
    #: where the expression ends, for rules whose match is only its opening word ("since", "between")
    extent: Callable[[re.Match[str], Ctx], int] | None = None

    def end(self, m: re.Match[str], ctx: Ctx) -> int:
        """Where the expression of a resolved match ends in the text."""
        return self.extent(m, ctx) if self.extent else m.end()


_MONTH = alt(MONTHS.values())
_DAY_BEFORE = re.compile(r"\d{1,2}(?:st|nd|rd|th|er|e|º|\.)?\s*(?:of|de|del|di)?\s*$")
_FALSE_FRIENDS = {word: re.compile(rf"\b(?:{hints})\b") for word, hints in FALSE_FRIENDS.items()}
_YEAR_TAIL = r"\b(?!\s*[-/.:]\s*\d)"


def false_friend(word: str, text: str) -> bool:
    """Whether ``word`` means no date in ``text`` (the German "hier" is "here")."""
    hints = _FALSE_FRIENDS.get(word)
    return bool(hints and hints.search(text))


def _mods(lang: Lang) -> str:
    return alt((lang.last, lang.this, lang.next))


def _offset(lang: Lang, mod: str | None) -> int | None:
    return classify(mod, {-1: lang.last, 0: lang.this, 1: lang.next}) if mod else None


def _relative(lang: Lang, units: str, named: bool = True) -> str:
    """``<modifier> <unit>``, and ``<unit> <modifier>`` where the language allows it."""
    m1, u1, m2, u2 = ("?P<m1>", "?P<u1>", "?P<m2>", "?P<u2>") if named else ("?:",) * 4
    pre = rf"({m1}{_mods(lang)})(?:\s+|(?<=['’]))({u1}{units})"
    return rf"(?:{pre}|({u2}{units})\s+({m2}{_mods(lang)}))" if lang.post else pre


_YEAR_REL = {code: re.compile(_relative(lang, lang.units["year"])) for code, lang in LANGS.items()}
YEAR_REF = r"\d{4}|" + alt(_relative(lang, lang.units["year"], named=False) for lang in LANGS.values())


def year_of(text: str | None, ctx: Ctx) -> int | None:
    """The year that "2023", "last year" or "el año pasado" points at, if plausible."""
    if not text:
        return None
    if text.isdigit():
        return int(text) if in_year_range(int(text), ctx) else None
    for code, pattern in _YEAR_REL.items():
        m = pattern.fullmatch(text)
        offset = _offset(LANGS[code], m["m1"] or m["m2"]) if m else None
        if offset is not None:
            return ctx.today.year + offset
    return None


def _month_no(text: str) -> int:
    return classify(text, MONTHS) or 1


def _quarter_half(m: re.Match[str], ctx: Ctx) -> Span | None:
    year = year_of(m["yref"] or m["y"], ctx)
    kind = classify(m["kind"], PERIOD_KINDS) if m["kind"] else "quarter" if m["q"] else "half"
    size = 3 if kind == "quarter" else 6
    index = classify(m["ord"], ORDINALS) if m["ord"] else int(m["q"] or m["h"])
    if year is None or index is None:
        return None
    index = 12 // size if index == -1 else index
    return months_span(year, 1 + size * (index - 1), size) if 1 <= index <= 12 // size else None


def _part(m: re.Match[str], ctx: Ctx) -> Span | None:
    part = classify(m["part"], PARTS)
    year = year_of(m["yref"], ctx)
    if m["mon"]:
        # "late may" with neither a year nor an "of" is too often the verb.
        if m["mon"] in AMBIGUOUS and year is None and not m["conn"]:
            return None
        month = _month_no(m["mon"])
        first, last = month_span(year, month) if year is not None else latest_month(month, ctx)
        days = {"early": (1, 10), "mid": (11, 20)}.get(str(part), (21, last.day))
        return first.replace(day=days[0]), first.replace(day=days[1])
    return months_span(year, {"early": 1, "mid": 5}.get(str(part), 9), 4) if year is not None else None


def _season_rule(lang: Lang) -> Rule:
    mods = _mods(lang)
    post = rf"(?:\s+(?P<m2>{mods}))?" if lang.post else r"(?P<m2>)?"
    pattern = (rf"\b(?:(?P<p>{lang.preps})\s+)?(?:(?P<m1>{mods})\s+)?(?:{ART})?"
               rf"(?P<s>{alt(lang.seasons.values())})\b{post}(?:\s*,?\s*(?:{CONN}\s+)?(?P<y>\d{{4}})\b)?")

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        season = classify(m["s"], lang.seasons) or 0
        if m["y"]:
            year = int(m["y"])
            return season_span(year, season, ctx.southern) if in_year_range(year, ctx) else None
        offset = _offset(lang, m["m1"] or m["m2"])
        if offset is not None:
            return season_occurrence(season, offset, ctx)
        return season_occurrence(season, None, ctx) if m["p"] else None

    return Rule(re.compile(pattern), resolve)


def _relative_rule(lang: Lang) -> Rule:
    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        offset = _offset(lang, m["m1"] or m["m2"])
        unit = classify(m["u1"] or m["u2"], lang.units)
        return relative_span(unit, offset, ctx) if offset is not None and unit else None

    return Rule(re.compile(rf"\b{_relative(lang, alt(lang.units.values()))}\b"), resolve)


def _few_ago_rule(lang: Lang) -> Rule:
    units = {k: lang.counted[k] for k in ("day", "week", "month")}
    pattern = lang.ago.format(q=f"(?P<q>{alt(lang.few.values())})", u=f"(?P<u>{alt(units.values())})")

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        back = FEW_AGO[(str(classify(m["q"], lang.few)), str(classify(m["u"], units)))]
        return ctx.today - timedelta(days=back[0]), ctx.today - timedelta(days=back[1])

    return Rule(re.compile(rf"\b{pattern}\b"), resolve)


def _counted_ago_rule(lang: Lang) -> Rule:
    """"3 days ago" is that day; "two weeks ago", "5 months ago" and "4 years ago" are the calendar
    week, month and year that held the day that many units back (as the Chinese "N周前")."""
    number = rf"(?P<n>\d{{1,3}}|{'|'.join(EN_NUMBERS)})"
    pattern = lang.ago.format(q=number, u=f"(?P<u>{alt(lang.counted.values())})")

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        n = int(m["n"]) if m["n"].isdigit() else EN_NUMBERS[m["n"]]
        unit = classify(m["u"], lang.counted)
        if unit == "day":
            day = ctx.today - timedelta(days=n)
            return day, day
        if unit == "week":
            return week_span(ctx.today - timedelta(weeks=n))
        year, month = add_months(ctx.today.year, ctx.today.month, -n * (12 if unit == "year" else 1))
        if year < 1:
            return None
        return month_span(year, month) if unit == "month" else year_span(year)

    return Rule(re.compile(rf"\b{pattern}\b"), resolve)


def _rolling_rule(lang: Lang) -> Rule:
    pattern = lang.rolling.format(n=rf"(?P<n>\d{{1,3}}|{'|'.join(EN_NUMBERS)})",
                                  u=f"(?P<u>{alt(lang.counted.values())})")
    # English "the past week" is a rolling week, unlike the calendar "last week".
    english = lang is LANGS["en"]
    pattern = rf"(?:{pattern}|past\s+(?P<u1>week|month|year))" if english else pattern + "(?P<u1>)?"

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        n = int(m["n"]) if m["n"] and m["n"].isdigit() else EN_NUMBERS.get(m["n"] or "one", 1)
        unit = classify(m["u"], lang.counted) if m["u"] else m["u1"]
        if unit in ("day", "week"):
            return ctx.today - timedelta(days=n * (7 if unit == "week" else 1)), ctx.today
        year, month = add_months(ctx.today.year, ctx.today.month, -n * (12 if unit == "year" else 1))
        if n < 1 or year < 1:
            return None
        return date(year, month, min(ctx.today.day, calendar.monthrange(year, month)[1])), ctx.today

    return Rule(re.compile(rf"\b{pattern}\b"), resolve)


def _days(m: re.Match[str], ctx: Ctx) -> Span | None:
    if m["d1"] and false_friend(m["d1"], m.string):
        return None
    day = ctx.today - timedelta(days=2 if m["d2"] else 1 if m["d1"] else 0)
    return day, day


def _month_year(m: re.Match[str], ctx: Ctx) -> Span | None:
    year = int(m["y"])
    # A month name preceded by a day number is a single day (DAY_DATES).
    if year < 1 or _DAY_BEFORE.search(m.string[max(0, m.start() - 16):m.start()]):
        return None
    return month_span(year, _month_no(m["mon"]))


def _year(m: re.Match[str], ctx: Ctx) -> Span | None:
    return year_span(int(m["y"])) if in_year_range(int(m["y"]), ctx) else None


def _bare_month(m: re.Match[str], ctx: Ctx) -> Span | None:
    return latest_month(_month_no(m["mon"]), ctx)


def _full_date(m: re.Match[str], ctx: Ctx) -> Span | None:
    month, day = int(m["m"]) if m["m"] else _month_no(m["mon"]), int(m["d"])
    # Without a year: the most recent such day that is not after the reference.
    for year in [int(m["y"])] if m["y"] else [ctx.today.year, ctx.today.year - 1]:
        if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
            return None
        if m["y"] or date(year, month, day) <= ctx.today:
            return date(year, month, day), date(year, month, day)
    return None


def _range_rule(lang: Lang) -> Rule:
    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        anchor = match_anchor(m.string, m.end(), ctx)
        if anchor is None:
            return None
        (first, last), kind = anchor[0], classify(m["kind"], lang.ranges)
        if kind in ("before", "until"):
            span = open_start(ctx), first - timedelta(days=1) if kind == "before" else last
        else:
            start = last + timedelta(days=1) if kind == "after" else first
            # An anchor after the reference still yields a window, open towards the future.
            span = start, ctx.today if start <= ctx.today else date(ctx.today.year + FUTURE_YEARS, 12, 31)
        return span if span[0] <= span[1] else None

    def extent(m: re.Match[str], ctx: Ctx) -> int:
        anchor = match_anchor(m.string, m.end(), ctx)
        return anchor[1] if anchor else m.end()

    return Rule(re.compile(rf"\b(?P<kind>{alt(lang.ranges.values())})\s+"), resolve, extent)


def _between_rule(opener: str, joiner: str) -> Rule:
    join = re.compile(rf"\s*(?:-|–|\s(?:{joiner}))\s+")

    def both(m: re.Match[str], ctx: Ctx) -> tuple[Span, int] | None:
        first = match_anchor(m.string, m.end(), ctx)
        glue = join.match(m.string, first[1]) if first else None
        second = match_anchor(m.string, glue.end(), ctx) if first and glue else None
        if first is None or second is None or glue is None:
            return None
        start = first[0][0]
        bare = _BARE_MONTH.fullmatch(m.string, m.end(), glue.start())
        if bare:
            # "between March and May 2023": the first month is the latest one up to the second's end
            end = second[0][1]
            month = _month_no(bare["mon"])
            start = date(end.year if month <= end.month else end.year - 1, month, 1)
        if start > second[0][1]:
            return None
        return (start, second[0][1]), second[1]

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        found = both(m, ctx)
        return found[0] if found else None

    def extent(m: re.Match[str], ctx: Ctx) -> int:
        found = both(m, ctx)
        return found[1] if found else m.end()

    return Rule(re.compile(rf"\b(?:{opener})\s+"), resolve, extent)


_YEAR_WORDS = (r"in|during|throughout|within|year|en|durante|a[ñn]o|nel|nell['’]anno|anno|pendant|durant"
               r"|ann[ée]e|im|während|jahre?s?|в|во|году?")
_FILLER = r"the|year|of|whole|entire|all|calendar|el|del|de|a[ñn]o|anno|l['’]anno|ann[ée]e|jahre?s?|das|des"
_PREPS = "|".join(sorted({p for lang in LANGS.values() for p in lang.preps.split("|")}))


def _pad(pattern: str, *groups: str) -> str:
    """Add empty optional groups so that one resolver can read every name."""
    return pattern + "".join(f"(?P<{g}>)?" for g in groups if f"?P<{g}>" not in pattern)


_QH_GROUPS = ("ord", "kind", "q", "h", "y", "yref")
_DATE_GROUPS = ("y", "m", "d", "mon")

QUARTER_HALF = tuple(Rule(re.compile(_pad(p, *_QH_GROUPS)), _quarter_half) for p in (
    rf"\b(?:the\s+)?(?P<ord>{alt(ORDINALS.values())})\s+(?P<kind>{alt(PERIOD_KINDS.values())})"
    rf"(?:\s+(?:{CONN}|year|a[ñn]o|anno|ann[ée]e|jahres))*\s*,?\s*(?P<yref>{YEAR_REF})\b",
    rf"\b(?:q(?P<q>[1-4])|h(?P<h>[12]))\s*(?:,|of|de|del)?\s*(?P<yref>{YEAR_REF})\b",
    r"\b(?P<y>\d{4})\s*[-/]?\s*(?:q(?P<q>[1-4])|h(?P<h>[12]))\b",
))
PART_RULE = Rule(re.compile(
    rf"\b(?P<part>{alt(PARTS.values())})(?:\s*-\s*|\s+)(?P<conn>(?:{CONN}\s+){{0,2}})"
    rf"(?:(?P<mon>{_MONTH})\b\.?(?:\s*,?\s*(?:{CONN}\s+)?)?)?(?:(?P<yref>{YEAR_REF}){_YEAR_TAIL})?"), _part)
DAY_RULE = Rule(re.compile(
    rf"\b(?:(?P<d2>{DAY_WORDS[-2]})|(?P<d1>{DAY_WORDS[-1]})|(?P<d0>{DAY_WORDS[0]}))\b"), _days)
MONTH_YEAR = Rule(re.compile(rf"\b(?P<mon>{_MONTH})\.?(?:\s*,\s*|\s+(?:of|de|del|di)\s+|\s+)(?P<y>\d{{4}})"
                             rf"{_YEAR_TAIL}"), _month_year)
YEAR_CONTEXT = Rule(re.compile(rf"\b(?:{_YEAR_WORDS})\s+(?:(?:{_FILLER})\s+){{0,3}}(?P<y>\d{{4}})"
                               rf"(?:\s+(?:год[ау]?|г\.))?{_YEAR_TAIL}"), _year)
PREP_MONTH = Rule(re.compile(rf"\b(?:{_PREPS})\s+(?:the\s+month\s+of\s+|mois\s+de\s+)?"
                             rf"(?P<mon>{_MONTH})\b(?!\s*[,.]?\s*\d)"), _bare_month)
_SEASONS = tuple(_season_rule(lang) for lang in LANGS.values())
_RELATIVES = tuple(_relative_rule(lang) for lang in LANGS.values())
#: One day: ISO, "<month> <day>[, <year>]" and "<day> [of] <month>[, <year>]" (without a year, the
#: latest such day); as anchors they are matched where an expression starts.
FULL_DATES = tuple(Rule(re.compile(_pad(p, *_DATE_GROUPS)), _full_date) for p in (
    r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b",
    rf"(?P<mon>{_MONTH})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s*(?P<y>\d{{4}})\b)?",
    rf"(?P<d>\d{{1,2}})(?:st|nd|rd|th|er|\.)?\s+(?:of\s+|de\s+)?(?P<mon>{_MONTH})\b"
    r"(?:,?\s*(?:de\s+)?(?P<y>\d{4})\b)?",
))
#: The same, found anywhere in a query: a word boundary before each.
DAY_DATES = tuple(Rule(re.compile(rf"\b{rule.pattern.pattern}"), _full_date) for rule in FULL_DATES)
#: What may follow "before", "since", "between … and …".
ANCHORS: tuple[Rule, ...] = (
    *(_counted_ago_rule(lang) for lang in LANGS.values()),
    PART_RULE, *QUARTER_HALF, *_SEASONS, DAY_RULE, *_RELATIVES, *FULL_DATES,
    MONTH_YEAR,
    Rule(re.compile(rf"(?P<mon>{_MONTH})\b"), _bare_month),
    Rule(re.compile(rf"(?P<y>\d{{4}}){_YEAR_TAIL}"), _year),
)
_BARE_MONTH = re.compile(rf"(?:{ART})?(?P<mon>{_MONTH})\.?\s*")
_ANCHOR_ARTICLE = re.compile(rf"(?:{ART})?")

RULES: tuple[Rule, ...] = (
    *(_between_rule(o, j) for lang in LANGS.values() for o, j in lang.between),
    *(_range_rule(lang) for lang in LANGS.values()),
    *QUARTER_HALF, PART_RULE, *_SEASONS,
    *(_rolling_rule(lang) for lang in LANGS.values()), DAY_RULE,
    *(_few_ago_rule(lang) for lang in LANGS.values()),
    *(_counted_ago_rule(lang) for lang in LANGS.values()),
    *_RELATIVES, *DAY_DATES, MONTH_YEAR, YEAR_CONTEXT, PREP_MONTH,
)


def match_anchor(text: str, pos: int, ctx: Ctx) -> tuple[Span, int] | None:
    """Resolve the date expression starting at ``pos``; return its span and where it ends.

    :param text: the normalised query.
    :param pos: where the expression starts (after "before", "since", …).
    :param ctx: the resolution context.
    """
    article = _ANCHOR_ARTICLE.match(text, pos)
    pos = article.end() if article else pos
    for rule in ANCHORS:
        m = rule.pattern.match(text, pos)
        span = rule.resolve(m, ctx) if m else None
        if m and span:
            return span, m.end()
    return None


def find_span(text: str, ctx: Ctx, rules: Iterable[Rule] = RULES) -> Span | None:
    """Apply the rules in priority order; the first match that resolves wins.

    :param text: the normalised query.
    :param ctx: the resolution context.
    :param rules: the rules to try, in order.
    """
    found = find_expression(text, ctx, rules)
    return found[0] if found else None


def find_expression(text: str, ctx: Ctx, rules: Iterable[Rule] = RULES) -> tuple[Span, int, int] | None:
    """As :func:`find_span`, with where the winning expression starts and ends in ``text``.

    :param text: the normalised query.
    :param ctx: the resolution context.
    :param rules: the rules to try, in order.
    """
    for rule in rules:
        for m in rule.pattern.finditer(text):
            span = rule.resolve(m, ctx)
            if span is not None:
                return span, m.start(), rule.end(m, ctx)
    return None
