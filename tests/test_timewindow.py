"""Query date analysis: fixed rules, the date finder, Chinese rules and our extensions."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hindsight_recall.time import window
from hindsight_recall.time.window import MAX_QUERY_CHARS, resolve_window, score_match, warm_finder

#: A Wednesday afternoon.
REF = datetime(2024, 3, 13, 15, 30, tzinfo=UTC)
TODAY = REF.date()
OPEN = date(REF.year - 120, 1, 1)


def days_ago(n: int) -> date:
    return TODAY - timedelta(days=n)


def span(query: str, ref: datetime = REF, **kwargs: object) -> tuple[date, date] | None:
    window = resolve_window(query, ref, **kwargs)  # type: ignore[arg-type]
    return (window.start.date(), window.end.date()) if window else None


def check(query: str, start: date, end: date | None = None, ref: datetime = REF, **kwargs: object) -> None:
    assert span(query, ref, **kwargs) == (start, end or start), query


@pytest.fixture(scope="module", autouse=True)
def _warm_finder() -> None:
    # The first date-finder call loads language data (~1 s); keep that out of the timing checks.
    warm_finder()


# ---- fixed rules, each family in English and other languages --------------------------------

@pytest.mark.parametrize("query", ["What did we do yesterday?", "¿Qué hicimos ayer?", "cosa è successo ieri",
                                   "qu'avons-nous fait hier", "Was haben wir gestern gemacht",
                                   "что было вчера"])
def test_yesterday(query: str) -> None:
    check(query, days_ago(1))


@pytest.mark.parametrize("query", ["позавчера", "the day before yesterday", "anteayer", "avant-hier",
                                   "vorgestern", "l'altro ieri"])
def test_day_before_yesterday(query: str) -> None:
    check(query, days_ago(2))


@pytest.mark.parametrize("query", ["what is on today", "hoy", "oggi", "aujourd'hui", "aujourd’hui", "heute",
                                   "сегодня"])
def test_today(query: str) -> None:
    check(query, TODAY)


@pytest.mark.parametrize(("query", "back"), [
    ("a couple of days ago", (3, 1)), ("a few days ago", (5, 2)),
    ("a couple of weeks ago", (21, 7)), ("few weeks ago", (35, 14)),
    ("a couple of months ago", (90, 30)), ("a few months ago", (150, 60)),
    ("hace un par de días", (3, 1)), ("hace unos días", (5, 2)), ("qualche giorno fa", (5, 2)),
    ("il y a quelques semaines", (35, 14)), ("vor ein paar Wochen", (21, 7)),
    ("vor einigen Wochen", (35, 14)),
    ("пару месяцев назад", (90, 30)), ("несколько месяцев назад", (150, 60)),
])
def test_couple_and_few_ago(query: str, back: tuple[int, int]) -> None:
    check(query, days_ago(back[0]), days_ago(back[1]))


@pytest.mark.parametrize("query", ["last week", "la semana pasada", "la settimana scorsa",
                                   "la semaine dernière", "letzte Woche", "на прошлой неделе"])
def test_last_week_is_previous_monday_to_sunday(query: str) -> None:
    check(query, date(2024, 3, 4), date(2024, 3, 10))


@pytest.mark.parametrize("query", ["last month", "el mes pasado", "il mese scorso", "le mois dernier",
                                   "letzten Monat", "в прошлом месяце"])
def test_last_month(query: str) -> None:
    check(query, date(2024, 2, 1), date(2024, 2, 29))


@pytest.mark.parametrize("query", ["last year", "el año pasado", "l'anno scorso", "l'année dernière",
                                   "letztes Jahr", "в прошлом году"])
def test_last_year(query: str) -> None:
    check(query, date(2023, 1, 1), date(2023, 12, 31))


@pytest.mark.parametrize("query", ["last weekend", "el fin de semana pasado", "lo scorso fine settimana",
                                   "le week-end dernier", "letztes Wochenende", "в прошлые выходные"])
def test_last_weekend(query: str) -> None:
    check(query, date(2024, 3, 9), date(2024, 3, 10))


def test_german_hier_means_here() -> None:
    assert span("Was ist hier passiert?") is None
    check("hier, nous avons mangé ensemble", days_ago(1))


def test_last_weekend_on_a_sunday_is_the_one_just_started() -> None:
    check("last weekend", date(2024, 3, 9), date(2024, 3, 10), ref=datetime(2024, 3, 10, 12, tzinfo=UTC))
    check("last weekend", date(2024, 3, 2), date(2024, 3, 3), ref=datetime(2024, 3, 9, 12, tzinfo=UTC))


@pytest.mark.parametrize("query", ["June 2023", "what happened in june 2023?", "junio de 2023", "giugno 2023",
                                   "juin 2023", "Juni 2023", "в июне 2023", "Jun. 2023", "June, 2023"])
def test_month_and_year(query: str) -> None:
    check(query, date(2023, 6, 1), date(2023, 6, 30))


def test_month_preceded_by_a_day_is_a_single_day() -> None:
    check("what happened on 3 June 2023?", date(2023, 6, 3))
    check("May 7, 2023", date(2023, 5, 7))


@pytest.mark.parametrize(("query", "day"), [
    ("what did maria plan on the evening of 7 july, 2023?", date(2023, 7, 7)),
    ("what did joanna recommend to nate on february 7, 2022?", date(2022, 2, 7)),
    ("where was the forest picture shared on december 1,2023 taken?", date(2023, 12, 1)),
    ("what book did tim finish reading on 8th december, 2023?", date(2023, 12, 8)),
    ("what did they give him on aug 15th?", date(2023, 8, 15)),  # no year: the latest, not after today
    ("notes from 2023-05-07", date(2023, 5, 7)),
])
def test_a_named_day_is_read_by_the_rules_not_the_finder(query: str, day: date,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "_finder_day", lambda *a: pytest.fail(f"the finder was asked: {query}"))
    check(query, day)


@pytest.mark.parametrize("query", ["What day did Tim get into his study abroad program?",
                                   "Which week did Tim visit the UK?", "What year did Tim go to the mountains?",
                                   "What motivates Joanna to keep writing even on tough days?"])
def test_period_words_alone_never_ask_the_finder(query: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "_finder_day", lambda *a: pytest.fail(f"the finder was asked: {query}"))
    assert span(query) is None


def test_month_with_year_zero_has_no_window() -> None:
    assert span("march 0000") is None


@pytest.mark.parametrize("query", ["in 2023", "during 2023", "throughout 2023", "the year 2023",
                                   "in the year 2023", "en el año 2023", "nel 2023", "pendant 2023",
                                   "im Jahr 2023", "в 2023 году"])
def test_year_context(query: str) -> None:
    check(query, date(2023, 1, 1), date(2023, 12, 31))


def test_year_context_is_bounded() -> None:
    assert span("in 1903") is None  # R.year − 121
    check("in 1904", date(1904, 1, 1), date(1904, 12, 31))
    check("in 2044", date(2044, 1, 1), date(2044, 12, 31))
    assert span("in 2045") is None


# ---- the date finder and its scoring ---------------------------------------------------------------

@pytest.mark.parametrize(("query", "day"), [
    ("what happened on March 3rd?", date(2024, 3, 3)),
    ("May 7, 2023", date(2023, 5, 7)),
    ("notes from 2023-05-07", date(2023, 5, 7)),
    ("what did we do 3 days ago", date(2024, 3, 10)),
    ("the meeting on monday", date(2024, 3, 11)),
    ("qué pasó el lunes", date(2024, 3, 11)),
    ("what happened tonight", TODAY),
])
def test_finder_gives_one_day(query: str, day: date) -> None:
    check(query, day)


def test_finder_prefers_the_highest_score() -> None:
    # "monday" scores 30, the ISO date 100.
    check("monday or 2024-02-01", date(2024, 2, 1))


@pytest.mark.parametrize(("phrase", "score"), [
    ("2023", 0), ("in 2023", 0), ("march 3rd", 150), ("may 7, 2023", 150), ("2023-05-07", 100),
    ("yesterday", 50), ("now", 50), ("on monday", 30), ("3 days ago", 120), ("in may", 50),
    ("may", 0), ("sat on the", 0), ("the sun", 0),
])
def test_score_match(phrase: str, score: int) -> None:
    assert score_match(phrase) == score


def test_lone_four_digit_number_is_no_date() -> None:
    assert span("order 2023 widgets") is None
    # ... while the same number after "in" hits the year rule.
    check("widgets ordered in 2023", date(2023, 1, 1), date(2023, 12, 31))


@pytest.mark.parametrize("query", ["Where may Alice work?", "The cat sat on the mat", "in the sun",
                                   "Did prices fall?", "Where does Alice work?"])
def test_everyday_words_are_not_dates(query: str) -> None:
    assert span(query) is None


def test_languages_restrict_the_finder() -> None:
    assert span("qué pasó el lunes", languages=["en"]) is None
    check("what happened on March 3rd?", date(2024, 3, 3), languages=["en"])
    assert span("qué pasó el lunes", languages=["no-such-language"]) is None


# ---- Chinese -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "start", "end"), [
    ("昨天我们吃了什么", date(2024, 3, 12), None),
    ("前天", date(2024, 3, 11), None),
    ("上周", date(2024, 3, 4), date(2024, 3, 10)),
    ("上周三开会", date(2024, 3, 6), None),
    ("上周末", date(2024, 3, 9), date(2024, 3, 10)),
    ("本周五", date(2024, 3, 15), None),
    ("周三", date(2024, 3, 13), None),
    ("去年", date(2023, 1, 1), date(2023, 12, 31)),
    ("前年", date(2022, 1, 1), date(2022, 12, 31)),
    ("上个月", date(2024, 2, 1), date(2024, 2, 29)),
    ("三天前", date(2024, 3, 10), None),
    ("3天前", date(2024, 3, 10), None),
    ("两周前", date(2024, 2, 26), date(2024, 3, 3)),
    ("两个月前", date(2024, 1, 1), date(2024, 1, 31)),
    ("最近7天", date(2024, 3, 6), date(2024, 3, 13)),
    ("2023年第三季度的销售", date(2023, 7, 1), date(2023, 9, 30)),
    ("上季度", date(2023, 10, 1), date(2023, 12, 31)),
    ("去年下半年", date(2023, 7, 1), date(2023, 12, 31)),
    ("上半年", date(2024, 1, 1), date(2024, 6, 30)),
    ("2023年5月", date(2023, 5, 1), date(2023, 5, 31)),
    ("我们2023年5月3日做了什么", date(2023, 5, 3), None),
    ("十二月", date(2023, 12, 1), date(2023, 12, 31)),
    ("去年夏天", date(2023, 6, 1), date(2023, 8, 31)),
    ("2023年初", date(2023, 1, 1), date(2023, 4, 30)),
])
def test_chinese_rules(query: str, start: date, end: date | None) -> None:
    check(query, start, end)


@pytest.mark.parametrize("query", ["我们讨论了什么", "一周一次的会议"])
def test_chinese_without_dates(query: str) -> None:
    assert span(query) is None


def test_cjk_match_cut_from_a_longer_word_is_dropped() -> None:
    from hindsight_recall.time.window import _inside_cjk_word

    text = "上周三开会"
    assert _inside_cjk_word(text, 0, 2)  # "上周" runs on into "三"
    assert not _inside_cjk_word("在2023年5月3日", 1, 10)


# ---- seasons -------------------------------------------------------------------------------------------

def test_last_spring_example() -> None:
    window = resolve_window("What did Alice do last spring?", datetime(2024, 3, 10))
    assert window is not None
    assert window.start == datetime(2023, 3, 1, tzinfo=UTC)
    assert window.end == datetime(2023, 5, 31, 23, 59, 59, 999999, tzinfo=UTC)


@pytest.mark.parametrize(("query", "ref", "start", "end"), [
    ("last spring", date(2024, 6, 15), date(2024, 3, 1), date(2024, 5, 31)),  # ended before R
    ("last spring", date(2024, 5, 31), date(2023, 3, 1), date(2023, 5, 31)),  # not yet ended
    ("last winter", date(2024, 3, 13), date(2023, 12, 1), date(2024, 2, 29)),
    ("this summer", date(2024, 3, 13), date(2024, 6, 1), date(2024, 8, 31)),
    ("this winter", date(2024, 3, 13), date(2023, 12, 1), date(2024, 2, 29)),  # the nearer one
    ("this winter", date(2024, 10, 1), date(2024, 12, 1), date(2025, 2, 28)),
    ("next summer", date(2024, 7, 1), date(2025, 6, 1), date(2025, 8, 31)),
    ("in autumn 2023", date(2024, 3, 13), date(2023, 9, 1), date(2023, 11, 30)),
    ("fall 2022", date(2024, 3, 13), date(2022, 9, 1), date(2022, 11, 30)),
    ("winter 2022", date(2024, 3, 13), date(2022, 12, 1), date(2023, 2, 28)),
    ("the summer of 2021", date(2024, 3, 13), date(2021, 6, 1), date(2021, 8, 31)),
    ("in the fall", date(2024, 3, 13), date(2023, 9, 1), date(2023, 11, 30)),
    ("in the spring", date(2024, 3, 13), date(2024, 3, 1), date(2024, 5, 31)),
    ("el verano pasado", date(2024, 3, 13), date(2023, 6, 1), date(2023, 8, 31)),
    ("l'estate scorsa", date(2024, 3, 13), date(2023, 6, 1), date(2023, 8, 31)),
    ("l'été dernier", date(2024, 3, 13), date(2023, 6, 1), date(2023, 8, 31)),
    ("im Sommer 2023", date(2024, 3, 13), date(2023, 6, 1), date(2023, 8, 31)),
    ("прошлым летом", date(2024, 3, 13), date(2023, 6, 1), date(2023, 8, 31)),
])
def test_seasons(query: str, ref: date, start: date, end: date) -> None:
    check(query, start, end, ref=datetime(ref.year, ref.month, ref.day, 12, tzinfo=UTC))


@pytest.mark.parametrize(("query", "start", "end"), [
    ("winter 2022", date(2022, 6, 1), date(2022, 8, 31)),
    ("summer 2022", date(2022, 12, 1), date(2023, 2, 28)),
    ("last summer", date(2023, 12, 1), date(2024, 2, 29)),
    ("last spring", date(2023, 9, 1), date(2023, 11, 30)),
])
def test_southern_hemisphere_seasons(query: str, start: date, end: date) -> None:
    check(query, start, end, southern_hemisphere=True)


def test_real_estate_is_not_a_season() -> None:
    assert span("this estate") is None


# ---- open and two-ended ranges -------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "ref", "start", "end"), [
    ("before 2023", date(2024, 3, 13), OPEN, date(2022, 12, 31)),
    ("after March 2024", date(2024, 6, 15), date(2024, 4, 1), date(2024, 6, 15)),
    ("after June 2030", date(2024, 3, 13), date(2030, 7, 1), date(2044, 12, 31)),
    ("since last year", date(2024, 3, 13), date(2023, 1, 1), date(2024, 3, 13)),
    ("since yesterday", date(2024, 3, 13), date(2024, 3, 12), date(2024, 3, 13)),
    ("since 2020", date(2024, 3, 13), date(2020, 1, 1), date(2024, 3, 13)),
    ("until June", date(2024, 3, 13), OPEN, date(2023, 6, 30)),
    ("until June", date(2024, 6, 15), OPEN, date(2024, 6, 30)),
    ("before the summer of 2023", date(2024, 3, 13), OPEN, date(2023, 5, 31)),
    ("after May 7, 2023", date(2024, 3, 13), date(2023, 5, 8), date(2024, 3, 13)),
    ("between 2020 and 2022", date(2024, 3, 13), date(2020, 1, 1), date(2022, 12, 31)),
    ("from March 2023 to May 2023", date(2024, 3, 13), date(2023, 3, 1), date(2023, 5, 31)),
    ("antes de 2023", date(2024, 3, 13), OPEN, date(2022, 12, 31)),
    ("seit 2020", date(2024, 3, 13), date(2020, 1, 1), date(2024, 3, 13)),
    ("depuis l'année dernière", date(2024, 3, 13), date(2023, 1, 1), date(2024, 3, 13)),
])
def test_ranges(query: str, ref: date, start: date, end: date) -> None:
    check(query, start, end, ref=datetime(ref.year, ref.month, ref.day, 12, tzinfo=UTC))


def test_range_word_without_a_date_falls_through() -> None:
    check("after the meeting in March 2023", date(2023, 3, 1), date(2023, 3, 31))


# ---- quarters, halves, parts of a year or month ----------------------------------------------------------

@pytest.mark.parametrize(("query", "start", "end"), [
    ("Q3 2023", date(2023, 7, 1), date(2023, 9, 30)),
    ("2023-Q4", date(2023, 10, 1), date(2023, 12, 31)),
    ("the third quarter of 2023", date(2023, 7, 1), date(2023, 9, 30)),
    ("the last quarter of 2023", date(2023, 10, 1), date(2023, 12, 31)),
    ("first half of 2024", date(2024, 1, 1), date(2024, 6, 30)),
    ("second half of 2023", date(2023, 7, 1), date(2023, 12, 31)),
    ("during the first half of last year", date(2023, 1, 1), date(2023, 6, 30)),
    ("H1 2024", date(2024, 1, 1), date(2024, 6, 30)),
    ("last quarter", date(2023, 10, 1), date(2023, 12, 31)),
    ("this quarter", date(2024, 1, 1), date(2024, 3, 31)),
    ("das dritte Quartal 2023", date(2023, 7, 1), date(2023, 9, 30)),
    ("primer semestre de 2024", date(2024, 1, 1), date(2024, 6, 30)),
    ("третий квартал 2023 года", date(2023, 7, 1), date(2023, 9, 30)),
    ("early 2023", date(2023, 1, 1), date(2023, 4, 30)),
    ("mid 2023", date(2023, 5, 1), date(2023, 8, 31)),
    ("mid-2023", date(2023, 5, 1), date(2023, 8, 31)),
    ("late 2023", date(2023, 9, 1), date(2023, 12, 31)),
    ("by the end of 2023", date(2023, 9, 1), date(2023, 12, 31)),
    ("early March 2023", date(2023, 3, 1), date(2023, 3, 10)),
    ("mid June 2023", date(2023, 6, 11), date(2023, 6, 20)),
    ("late February 2024", date(2024, 2, 21), date(2024, 2, 29)),
    ("a finales de 2023", date(2023, 9, 1), date(2023, 12, 31)),
    ("Anfang 2023", date(2023, 1, 1), date(2023, 4, 30)),
])
def test_quarters_halves_and_parts(query: str, start: date, end: date) -> None:
    check(query, start, end)


def test_quarter_out_of_range_has_no_rule_window() -> None:
    assert span("Q5 2023") is None


# ---- other calendar and rolling periods ---------------------------------------------------------------

@pytest.mark.parametrize(("query", "start", "end"), [
    ("this week", date(2024, 3, 11), date(2024, 3, 17)),
    ("next month", date(2024, 4, 1), date(2024, 4, 30)),
    ("this year", date(2024, 1, 1), date(2024, 12, 31)),
    ("esta semana", date(2024, 3, 11), date(2024, 3, 17)),
    ("in the past 3 days", date(2024, 3, 10), date(2024, 3, 13)),
    ("over the past week", date(2024, 3, 6), date(2024, 3, 13)),
    ("the last two weeks", date(2024, 2, 28), date(2024, 3, 13)),
    ("what happened in May?", date(2023, 5, 1), date(2023, 5, 31)),
    ("during March", date(2024, 3, 1), date(2024, 3, 31)),
])
def test_calendar_and_rolling_periods(query: str, start: date, end: date) -> None:
    check(query, start, end)


# ---- window shape, references, hostile input, cost --------------------------------------------------------

def test_windows_are_whole_utc_days() -> None:
    window = resolve_window("last month", REF)
    assert window is not None
    assert window.start == datetime(2024, 2, 1, tzinfo=UTC)
    assert window.end == datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC)
    assert window.start.utcoffset() == window.end.utcoffset() == timedelta(0)


def test_naive_reference_is_utc() -> None:
    assert resolve_window("yesterday", REF.replace(tzinfo=None)) == resolve_window("yesterday", REF)


def test_aware_reference_is_converted_to_utc() -> None:
    tokyo = datetime(2024, 3, 14, 5, 0, tzinfo=timezone(timedelta(hours=9)))  # 2024-03-13 20:00 UTC
    check("yesterday", date(2024, 3, 12), ref=tokyo)
    new_york = datetime(2024, 3, 13, 22, 0, tzinfo=timezone(timedelta(hours=-5)))  # 03-14 03:00 UTC
    check("yesterday", date(2024, 3, 13), ref=new_york)


@pytest.mark.parametrize("query", ["", "   ", "\x00", "\x00\x00\x00", "& | ! ( ) : * < > ' \\",
                                   "'; DROP TABLE memories; --", "\ud800", "🙂" * 50, "Q0", "年月日"])
def test_hostile_input_has_no_window(query: str) -> None:
    assert resolve_window(query, REF) is None


def test_nul_bytes_do_not_hide_a_date() -> None:
    check("what\x00happened\x00yesterday", days_ago(1))
    check("yesterday \ud800", days_ago(1))


@pytest.mark.parametrize("query", ["a" * 100_000, "1 " * 50_000, "2023 " * 20_000, "may " * 25_000,
                                   "in the " * 15_000 + "yesterday", "昨" * 100_000,
                                   "& | ! ( ) : * < > ' \\ " * 5_000])
def test_long_input_returns_quickly(query: str) -> None:
    started = time.perf_counter()
    resolve_window(query, REF)
    assert time.perf_counter() - started < 3.0


def test_only_a_prefix_is_analysed() -> None:
    assert span("x" * MAX_QUERY_CHARS + " yesterday") is None
    check("x" * (MAX_QUERY_CHARS - 20) + " yesterday", days_ago(1))


def test_non_temporal_query_never_loads_the_date_finder() -> None:
    code = (
        "import sys\n"
        "from datetime import datetime\n"
        "from hindsight_recall.time.window import resolve_window\n"
        "ref = datetime(2024, 3, 13)\n"
        "assert resolve_window('Where does Alice work?', ref) is None\n"
        "assert resolve_window('What did Alice do last week?', ref) is not None\n"
        "print('dateparser' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("query", ["Who scored 3 goals?", "What happened with Entity 05 and Entity 17?",
                                   "Room 101 booking"])
def test_a_bare_number_names_no_day_and_does_not_wake_the_date_finder(
    query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def finder(*_: object) -> None:
        raise AssertionError("the date finder was asked")

    monkeypatch.setattr(window, "_finder_day", finder)
    assert window.read_window(query, datetime(2024, 6, 15, tzinfo=UTC)) is None


@pytest.mark.parametrize(("query", "day"), [("What happened on the 17th?", date(2024, 6, 17)),
                                            ("What did we do on 05/17?", date(2024, 5, 17)),
                                            ("What about 12.05.2023?", date(2023, 5, 12))])
def test_numbers_shaped_like_a_date_still_reach_the_date_finder(query: str, day: date) -> None:
    found = window.read_window(query, datetime(2024, 6, 15, tzinfo=UTC))
    assert found is not None and found.window.start.date() == day == found.window.end.date()
