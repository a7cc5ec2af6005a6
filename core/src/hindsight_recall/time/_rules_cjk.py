"""Chinese date expressions, tried before everything else for queries with CJK ideographs.

Covers relative days (昨天, 前天), weeks (上周, 本周三, 上周末), months (上个月), years (去年, 前年),
quarters (2023年第三季度, 上季度), halves (去年下半年), "N units ago" (三天前, 两个月前), "the last N
units" (最近7天), weekday and weekend names (周三, 周末), absolute years, months and days (2023年5月,
3月5日), year parts (2023年初/年中/年底) and seasons (去年夏天).
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

from ._rules import (
    Ctx,
    Rule,
    Span,
    add_months,
    find_expression,
    find_span,
    in_year_range,
    latest_month,
    month_span,
    months_span,
    relative_span,
    season_occurrence,
    season_span,
    week_span,
    year_span,
)

_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}
_NUM = r"[\d零〇一二两三四五六七八九十百]{1,4}"
#: Offsets of the relative prefixes: 上 = previous, 本/这 = current, 下 = next.
_SHIFT = {"上上": -2, "上": -1, "本": 0, "这": 0, "下": 1, "下下": 2}
_SHIFTS = "上上|下下|上|本|这|下"
_YEARS = {"大前年": -3, "前年": -2, "去年": -1, "今年": 0, "明年": 1, "后年": 2}
_DAYS = {"大前天": -3, "前天": -2, "昨天": -1, "昨日": -1, "昨晚": -1, "今天": 0, "今日": 0, "今晚": 0,
         "今早": 0, "明天": 1, "明日": 1, "后天": 2, "大后天": 3}
_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_UNIT = {"天": "day", "日": "day", "周": "week", "星期": "week", "礼拜": "week", "月": "month", "年": "year"}
_SEASON = {"春": 0, "夏": 1, "秋": 2, "冬": 3}
_QUARTER = {"一": 1, "二": 2, "三": 3, "四": 4}
_PART = {"初": 1, "中": 5, "底": 9, "末": 9}
_WEEK = r"(?:周|星期|礼拜)"


def cn_number(text: str) -> int | None:
    """Read Arabic digits or a Chinese numeral below 1000 ("十五", "二十三", "两").

    :param text: the numeral.
    """
    if text.isdigit():
        return int(text)
    total, current = 0, 0
    for char in text:
        if char in _DIGITS:
            current = _DIGITS[char]
        elif char in "十百":
            total += max(current, 1) * (10 if char == "十" else 100)
            current = 0
        else:
            return None
    return total + current


def _year(m: re.Match[str], ctx: Ctx) -> int | None:
    if m["y"]:
        return int(m["y"]) if in_year_range(int(m["y"]), ctx) else None
    return ctx.today.year + _YEARS[m["yr"]]


def _year_part(m: re.Match[str], ctx: Ctx) -> Span | None:
    year = _year(m, ctx)
    if year is None:
        return None
    quarter = m["q"] or m["q2"]
    if quarter:
        return months_span(year, 3 * int(_QUARTER.get(quarter, quarter)) - 2, 3)
    if m["h"]:
        return months_span(year, 1 if m["h"] == "上" else 7, 6)
    if m["s"]:
        return season_span(year, _SEASON[m["s"]], ctx.southern)
    if m["part"]:
        return months_span(year, _PART[m["part"]], 4)
    month = cn_number(m["m"]) if m["m"] else None
    if month is None:
        return year_span(year)
    if not 1 <= month <= 12:
        return None
    day = cn_number(m["d"]) if m["d"] else None
    first, last = month_span(year, month)
    if day is None:
        return first, last
    return (first.replace(day=day),) * 2 if 1 <= day <= last.day else None


def _week(m: re.Match[str], ctx: Ctx) -> Span | None:
    offset = _SHIFT[m["w"]]
    if m["end"]:
        return relative_span("weekend", offset, ctx)
    monday, sunday = week_span(ctx.today + timedelta(weeks=offset))
    if m["wd"]:
        day = monday + timedelta(days=_WEEKDAY[m["wd"]])
        return day, day
    return monday, sunday


def _ago(m: re.Match[str], ctx: Ctx) -> Span | None:
    n, unit = cn_number(m["n"]), _UNIT[m["u"]]
    if n is None:
        return None
    if unit == "day":
        day = ctx.today - timedelta(days=n)
        return day, day
    if unit == "week":
        return week_span(ctx.today - timedelta(weeks=n))
    if unit == "month":
        return month_span(*add_months(ctx.today.year, ctx.today.month, -n))
    return year_span(ctx.today.year - n) if ctx.today.year - n >= 1 else None


def _recent(m: re.Match[str], ctx: Ctx) -> Span | None:
    n, unit = cn_number(m["n"]), _UNIT[m["u"]]
    if not n:
        return None
    if unit in ("day", "week"):
        return ctx.today - timedelta(days=n * (7 if unit == "week" else 1)), ctx.today
    year, month = add_months(ctx.today.year, ctx.today.month, -n * (12 if unit == "year" else 1))
    if year < 1:
        return None
    return date(year, month, min(ctx.today.day, calendar.monthrange(year, month)[1])), ctx.today


def _quarter(m: re.Match[str], ctx: Ctx) -> Span | None:
    if m["rel"]:
        return relative_span("quarter", _SHIFT[m["rel"]], ctx)
    # A quarter without a year: the most recent one of that number that has started.
    quarter = int(_QUARTER.get(m["q"], m["q"]))
    year = ctx.today.year if 3 * quarter - 2 <= ctx.today.month else ctx.today.year - 1
    return months_span(year, 3 * quarter - 2, 3)


def _half(m: re.Match[str], ctx: Ctx) -> Span | None:
    return months_span(ctx.today.year, 1 if m["h"] == "上" else 7, 6)


def _month(m: re.Match[str], ctx: Ctx) -> Span | None:
    return month_span(*add_months(ctx.today.year, ctx.today.month, _SHIFT[m["rel"]]))


def _day(m: re.Match[str], ctx: Ctx) -> Span | None:
    day = ctx.today + timedelta(days=_DAYS[m[0]])
    return day, day


def _weekday(m: re.Match[str], ctx: Ctx) -> Span | None:
    # The most recent such weekday, today included.
    day = ctx.today - timedelta(days=(ctx.today.weekday() - _WEEKDAY[m["wd"]]) % 7)
    return day, day


def _weekend(m: re.Match[str], ctx: Ctx) -> Span | None:
    # Bare 周末: this week's if it has started, else the previous one.
    return relative_span("weekend", 0 if ctx.today.weekday() >= 5 else -1, ctx)


def _month_day(m: re.Match[str], ctx: Ctx) -> Span | None:
    month, day = cn_number(m["m"]), cn_number(m["d"]) if m["d"] else None
    if month is None or not 1 <= month <= 12:
        return None
    first, last = latest_month(month, ctx)
    if day is None:
        return first, last
    if not 1 <= day <= last.day:
        return None
    found = first.replace(day=day)
    # A day later than the reference within the current month belongs to last year.
    found = found if found <= ctx.today else found.replace(year=found.year - 1)
    return found, found


def _season(m: re.Match[str], ctx: Ctx) -> Span | None:
    return season_occurrence(_SEASON[m["s"]], None, ctx)


_YEAR_REF = rf"(?:(?P<y>\d{{4}})年|(?P<yr>{'|'.join(_YEARS)}))"
_Q = r"[一二三四1-4]"
RULES: tuple[Rule, ...] = tuple(Rule(re.compile(p), f) for p, f in (
    (rf"{_YEAR_REF}(?:的)?(?:第?(?P<q>{_Q})季度|q(?P<q2>[1-4])|(?P<h>上|下)半年|(?P<s>[春夏秋冬])[天季]"
     rf"|年?(?P<part>初|中|底|末)|(?P<m>{_NUM})月份?(?:(?P<d>{_NUM})[日号])?)?", _year_part),
    (rf"(?P<w>{_SHIFTS})(?:个|一)?(?:(?P<end>周末)|{_WEEK}(?P<wd>[一二三四五六日天])?)", _week),
    (rf"(?P<n>{_NUM})(?:个)?(?P<u>天|日|周|星期|礼拜|月|年)(?:之|以)?前", _ago),
    (rf"(?:最近|过去|近)(?P<n>{_NUM})(?:个)?(?P<u>天|日|周|星期|礼拜|月|年)", _recent),
    (rf"(?:(?P<rel>{_SHIFTS})(?:个|一)?季度|第(?P<q>{_Q})季度)", _quarter),
    (r"(?P<h>上|下)半年", _half),
    (rf"(?P<rel>{_SHIFTS})(?:个|一个|一)?月(?!份?\d)", _month),
    ("|".join(sorted(_DAYS, key=len, reverse=True)), _day),
    (r"(?<![\d一二三四五六七八九十两每])(?:周|星期|礼拜)(?P<wd>[一二三四五六日天])(?!次)", _weekday),
    ("周末", _weekend),
    (rf"(?<![\d个年])(?P<m>{_NUM})月份?(?:(?P<d>{_NUM})[日号])?", _month_day),
    (r"(?P<s>[春夏秋冬])(?:天|季)", _season),
))


def find_cjk_span(text: str, ctx: Ctx) -> Span | None:
    """Resolve the first Chinese date expression of a normalised query.

    :param text: the NFKC-normalised, lower-cased query.
    :param ctx: the resolution context.
    """
    return find_span(text, ctx, RULES)


def find_cjk_expression(text: str, ctx: Ctx) -> tuple[Span, int, int] | None:
    """As :func:`find_cjk_span`, with where the expression starts and ends in ``text``."""
    return find_expression(text, ctx, RULES)
