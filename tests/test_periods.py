"""A question that names a period ranks the memories of that period first (recall/scoring.period_first)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hindsight_recall import ConfigError, Engine
from hindsight_recall.recall.scoring import in_period, names_period, period_first
from hindsight_recall.settings import Settings
from hindsight_recall.store.banks import set_bank_config
from hindsight_recall.types import Candidate, MemoryRow, TimeWindow

ASKED = "2024-03-10T12:00:00Z"


def at(month: int, day: int = 12, year: int = 2023) -> str:
    return f"{year}-{month:02d}-{day:02d}T00:00:00Z"


#: A year of Tomasz, a month apart, and Ewa beside him. The July memory says his name twice, so it
#: matches "What did Tomasz do …" best on words alone: without the period it ranks first.
YEAR = [
    {"id": "jan", "text": "Tomasz renewed his passport at the consulate.", "occurred_at": at(1)},
    {"id": "feb", "text": "Tomasz repainted the kitchen a pale green.", "occurred_at": at(2)},
    {"id": "mar", "text": "Tomasz started evening classes in Italian.", "occurred_at": at(3)},
    {"id": "apr", "text": "Tomasz adopted a greyhound from a rescue centre.", "occurred_at": at(4, 16)},
    {"id": "may", "text": "Tomasz ran a half marathon along the river.", "occurred_at": at(5)},
    {"id": "jun", "text": "Tomasz moved his office to the spare bedroom.", "occurred_at": at(6)},
    {"id": "jul", "text": "Tomasz bought a sailboat, and Tomasz named the boat after his grandmother.",
     "occurred_at": at(7)},
    {"id": "aug", "text": "Tomasz spent two weeks hiking in the Tatra mountains.", "occurred_at": at(8)},
    {"id": "sep", "text": "Tomasz began volunteering at the food bank.", "occurred_at": at(9)},
    {"id": "oct", "text": "Tomasz planted tulip bulbs in the garden.", "occurred_at": at(10)},
    {"id": "nov", "text": "Tomasz sold his old car to a neighbour.", "occurred_at": at(11)},
    {"id": "dec", "text": "Tomasz hosted the family for Christmas Eve dinner.", "occurred_at": at(12)},
    {"id": "feb24", "text": "Tomasz joined a chess club in the old town.", "occurred_at": at(2, 18, 2024)},
    {"id": "ewa-apr", "text": "Ewa flew to Lisbon for a conference.", "occurred_at": at(4, 20)},
    {"id": "ewa-jul", "text": "Ewa and Tomasz went sailing together; Tomasz steered.", "occurred_at": at(7, 20)},
]

#: question -> the memories of the period it names
PERIODS = {
    "What did Tomasz do last spring?": {"mar", "apr", "may"},
    "What did Tomasz do in April 2023?": {"apr"},
    "What did Tomasz do in Q3 2023?": {"jul", "aug", "sep", "ewa-jul"},
    "What did Tomasz do in the autumn of 2023?": {"sep", "oct", "nov"},
    "What did Tomasz do three weeks ago?": {"feb24"},
    "What did Tomasz do between January and March 2023?": {"jan", "feb", "mar"},
}


@pytest.fixture(scope="module")
async def year_bank(engine: Engine) -> str:
    bank = "test-periods-year"
    await engine.delete_bank(bank)
    await engine.retain(bank, YEAR)
    return bank


@pytest.mark.parametrize("fusion", ["score", "rrf"])
@pytest.mark.parametrize("reranker", ["rrf", "local"])
@pytest.mark.parametrize("question", list(PERIODS))
async def test_the_named_period_comes_first(
    make_settings: Callable[..., Settings], engine: Engine, year_bank: str, fusion: str, reranker: str, question: str
) -> None:
    # "local" is the default cross-encoder: offline it cannot be loaded and recall keeps the fused order
    settings = make_settings(recall_fusion=fusion, reranker_provider=reranker, reranker_timeout=1)
    async with Engine(settings) as eng:
        body = await eng.recall(year_bank, question, query_timestamp=ASKED, max_tokens=4096)
    ranked = [r["id"] for r in body["results"]]
    inside = PERIODS[question]
    assert ranked[0] in inside, ranked
    # every memory of the period that was found leads every memory outside it
    found = [name for name in ranked if name in inside]
    assert ranked[: len(found)] == found, ranked


async def test_without_period_first_a_plain_name_match_wins(
    make_settings: Callable[..., Settings], year_bank: str
) -> None:
    """The bank above is the shape the setting exists for: without it, under score fusion, July's
    double name match leads (the temporal arm weighs 0.3 there)."""
    async with Engine(make_settings(recall_period_first=False)) as eng:
        body = await eng.recall(year_bank, "What did Tomasz do last spring?", query_timestamp=ASKED)
    assert body["results"][0]["id"] not in PERIODS["What did Tomasz do last spring?"]


async def test_a_bank_can_turn_period_first_off(engine: Engine, bank: str) -> None:
    await engine.retain(bank, YEAR)
    async with engine.db.connect() as conn:
        await set_bank_config(conn, bank, {"recall_period_first": False})
        await conn.commit()
    body = await engine.recall(bank, "What did Tomasz do last spring?", query_timestamp=ASKED, trace=True)
    scoring = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "combined_scoring")
    assert "in_period" not in scoring["details"]
    assert body["results"][0]["id"] not in PERIODS["What did Tomasz do last spring?"]


async def test_the_trace_counts_the_memories_in_the_period(engine: Engine, year_bank: str) -> None:
    body = await engine.recall(year_bank, "What did Tomasz do last spring?", query_timestamp=ASKED, trace=True)
    scoring = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "combined_scoring")
    assert scoring["details"]["in_period"] >= 1
    flagged = {r["node_id"] for r in body["trace"]["reranked"] if r["score_components"]["in_period"]}
    assert flagged <= PERIODS["What did Tomasz do last spring?"] | {"ewa-apr"}


@pytest.mark.parametrize("question", ["What should Tomasz do tonight?", "Is Tomasz busy now?",
                                      "What has Tomasz done since March 2023?", "What did Tomasz do before 2024?"])
async def test_a_window_around_now_or_open_to_the_past_is_no_period(
    engine: Engine, year_bank: str, question: str
) -> None:
    body = await engine.recall(year_bank, question, query_timestamp=ASKED, trace=True)
    scoring = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "combined_scoring")
    assert "in_period" not in scoring["details"]


def window(start: datetime, end: datetime) -> TimeWindow:
    return TimeWindow(start, end)


SPRING = window(datetime(2023, 3, 1, tzinfo=UTC), datetime(2023, 5, 31, 23, 59, tzinfo=UTC))


def memory(**dates: Any) -> MemoryRow:
    return MemoryRow(id=uuid.uuid4(), external_id="m", text="m", fact_type="world", **dates)


@pytest.mark.parametrize(("dates", "inside"), [
    ({"occurred_start": datetime(2023, 4, 16, tzinfo=UTC)}, True),
    ({"occurred_start": datetime(2023, 7, 1, tzinfo=UTC)}, False),
    # a span that overlaps the period
    ({"occurred_start": datetime(2023, 2, 20, tzinfo=UTC), "occurred_end": datetime(2023, 3, 2, tzinfo=UTC)}, True),
    ({"occurred_end": datetime(2023, 3, 2, tzinfo=UTC)}, True),
    # told later, happened in the period: the occurrence decides
    ({"occurred_start": datetime(2023, 4, 1, tzinfo=UTC), "mentioned_at": datetime(2023, 9, 1, tzinfo=UTC)}, True),
    ({"occurred_start": datetime(2023, 1, 1, tzinfo=UTC), "mentioned_at": datetime(2023, 4, 1, tzinfo=UTC)}, False),
    # only a mention date: it stands for the occurrence
    ({"mentioned_at": datetime(2023, 4, 1, tzinfo=UTC)}, True),
    ({}, False),
])
def test_in_period(dates: dict[str, datetime], inside: bool) -> None:
    assert in_period(memory(**dates), SPRING) is inside


def test_names_period() -> None:
    now = datetime(2024, 3, 10, 12, tzinfo=UTC)
    assert names_period(SPRING, now)
    assert not names_period(window(datetime(2024, 3, 10, tzinfo=UTC), datetime(2024, 3, 10, 23, 59, tzinfo=UTC)), now)
    assert not names_period(window(datetime(1904, 1, 1, tzinfo=UTC), datetime(2023, 12, 31, tzinfo=UTC)), now)
    assert names_period(window(datetime(2023, 1, 1, tzinfo=UTC), datetime(2023, 12, 31, 23, 59, tzinfo=UTC)), now)


def test_period_first_moves_matched_memories_of_the_period_ahead_in_order() -> None:
    def cand(name: str, month: int, *arms: str) -> Candidate:
        row = MemoryRow(id=uuid.uuid4(), external_id=name, text=name, fact_type="world",
                        occurred_start=datetime(2023, month, 2, tzinfo=UTC))
        return Candidate(row=row, rrf_score=0, source_ranks={f"{arm}_rank": 1 for arm in arms})

    ranked = [cand("jul", 7, "keyword"), cand("apr-neighbour", 4), cand("apr-by-date", 4, "temporal"),
              cand("may", 5, "semantic", "temporal"), cand("jan", 1, "keyword"), cand("apr", 4, "keyword")]
    names = [c.row.external_id for c in period_first(ranked, SPRING)]
    assert names == ["may", "apr", "jul", "apr-neighbour", "apr-by-date", "jan"]
    assert [c.period for c in ranked] == [False, False, False, True, False, True]


@pytest.mark.parametrize("raw", ["maybe", "2"])
def test_the_period_setting_is_a_boolean(make_settings: Callable[..., Settings], raw: str) -> None:
    with pytest.raises(ConfigError, match="HINDSIGHT_API_RECALL_PERIOD_FIRST"):
        make_settings(recall_period_first=raw)
