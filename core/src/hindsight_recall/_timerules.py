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
