"""Word tables and fixed rules that turn a normalised query into a date span (SPEC §7 step 2).

Every pattern here runs on NFKC-normalised, lower-cased text. Words live in per-language tables so
that a modifier only pairs with a noun of its own language ("this estate" is not "questa estate").
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta

Span = tuple[date, date]

#: Open-ended ranges ("before 2023") reach this far back; SPEC §7 uses the same year bounds.
PAST_YEARS = 120
FUTURE_YEARS = 20


@dataclass(frozen=True)
class Ctx:
    """What rules resolve against: the reference day (UTC) and the hemisphere for seasons."""

    today: date
    southern: bool = False


@dataclass(frozen=True)
class Lang:
    """The words one language uses for relative periods; values are regex alternations."""

    last: str
    this: str
    next: str
    #: Whether a modifier may follow its noun ("la semana pasada").
    post: bool
    units: Mapping[str, str]
    seasons: Mapping[int, str]
    #: "In"/"during" before a season or a month name.
    preps: str
    #: "a couple / a few <unit> ago": template with {q} and {u}, quantifiers, and units.
    ago: str
    few: Mapping[str, str]
    counted: Mapping[str, str]
    #: "the last N days": template with {n} and {u}.
    rolling: str
    ranges: Mapping[str, str]
    #: Two-ended ranges: (opening word, joining word).
    between: tuple[tuple[str, str], ...]


LANGS: Mapping[str, Lang] = {
    "en": Lang(
        last=r"last|previous", this=r"this|current", next=r"next|coming|upcoming", post=False,
        units={"weekend": r"weekend|week-end", "week": r"week", "month": r"month", "year": r"year",
               "quarter": r"quarter"},
        seasons={0: r"spring", 1: r"summer", 2: r"autumn|fall", 3: r"winter"},
        preps=r"in|during|throughout|over",
        ago=r"(?:a\s+)?{q}\s+{u}\s+ago", few={"couple": r"couple(?:\s+of)?", "few": r"few"},
        counted={"day": r"days?", "week": r"weeks?", "month": r"months?", "year": r"years?"},
        rolling=r"(?:last|past|previous)\s+{n}\s+{u}",
        ranges={"before": r"before|prior\s+to", "after": r"after", "since": r"since",
                "until": r"until|till|up\s+to|through"},
        between=((r"between", r"and"), (r"from", r"to|until|till|through")),
    ),
    "es": Lang(
        last=r"pasad[oa]|anterior", this=r"est[ea]", next=r"pr[oó]xim[oa]|que\s+viene", post=True,
        units={"weekend": r"fin\s+de\s+semana", "week": r"semana", "month": r"mes", "year": r"a[ñn]o",
               "quarter": r"trimestre"},
        seasons={0: r"primavera", 1: r"verano", 2: r"oto[ñn]o", 3: r"invierno"},
        preps=r"en|durante",
        ago=r"hace\s+{q}\s+{u}",
        few={"couple": r"un\s+par\s+de", "few": r"un[oa]s|algun[oa]s|poc[oa]s"},
        counted={"day": r"d[ií]as?", "week": r"semanas?", "month": r"mes(?:es)?", "year": r"a[ñn]os?"},
        rolling=r"[úu]ltim[oa]s\s+{n}\s+{u}",
        ranges={"before": r"antes\s+de(?:l)?", "after": r"despu[ée]s\s+de(?:l)?", "since": r"desde",
                "until": r"hasta"},
        between=((r"entre", r"y"), (r"desde", r"hasta")),
    ),
    "it": Lang(
        last=r"scors[oa]|passat[oa]", this=r"quest[oa]|quest['’]", next=r"prossim[oa]", post=True,
        units={"weekend": r"fine\s+settimana|weekend", "week": r"settimana", "month": r"mese",
               "year": r"anno", "quarter": r"trimestre"},
        seasons={0: r"primavera", 1: r"estate", 2: r"autunno", 3: r"inverno"},
        preps=r"in|nel|durante|a",
        ago=r"{q}\s+{u}\s+fa",
        few={"couple": r"un\s+paio\s+di", "few": r"qualche|alcun[ie]|poch[ie]"},
        counted={"day": r"giorn[oi]", "week": r"settiman[ae]", "month": r"mes[ei]", "year": r"ann[oi]"},
        rolling=r"ultim[ie]\s+{n}\s+{u}",
        ranges={"before": r"prima\s+del(?:l['’])?", "after": r"dopo\s+il|dopo", "since": r"dal(?:l['’])?",
                "until": r"fino\s+al(?:l['’])?"},
        between=((r"tra|fra", r"e"), (r"dal", r"al")),
    ),
    "fr": Lang(
        last=r"derni[eè]re?|pass[ée]e?", this=r"ce|cet|cette", next=r"prochaine?", post=True,
        units={"weekend": r"week-?end", "week": r"semaine", "month": r"mois", "year": r"ann[ée]e|an",
               "quarter": r"trimestre"},
        seasons={0: r"printemps", 1: r"[ée]t[ée]", 2: r"automne", 3: r"hiver"},
        preps=r"en|pendant|durant|au",
        ago=r"il\s+y\s+a\s+{q}\s+{u}", few={"couple": r"deux\s+ou\s+trois", "few": r"quelques"},
        counted={"day": r"jours?", "week": r"semaines?", "month": r"mois", "year": r"ans|ann[ée]es?"},
        rolling=r"{n}\s+derni[eè]r(?:e)?s\s+{u}",
        ranges={"before": r"avant", "after": r"apr[eè]s", "since": r"depuis",
                "until": r"jusqu['’]\s*(?:à|au|en)"},
        between=((r"entre", r"et"), (r"de|du", r"à|au")),
    ),
    "de": Lang(
        last=r"letzte[nrsm]?|vorige[nrsm]?|vergangene[nrsm]?", this=r"diese[nrsm]?",
        next=r"n[äa]chste[nrsm]?|kommende[nrsm]?", post=False,
        units={"weekend": r"wochenende", "week": r"woche", "month": r"monat", "year": r"jahre?s?",
               "quarter": r"quartal"},
        seasons={0: r"fr[üu]hling|fr[üu]hjahr", 1: r"sommer", 2: r"herbst", 3: r"winter"},
        preps=r"im|in|während",
        ago=r"vor\s+{q}\s+{u}", few={"couple": r"ein\s+paar", "few": r"einigen|wenigen|mehreren"},
        counted={"day": r"tage?n?", "week": r"wochen?", "month": r"monate?n?", "year": r"jahre?n?"},
        rolling=r"letzten\s+{n}\s+{u}",
        ranges={"before": r"vor", "after": r"nach", "since": r"seit", "until": r"bis"},
        between=((r"zwischen", r"und"), (r"von", r"bis")),
    ),
    "ru": Lang(
        last=r"прошл\w*", this=r"эт\w*|текущ\w*", next=r"следующ\w*|будущ\w*", post=False,
        units={"weekend": r"выходны\w*", "week": r"недел\w*", "month": r"месяц\w*", "year": r"год\w*",
               "quarter": r"квартал\w*"},
        seasons={0: r"весн\w*", 1: r"лето|летом", 2: r"осен\w*", 3: r"зим\w*"},
        preps=r"в|во",
        ago=r"{q}\s+{u}\s+назад", few={"couple": r"пару|пара", "few": r"несколько"},
        counted={"day": r"дн\w*|день", "week": r"недел\w*", "month": r"месяц\w*", "year": r"год\w*|лет"},
        rolling=r"последни[ей]\s+{n}\s+{u}",
        ranges={"before": r"до", "after": r"после", "since": r"с|со", "until": r"по"},
        between=((r"между", r"и"), (r"с", r"по|до")),
    ),
}

MONTHS: Mapping[int, str] = {
    1: r"january|jan|enero|gennaio|janvier|januar|jänner|январ\w*",
    2: r"february|feb|febrero|febbraio|f[ée]vrier|februar|феврал\w*",
    3: r"march|mar|marzo|mars|m[äa]rz|март\w*",
    4: r"april|apr|abril|aprile|avril|апрел\w*",
    5: r"may|mayo|maggio|mai|ма[йяе]",
    6: r"june|jun|junio|giugno|juin|juni|июн\w*",
    7: r"july|jul|julio|luglio|juillet|juli|июл\w*",
    8: r"august|aug|agosto|ao[uû]t|август\w*",
    9: r"september|sept|sep|septiembre|settembre|septembre|сентябр\w*",
    10: r"october|oct|octubre|ottobre|octobre|oktober|okt|октябр\w*",
    11: r"november|nov|noviembre|novembre|ноябр\w*",
    12: r"december|dec|diciembre|dicembre|d[ée]cembre|dezember|dez|декабр\w*",
}
#: Day words of the fixed table, keyed by offset from the reference day.
DAY_WORDS: Mapping[int, str] = {
    -2: r"(?:the\s+)?day\s+before\s+yesterday|anteayer|antier|l['’]altro\s*ieri|altroieri"
        r"|avant-hier|vorgestern|позавчера",
    -1: r"yesterday|ayer|ieri|hier|gestern|вчера",
    0: r"today|hoy|oggi|aujourd['’]?hui|heute|сегодня",
}
ORDINALS: Mapping[int, str] = {
    1: r"first|1st|primer|primero|primo|premier|1er|erste[nrsm]?|1\.|перв\w*",
    2: r"second|2nd|segundo|secondo|deuxi[eè]me|seconde?|2e|zweite[nrsm]?|2\.|втор\w*",
    3: r"third|3rd|tercer|tercero|terzo|troisi[eè]me|3e|dritte[nrsm]?|3\.|трет\w*",
    4: r"fourth|4th|cuarto|quarto|quatri[eè]me|4e|vierte[nrsm]?|4\.|четв[её]рт\w*",
    #: "the last quarter of 2023" is the final one; without a year "last quarter" is relative.
    -1: r"last|final|[úu]ltimo|ultimo|dernier|letzte[nrsm]?|последн\w*",
}
PERIOD_KINDS: Mapping[str, str] = {
    "quarter": r"quarter|trimestre|quartal|квартал\w*",
    "half": r"half|semestre|halbjahr\w*|jahresh[äa]lfte|met[àa]|полугоди\w*",
}
PARTS: Mapping[str, str] = {
    "early": r"early|beginning|start|principios|comienzos|inicios|inizio|d[ée]but|anfang|начал\w*",
    "mid": r"mid|middle|mediados|met[àa]|mi(?=-)|mitte|середин\w*",
    "late": r"late|end|finales|fines|fine|fin|ende|конц\w*|конец",
}
_CONN = r"(?:of|the|de|del|di|du|des|dell['’]|in)"
_EN_NUMBERS = {w: i for i, w in enumerate(
    "one two three four five six seven eight nine ten eleven twelve".split(), start=1)}
_FEW_AGO: Mapping[tuple[str, str], tuple[int, int]] = {
    ("couple", "day"): (3, 1), ("few", "day"): (5, 2),
    ("couple", "week"): (21, 7), ("few", "week"): (35, 14),
    ("couple", "month"): (90, 30), ("few", "month"): (150, 60),
}


def alt(parts: Iterable[str]) -> str:
    """Join regex alternatives, each wrapped so that inner ``|`` stays local.

    :param parts: the alternatives.
    """
    return "|".join(f"(?:{p})" for p in parts)


def classify(text: str, table: Mapping[object, str]) -> object | None:
    """Return the key of the first table entry whose pattern matches all of ``text``.

    :param text: a matched word or phrase.
    :param table: key → regex alternation.
    """
    for key, pattern in table.items():
        if re.fullmatch(pattern, text):
            return key
    return None


# ---- calendar arithmetic -------------------------------------------------------------------------

def add_months(year: int, month: int, delta: int) -> tuple[int, int]:
    """Shift a (year, month) pair by ``delta`` months.

    :param year: the year.
    :param month: the month, 1–12.
    :param delta: months to add, may be negative.
    """
    index = year * 12 + month - 1 + delta
    return index // 12, index % 12 + 1


def month_span(year: int, month: int) -> Span:
    """The first and last day of a calendar month.

    :param year: the year.
    :param month: the month, 1–12.
    """
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def months_span(year: int, first: int, count: int) -> Span:
    """``count`` whole months starting at ``first`` of ``year`` (may run into the next year).

    :param year: the year of the first month.
    :param first: the first month, 1–12.
    :param count: how many months.
    """
    end_year, end_month = add_months(year, first, count - 1)
    return date(year, first, 1), month_span(end_year, end_month)[1]


def year_span(year: int) -> Span:
    """January 1 to December 31.

    :param year: the year.
    """
    return date(year, 1, 1), date(year, 12, 31)


def week_span(day: date) -> Span:
    """Monday to Sunday of the week holding ``day``.

    :param day: any day of the week.
    """
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=6)


def season_span(year: int, season: int, southern: bool) -> Span:
    """The meteorological season (0 spring … 3 winter) that starts in ``year``.

    :param year: the year the season starts in.
    :param season: 0 spring, 1 summer, 2 autumn, 3 winter.
    :param southern: shift by six months for the southern hemisphere.
    """
    first = (2 + 3 * season + (6 if southern else 0)) % 12 + 1
    return months_span(year, first, 3)


def open_start(ctx: Ctx) -> date:
    """The start used for ranges open towards the past.

    :param ctx: the resolution context.
    """
    return date(max(1, ctx.today.year - PAST_YEARS), 1, 1)


def in_year_range(year: int, ctx: Ctx) -> bool:
    """Whether a bare 4-digit number is a plausible year (SPEC §7: R.year−120 … R.year+20).

    :param year: the candidate year.
    :param ctx: the resolution context.
    """
    return ctx.today.year - PAST_YEARS <= year <= ctx.today.year + FUTURE_YEARS


def latest_month(month: int, ctx: Ctx) -> Span:
    """The most recent occurrence of a month that has started by the reference day.

    :param month: the month, 1–12.
    :param ctx: the resolution context.
    """
    year = ctx.today.year if month <= ctx.today.month else ctx.today.year - 1
    return month_span(year, month)


def relative_span(unit: str, offset: int, ctx: Ctx) -> Span:
    """Previous (-1), current (0) or next (+1) calendar week, month, quarter, year or weekend.

    :param unit: ``week``, ``month``, ``quarter``, ``year`` or ``weekend``.
    :param offset: -1, 0 or +1.
    :param ctx: the resolution context.
    """
    today = ctx.today
    if unit == "week":
        return week_span(today + timedelta(weeks=offset))
    if unit == "month":
        return month_span(*add_months(today.year, today.month, offset))
    if unit == "quarter":
        year, month = add_months(today.year, today.month - (today.month - 1) % 3, 3 * offset)
        return months_span(year, month, 3)
    if unit == "year":
        return year_span(today.year + offset)
    if offset < 0:
        # "last weekend" = the Saturday strictly before today and the Sunday after it.
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
    else:
        saturday = week_span(today)[0] + timedelta(days=5 + 7 * offset)
    return saturday, saturday + timedelta(days=1)


def season_occurrence(season: int, offset: int | None, ctx: Ctx) -> Span:
    """Pick the occurrence of a season that a modifier points at (see the module choices).

    :param season: 0 spring … 3 winter.
    :param offset: -1 last, 0 this, +1 next, ``None`` for a bare season after "in"/"during".
    :param ctx: the resolution context.
    """
    today = ctx.today
    spans = [season_span(y, season, ctx.southern) for y in range(today.year - 2, today.year + 2)]
    if offset == -1:
        return [s for s in spans if s[1] < today][-1]
    if offset == 1:
        return [s for s in spans if s[0] > today][0]
    if offset is None:
        return [s for s in spans if s[0] <= today][-1]
    straddles = spans[0][0].year != spans[0][1].year
    if not straddles:
        return season_span(today.year, season, ctx.southern)
    # A season across New Year: the one holding today, else whichever of the two is nearer.
    near = [s for s in spans if s[0].year in (today.year - 1, today.year)]
    return min(near, key=lambda s: 0 if s[0] <= today <= s[1] else min(abs((s[0] - today).days),
                                                                         abs((s[1] - today).days)))


# ---- rules ---------------------------------------------------------------------------------------

Resolver = Callable[[re.Match[str], Ctx], "Span | None"]


@dataclass(frozen=True)
class Rule:
    """A compiled pattern and the function that turns one of its matches into a span."""

    pattern: re.Pattern[str]
    resolve: Resolver


#: Words that are also everyday English; they only count next to a date-ish word.
AMBIGUOUS = frozenset({"may", "march", "mar", "mars", "sat", "sun", "wed", "fall"})
_MONTH = alt(MONTHS.values())
_ART = r"(?:the|el|la|le|il|lo|der|die|das|dem|den)\s+|l['’]\s*"
_DAY_BEFORE = re.compile(r"\d{1,2}(?:st|nd|rd|th|er|e|º|\.)?\s*(?:of|de|del|di)?\s*$")
#: German words that make "hier" mean "here" rather than the French "yesterday".
_GERMAN_HINT = re.compile(r"\b(?:ist|sind|wir|ich|und|das|der|nicht|haben|habe|wo|wer|bin|hat)\b")


def _mods(lang: Lang) -> str:
    return alt((lang.last, lang.this, lang.next))


def _offset(lang: Lang, mod: str) -> int | None:
    found = classify(mod, {-1: lang.last, 0: lang.this, 1: lang.next})
    return found if isinstance(found, int) else None


def _relative(lang: Lang, units: str, named: bool = True) -> str:
    """``<modifier> <unit>`` (and ``<unit> <modifier>`` where the language allows it)."""
    m1, u1, m2, u2 = ("?P<m1>", "?P<u1>", "?P<m2>", "?P<u2>") if named else ("?:",) * 4
    pre = rf"({m1}{_mods(lang)})(?:\s+|(?<=['’]))({u1}{units})"
    return rf"(?:{pre}|({u2}{units})\s+({m2}{_mods(lang)}))" if lang.post else pre


_YEAR_REL = {code: re.compile(_relative(lang, lang.units["year"])) for code, lang in LANGS.items()}
YEAR_REF = r"\d{4}|" + alt(_relative(lang, lang.units["year"], named=False) for lang in LANGS.values())


def year_of(text: str | None, ctx: Ctx) -> int | None:
    """The year a year reference ("2023", "last year", "el año pasado") points at, if plausible."""
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
    found = classify(text, MONTHS)
    assert isinstance(found, int)
    return found


def _quarter_half(m: re.Match[str], ctx: Ctx) -> Span | None:
    year = year_of(m["yref"] or m["y"], ctx)
    kind = classify(m["kind"], PERIOD_KINDS) if m["kind"] else ("quarter" if m["q"] else "half")
    index = classify(m["ord"], ORDINALS) if m["ord"] else int(m["q"] or m["h"])
    if year is None or not isinstance(index, int):
        return None
    size = 3 if kind == "quarter" else 6
    index = 12 // size if index == -1 else index
    return months_span(year, 1 + size * (index - 1), size) if 1 <= index <= 12 // size else None


def _part(m: re.Match[str], ctx: Ctx) -> Span | None:
    part = classify(m["part"], PARTS)
    year = year_of(m["yref"], ctx)
    if m["mon"]:
        # "late may" without a year or "of" is too often the verb; demand one of them.
        if m["mon"] in AMBIGUOUS and year is None and not m["conn"]:
            return None
        month = _month_no(m["mon"])
        first, last = month_span(year, month) if year is not None else latest_month(month, ctx)
        days = {"early": (1, 10), "mid": (11, 20), "late": (21, last.day)}[str(part)]
        return first.replace(day=days[0]), first.replace(day=days[1])
    if year is None:
        return None
    return months_span(year, {"early": 1, "mid": 5, "late": 9}[str(part)], 4)


def _season_rule(lang: Lang) -> Rule:
    mods = _mods(lang)
    post = rf"(?:\s+(?P<m2>{mods}))?" if lang.post else ""
    pattern = (rf"\b(?:(?P<p>{lang.preps})\s+)?(?:(?P<m1>{mods})\s+)?(?:{_ART})?"
               rf"(?P<s>{alt(lang.seasons.values())})\b{post}"
               rf"(?:\s*,?\s*(?:{_CONN}\s+)?(?P<y>\d{{4}})\b)?")

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        season = classify(m["s"], lang.seasons)
        assert isinstance(season, int)
        if m["y"]:
            year = int(m["y"])
            return season_span(year, season, ctx.southern) if in_year_range(year, ctx) else None
        mod = m["m1"] or (m["m2"] if lang.post else None)
        if mod:
            return season_occurrence(season, _offset(lang, mod), ctx)
        return season_occurrence(season, None, ctx) if m["p"] else None

    return Rule(re.compile(pattern), resolve)


def _relative_rule(lang: Lang) -> Rule:
    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        unit, offset = classify(m["u1"] or m["u2"], lang.units), _offset(lang, m["m1"] or m["m2"])
        return relative_span(str(unit), offset, ctx) if offset is not None else None

    return Rule(re.compile(rf"\b{_relative(lang, alt(lang.units.values()))}\b"), resolve)


def _few_ago_rule(lang: Lang) -> Rule:
    units = {k: lang.counted[k] for k in ("day", "week", "month")}
    pattern = lang.ago.format(q=f"(?P<q>{alt(lang.few.values())})", u=f"(?P<u>{alt(units.values())})")

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        back = _FEW_AGO[(str(classify(m["q"], lang.few)), str(classify(m["u"], units)))]
        return ctx.today - timedelta(days=back[0]), ctx.today - timedelta(days=back[1])

    return Rule(re.compile(rf"\b{pattern}\b"), resolve)


def _rolling_rule(lang: Lang) -> Rule:
    number = rf"(?P<n>\d{{1,3}}|{'|'.join(_EN_NUMBERS)})"
    pattern = lang.rolling.format(n=number, u=f"(?P<u>{alt(lang.counted.values())})")
    if lang is LANGS["en"]:
        pattern = rf"(?:{pattern}|past\s+(?P<u1>week|month|year))"

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        n = int(m["n"]) if m["n"] and m["n"].isdigit() else _EN_NUMBERS.get(m["n"] or "one", 1)
        unit = classify(m["u"], lang.counted) if m["u"] else m["u1"]
        if n < 1:
            return None
        if unit in ("day", "week"):
            return ctx.today - timedelta(days=n * (7 if unit == "week" else 1)), ctx.today
        year, month = add_months(ctx.today.year, ctx.today.month, -n * (12 if unit == "year" else 1))
        day = min(ctx.today.day, calendar.monthrange(year, month)[1]) if year >= 1 else 0
        return (date(year, month, day), ctx.today) if year >= 1 else None

    return Rule(re.compile(rf"\b{pattern}\b"), resolve)


def _days(m: re.Match[str], ctx: Ctx) -> Span | None:
    if m["d1"] == "hier" and _GERMAN_HINT.search(m.string):
        return None
    day = ctx.today - timedelta(days=2 if m["d2"] else 1 if m["d1"] else 0)
    return day, day


def _month_year(m: re.Match[str], ctx: Ctx) -> Span | None:
    year = int(m["y"])
    if year < 1 or _DAY_BEFORE.search(m.string, max(0, m.start() - 16), m.start()):
        return None
    return month_span(year, _month_no(m["mon"]))


def _year(m: re.Match[str], ctx: Ctx) -> Span | None:
    return year_span(int(m["y"])) if in_year_range(int(m["y"]), ctx) else None


def _bare_month(m: re.Match[str], ctx: Ctx) -> Span | None:
    return latest_month(_month_no(m["mon"]), ctx)


def _full_date(m: re.Match[str], ctx: Ctx) -> Span | None:
    month = int(m["m"]) if m["m"] else _month_no(m["mon"])
    day = int(m["d"])
    years = [int(m["y"])] if m["y"] else [ctx.today.year, ctx.today.year - 1]
    for year in years:
        try:
            found = date(year, month, day)
        except ValueError:
            return None
        # Without a year, the most recent such day that is not after the reference.
        if m["y"] or found <= ctx.today:
            return found, found
    return None


def _range_rule(lang: Lang) -> Rule:
    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        anchor = match_anchor(m.string, m.end(), ctx)
        if anchor is None:
            return None
        (first, last), _ = anchor
        kind = classify(m["kind"], lang.ranges)
        future_end = date(ctx.today.year + FUTURE_YEARS, 12, 31)
        if kind == "before":
            span = open_start(ctx), first - timedelta(days=1)
        elif kind == "until":
            span = open_start(ctx), last
        else:
            start = last + timedelta(days=1) if kind == "after" else first
            # An anchor after the reference still gets a window, reaching into the future.
            span = start, ctx.today if start <= ctx.today else future_end
        return span if span[0] <= span[1] else None

    return Rule(re.compile(rf"\b(?P<kind>{alt(lang.ranges.values())})\s+"), resolve)


def _between_rule(opener: str, joiner: str) -> Rule:
    join = re.compile(rf"\s*(?:-|–|\s(?:{joiner}))\s*")

    def resolve(m: re.Match[str], ctx: Ctx) -> Span | None:
        first = match_anchor(m.string, m.end(), ctx)
        glue = join.match(m.string, first[1]) if first else None
        second = match_anchor(m.string, glue.end(), ctx) if first and glue else None
        if first is None or second is None or first[0][0] > second[0][1]:
            return None
        return first[0][0], second[0][1]

    return Rule(re.compile(rf"\b(?:{opener})\s+"), resolve)


_YEAR_TAIL = r"\b(?!\s*[-/.:]\s*\d)"
_YEAR_WORDS = (r"in|during|throughout|within|year|en|durante|a[ñn]o|nel|nell['’]anno|anno|pendant|durant"
               r"|ann[ée]e|im|während|jahre?s?|в|во|году?")
_FILLER = r"the|year|of|whole|entire|all|calendar|el|del|de|a[ñn]o|anno|l['’]anno|ann[ée]e|jahre?s?|das|des"
_MONTH_PREPS = "|".join(sorted({p for lang in LANGS.values() for p in lang.preps.split("|")}))

QUARTER_HALF = (
    Rule(re.compile(rf"\b(?:the\s+)?(?P<ord>{alt(ORDINALS.values())})\s+(?P<kind>{alt(PERIOD_KINDS.values())})"
                    rf"(?:\s+(?:{_CONN}|year|a[ñn]o|anno|ann[ée]e|jahres))*\s*,?\s*(?P<yref>{YEAR_REF})"
                    rf"(?P<q>)?(?P<h>)?(?P<y>)?\b"), _quarter_half),
    Rule(re.compile(rf"\b(?:q(?P<q>[1-4])|h(?P<h>[12]))\s*(?:,|of|de|del)?\s*(?P<yref>{YEAR_REF})"
                    rf"(?P<ord>)?(?P<kind>)?(?P<y>)?\b"), _quarter_half),
    Rule(re.compile(r"\b(?P<y>\d{4})\s*[-/]?\s*(?:q(?P<q>[1-4])|h(?P<h>[12]))\b(?P<ord>)?(?P<kind>)?(?P<yref>)?"),
         _quarter_half),
)
PART_RULE = Rule(re.compile(
    rf"\b(?P<part>{alt(PARTS.values())})(?:\s*-\s*|\s+)(?P<conn>(?:{_CONN}\s+){{0,2}})"
    rf"(?:(?P<mon>{_MONTH})\b\.?(?:\s*,?\s*(?:{_CONN}\s+)?)?)?(?:(?P<yref>{YEAR_REF}){_YEAR_TAIL})?"), _part)
DAY_RULE = Rule(re.compile(rf"\b(?:(?P<d2>{DAY_WORDS[-2]})|(?P<d1>{DAY_WORDS[-1]})|(?P<d0>{DAY_WORDS[0]}))\b"),
                _days)
MONTH_YEAR = Rule(re.compile(rf"\b(?P<mon>{_MONTH})\.?(?:\s*,\s*|\s+(?:of|de|del|di)\s+|\s+)(?P<y>\d{{4}})"
                             rf"{_YEAR_TAIL}"), _month_year)
YEAR_CONTEXT = Rule(re.compile(rf"\b(?:{_YEAR_WORDS})\s+(?:(?:{_FILLER})\s+){{0,3}}(?P<y>\d{{4}})"
                               rf"(?:\s+(?:год[ау]?|г\.))?{_YEAR_TAIL}"), _year)
PREP_MONTH = Rule(re.compile(rf"\b(?:{_MONTH_PREPS})\s+(?:the\s+month\s+of\s+|mois\s+de\s+)?"
                             rf"(?P<mon>{_MONTH})\b(?!\s*[,.]?\s*\d)"), _bare_month)
ANCHORS: tuple[Rule, ...] = (
    PART_RULE, *QUARTER_HALF, *(_season_rule(lang) for lang in LANGS.values()), DAY_RULE,
    *(_relative_rule(lang) for lang in LANGS.values()),
    Rule(re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b(?P<mon>)?"), _full_date),
    Rule(re.compile(rf"(?P<mon>{_MONTH})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(?P<y>\d{{4}})\b)?"
                    r"(?P<m>)?"), _full_date),
    Rule(re.compile(rf"(?P<d>\d{{1,2}})(?:st|nd|rd|th|er|\.)?\s+(?:of\s+|de\s+)?(?P<mon>{_MONTH})\b"
                    r"(?:,?\s+(?:de\s+)?(?P<y>\d{4})\b)?(?P<m>)?"), _full_date),
    MONTH_YEAR,
    Rule(re.compile(rf"(?P<mon>{_MONTH})\b"), _bare_month),
    Rule(re.compile(rf"(?P<y>\d{{4}}){_YEAR_TAIL}"), _year),
)
_ANCHOR_ARTICLE = re.compile(rf"(?:{_ART})?")

RULES: tuple[Rule, ...] = (
    *(_between_rule(o, j) for lang in LANGS.values() for o, j in lang.between),
    *(_range_rule(lang) for lang in LANGS.values()),
    *QUARTER_HALF, PART_RULE, *(_season_rule(lang) for lang in LANGS.values()),
    *(_rolling_rule(lang) for lang in LANGS.values()), DAY_RULE,
    *(_few_ago_rule(lang) for lang in LANGS.values()),
    *(_relative_rule(lang) for lang in LANGS.values()),
    MONTH_YEAR, YEAR_CONTEXT, PREP_MONTH,
)


def match_anchor(text: str, pos: int, ctx: Ctx) -> tuple[Span, int] | None:
    """Resolve the date expression that starts at ``pos`` (after "before", "since", …).

    :param text: the normalised query.
    :param pos: where the expression starts.
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
    for rule in rules:
        for m in rule.pattern.finditer(text):
            span = rule.resolve(m, ctx)
            if span is not None:
                return span
    return None
