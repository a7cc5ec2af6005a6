"""Caches keyed by what banks or requests choose stay bounded when filled past their bound."""

from __future__ import annotations

import pytest
from hindsight_recall.recall.fusion import PARSED_SETTINGS, parse_boosts, parse_score_weights, parse_weights


@pytest.mark.parametrize("parse", [parse_weights, parse_score_weights])
def test_parsed_weight_strings_are_bounded(parse: object) -> None:
    parse.cache_clear()  # type: ignore[attr-defined]
    for i in range(PARSED_SETTINGS + 40):  # as many banks, each with its own weights
        assert parse(f"keyword:{i}, semantic:0.5") == {"keyword": float(i), "semantic": 0.5}  # type: ignore[operator]
    assert parse.cache_info().currsize == PARSED_SETTINGS  # type: ignore[attr-defined]
    assert parse("keyword:2") == {"keyword": 2.0}  # type: ignore[operator]


def test_parsed_boost_strings_are_bounded() -> None:
    parse_boosts.cache_clear()
    for i in range(PARSED_SETTINGS + 40):
        assert parse_boosts(f"graph:high, temporal:{('low', 'medium', 'high')[i % 3]}", (f"arm{i}",))["graph"] == "high"
    assert parse_boosts.cache_info().currsize == PARSED_SETTINGS
