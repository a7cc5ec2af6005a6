"""Word tables for date resolution, as data: one entry per language or per calendar unit.

Values are regex alternations over NFKC-normalised, lower-cased text. Tables are grouped per
language where words combine ("this" + "week"), so that a modifier only pairs with a noun of its own
language.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
        ranges={"before": r"(?<!day\s)before|prior\s+to", "after": r"after", "since": r"since",
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
    # "the last quarter of 2023" is the final one; without a year "last quarter" is relative.
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
CONN = r"(?:of|the|de|del|di|du|des|dell['’]|in)"
EN_NUMBERS: Mapping[str, int] = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12,
}
FEW_AGO: Mapping[tuple[str, str], tuple[int, int]] = {
    ("couple", "day"): (3, 1), ("few", "day"): (5, 2),
    ("couple", "week"): (21, 7), ("few", "week"): (35, 14),
    ("couple", "month"): (90, 30), ("few", "month"): (150, 60),
}


ART = r"(?:the|el|la|le|il|lo|der|die|das|dem|den)\s+|l['’]\s*"
#: Words that are also everyday English; they only count next to a date-ish word.
AMBIGUOUS = frozenset({"may", "march", "mar", "mars", "sat", "sun", "wed", "fall"})
#: Words before an ambiguous word that make it a date ("in may", "last fall").
CONTEXT = r"in|on|of|during|since|until|by|before|after|between|last|next|this|early|mid|late|end|every"
#: Date words that mean something else when the query has one of these words: the German "hier"
#: is "here", not the French "yesterday".
FALSE_FRIENDS: Mapping[str, str] = {"hier": r"ist|sind|wir|ich|und|das|der|nicht|haben|habe|wo|wer|bin|hat"}

# ---- scoring words of the date finder, with es/it/fr/de/ru equivalents -----------

WEEKDAYS = (
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tues?|wed|thu|thurs?|fri|sat|sun"
    r"|lunes|martes|mi[ée]rcoles|jueves|viernes|s[áa]bado|domingo"
    r"|luned[iì]|marted[iì]|mercoled[iì]|gioved[iì]|venerd[iì]|sabato|domenica"
    r"|lundi|mardi|mercredi|jeudi|vendredi|samedi|dimanche"
    r"|montag|dienstag|mittwoch|donnerstag|freitag|samstag|sonnabend|sonntag"
    r"|понедельник\w*|вторник\w*|сред[аыуе]|четверг\w*|пятниц\w*|суббот\w*|воскресень\w*"
)
NOW_WORDS = (
    r"today|yesterday|tomorrow|tonight|now|hoy|ayer|anteayer|ma[ñn]ana|anoche|ahora"
    r"|oggi|ieri|domani|stasera|adesso|aujourd['’]?hui|hier|avant-hier|demain|maintenant"
    r"|heute|gestern|vorgestern|morgen|jetzt|сегодня|вчера|позавчера|завтра|сейчас"
)
PERIOD_WORDS = (
    r"last|next|this|past|coming|ago|days?|weeks?|months?|years?|hours?|minutes?|quarter|decade"
    r"|century|weekend|morning|afternoon|evening|night|noon|midnight"
    r"|pasad[oa]|pr[oó]xim[oa]|d[ií]as?|semanas?|mes(?:es)?|a[ñn]os?"
    r"|scors[oa]|prossim[oa]|giorn[oi]|settiman[ae]|mes[ei]|ann[oi]"
    r"|derni[eè]re?|prochaine?|jours?|semaines?|mois|ann[ée]es?"
    r"|letzte[nrsm]?|n[äa]chste[nrsm]?|tage?n?|wochen?|monate?n?|jahre?n?|wochenende"
    r"|прошл\w*|следующ\w*|назад|дн[яеи]\w*|недел\w*|месяц\w*|год\w*|лет"
)
