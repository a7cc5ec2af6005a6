"""The shared HTTP helper's pure parts: retry waits, Retry-After parsing, declared wire formats."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from hindsight_recall.errors import RerankerHTTPError
from hindsight_recall.http import NO_RETRY, RerankAPI, RetryPolicy, retry_after

POLICY = RetryPolicy(retries=3)


def test_backoff_doubles_within_the_jitter_band() -> None:
    random.seed(7)
    for attempt, base in enumerate([0.5, 1.0, 2.0, 4.0]):
        waits = [POLICY.delay(attempt, None, timeout=30) for _ in range(200)]
        assert base * 0.5 <= min(waits) and max(waits) <= min(base * 1.5, 5.0)
        assert max(waits) - min(waits) > base * 0.5  # the jitter really varies


def test_wait_is_capped_by_five_seconds_and_the_timeout() -> None:
    assert POLICY.delay(10, None, timeout=30) == 5.0
    assert POLICY.delay(3, None, timeout=1.5) == 1.5
    assert POLICY.delay(0, 60.0, timeout=30) == 5.0
    assert POLICY.delay(0, 60.0, timeout=2) == 2.0


def test_retry_after_wins_when_larger() -> None:
    assert POLICY.delay(0, 3.0, timeout=30) == 3.0
    assert POLICY.delay(3, 0.1, timeout=30) >= 2.0


def test_retryable_statuses() -> None:
    assert [s for s in (200, 400, 401, 404, 413, 422, 429, 500, 502, 503, 504) if POLICY.retry_status(s)] == [
        429,
        500,
        502,
        503,
        504,
    ]
    assert NO_RETRY.retries == 0


@pytest.mark.parametrize(
    ("value", "expected"), [("2", 2.0), ("0.5", 0.5), ("-3", 0.0), ("soon", None), ("", None)]
)
def test_retry_after_seconds(value: str, expected: float | None) -> None:
    assert retry_after(httpx.Response(429, headers={"Retry-After": value})) == expected


def test_retry_after_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=10), usegmt=True)
    wait = retry_after(httpx.Response(429, headers={"Retry-After": when}))
    assert wait is not None and 8 <= wait <= 10


def test_request_body_from_declared_data() -> None:
    api = RerankAPI(provider="x", documents_key="texts", extra={"model": "m"}, count_key="top_n")
    assert api.body("q", ("a", "b")) == {"query": "q", "texts": ["a", "b"], "model": "m", "top_n": 2}


def test_scores_map_back_by_index() -> None:
    api = RerankAPI(provider="x")
    payload = {
        "results": [
            {"index": 2, "relevance_score": 0.9},
            {"index": 0, "relevance_score": 0.1},
            {"index": 1, "relevance_score": 5},
        ]
    }
    assert api.scores(payload, 3, "x: POST u") == [0.1, 5.0, 0.9]


@pytest.mark.parametrize(
    "payload",
    [
        [{"index": 0, "relevance_score": 1.0}],
        {"results": None},
        {"results": [{"index": True, "relevance_score": 1}]},
        {"results": [{"index": 0, "relevance_score": True}]},
        {"results": [{"index": "0", "relevance_score": 1}]},
    ],
)
def test_malformed_results_are_rejected(payload: object) -> None:
    with pytest.raises(RerankerHTTPError, match="x: POST u: malformed"):
        RerankAPI(provider="x").scores(payload, 1, "x: POST u")
