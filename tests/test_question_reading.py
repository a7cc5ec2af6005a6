"""The question is read once: a date expression's window, and the question without it for the
keyword and semantic arms. One test per kind of phrasing people use."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hindsight_recall.recall.question import read_question
from hindsight_recall.recall.request import build_request
from hindsight_recall.time.window import read_window

#: a Sunday
REF = datetime(2024, 3, 10, 12, tzinfo=UTC)


def reading(query: str) -> tuple[date, date, str, str]:
    found = read_window(query, REF)
    assert found is not None, query
    return found.window.start.date(), found.window.end.date(), found.phrase, found.rest


@pytest.mark.parametrize(("query", "expected"), [
    # seasons
    ("What did Alice do last spring?", (date(2023, 3, 1), date(2023, 5, 31), "last spring", "What did Alice do?")),
    ("Where did Bob travel in summer 2023?",
     (date(2023, 6, 1), date(2023, 8, 31), "in summer 2023", "Where did Bob travel?")),
    ("What did Alice do in the fall?", (date(2023, 9, 1), date(2023, 11, 30), "in the fall", "What did Alice do?")),
    ("Plans for next winter", (date(2024, 12, 1), date(2025, 2, 28), "next winter", "Plans")),
    # quarters
    ("What happened in Q3 2023?", (date(2023, 7, 1), date(2023, 9, 30), "Q3 2023", "What happened?")),
    ("Sales in the third quarter of 2022", (date(2022, 7, 1), date(2022, 9, 30), "the third quarter of 2022",
                                            "Sales")),
    ("What shipped last quarter?", (date(2023, 10, 1), date(2023, 12, 31), "last quarter", "What shipped?")),
    # months
    ("Who visited in May 2023?", (date(2023, 5, 1), date(2023, 5, 31), "May 2023", "Who visited?")),
    ("What did Dev build in June?", (date(2023, 6, 1), date(2023, 6, 30), "in June", "What did Dev build?")),
    # last / next / this
    ("Who did Alice meet last week?", (date(2024, 2, 26), date(2024, 3, 3), "last week", "Who did Alice meet?")),
    ("What is planned for next month?", (date(2024, 4, 1), date(2024, 4, 30), "next month", "What is planned?")),
    ("What happened this year?", (date(2024, 1, 1), date(2024, 12, 31), "this year", "What happened?")),
    ("What did Bob cook yesterday?", (date(2024, 3, 9), date(2024, 3, 9), "yesterday", "What did Bob cook?")),
    # N days / weeks / months / years ago
    ("Where did Bob go 3 days ago?", (date(2024, 3, 7), date(2024, 3, 7), "3 days ago", "Where did Bob go?")),
    ("What did we do two weeks ago?", (date(2024, 2, 19), date(2024, 2, 25), "two weeks ago", "What did we do?")),
    ("What did Bob buy 5 months ago?", (date(2023, 10, 1), date(2023, 10, 31), "5 months ago",
                                        "What did Bob buy?")),
    ("Where did Carmen live 4 years ago?", (date(2020, 1, 1), date(2020, 12, 31), "4 years ago",
                                            "Where did Carmen live?")),
    ("What did Alice learn a few weeks ago?", (date(2024, 2, 4), date(2024, 2, 25), "a few weeks ago",
                                               "What did Alice learn?")),
    # years
    ("Which talks did Dev give in 2022?", (date(2022, 1, 1), date(2022, 12, 31), "in 2022",
                                           "Which talks did Dev give?")),
    # ranges
    ("What happened between March and May 2023?",
     (date(2023, 3, 1), date(2023, 5, 31), "between March and May 2023", "What happened?")),
    ("What happened between March and May?",
     (date(2023, 3, 1), date(2023, 5, 31), "between March and May", "What happened?")),
    ("Projects from June to August 2023", (date(2023, 6, 1), date(2023, 8, 31), "from June to August 2023",
                                           "Projects")),
    ("What has Alice done since June?", (date(2023, 6, 1), date(2024, 3, 10), "since June", "What has Alice done?")),
    ("What did Bob do before 2020?", (date(1904, 1, 1), date(2019, 12, 31), "before 2020", "What did Bob do?")),
    # one day
    ("What did Alice do on March 3rd?", (date(2024, 3, 3), date(2024, 3, 3), "March 3rd", "What did Alice do?")),
])
def test_phrasing_gives_window_and_rest(query: str, expected: tuple[date, date, str, str]) -> None:
    assert reading(query) == expected


def test_nothing_but_a_date_keeps_the_question() -> None:
    # no word would be left for the keyword and semantic arms: they search the question as asked
    assert reading("last week")[3] == "last week"
    assert reading("in the last 3 days")[3] == "in the last 3 days"


def test_no_date_no_reading() -> None:
    assert read_window("Where may Alice work?", REF) is None
    assert read_window("What has everyone been working on?", REF) is None


def test_chinese_expression_is_left_out() -> None:
    assert reading("去年夏天爱丽丝去了哪里")[2:] == ("去年夏天", "爱丽丝去了哪里")


def test_a_length_changing_normalisation_strips_from_the_normalised_text() -> None:
    # NFKC turns the ligature "ﬁ" into "fi": positions are the normalised text's
    start, end, phrase, rest = reading("ﬁnance news last week")
    assert (start, end, phrase, rest) == (date(2024, 2, 26), date(2024, 3, 3), "last week", "finance news")


# ---- the request's reading ------------------------------------------------------------------------------

def test_question_relative_to_query_timestamp() -> None:
    req = build_request("b", "What did Alice do last spring?", query_timestamp="2021-07-01T00:00:00Z")
    assert req.query_timestamp is not None
    q = read_question(req, req.query_timestamp, True, None)
    assert q.window is not None and q.window.start.date() == date(2021, 3, 1)
    # the semantic arms embed the rest; the keyword arm searches the question as asked
    assert (q.embedded, q.text, q.tokens, q.source, q.phrase) == (
        "What did Alice do?", req.query, req.tokens, "query", "last spring")


def test_question_with_temporal_retrieval_off_is_searched_as_asked() -> None:
    req = build_request("b", "What did Alice do last spring?")
    q = read_question(req, REF, False, None)
    assert (q.embedded, q.text, q.window, q.source, q.phrase) == (req.query, req.query, None, None, None)


def test_question_with_a_request_window_keeps_its_words() -> None:
    req = build_request("b", "What did Alice do last spring?",
                        temporal_window=("2020-01-01T00:00:00Z", "2020-02-01T00:00:00Z"))
    q = read_question(req, REF, True, None)
    assert (q.embedded, q.window, q.source) == (req.query, req.temporal_window, "request")


def test_question_without_date() -> None:
    req = build_request("b", "Where does Alice work?")
    q = read_question(req, REF, True, None)
    assert (q.embedded, q.tokens, q.window, q.source) == (req.query, req.tokens, None, None)


def test_question_that_is_only_a_date_is_embedded_as_asked() -> None:
    req = build_request("b", "last week")
    q = read_question(req, REF, True, None)
    assert q.window is not None and (q.embedded, q.phrase) == ("last week", "last week")
