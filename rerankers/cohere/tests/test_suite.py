"""The Cohere reranker passes the reranker compliance suite against a real Cohere-speaking server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hindsight_recall.testing import RerankerSuite
from hindsight_recall.testing.http_server import FixtureServer, cohere_routes


class TestCohereReranker(RerankerSuite):
    reranker_name = "cohere"

    @pytest.fixture(scope="class")
    @classmethod
    def hr_reranker_config(cls) -> Iterator[dict[str, Any]]:
        with FixtureServer(cohere_routes(api_key="suite-key")) as server:
            yield {"api_key": "suite-key", "base_url": f"{server.url}/v2/rerank", "model": "rerank-v3.5"}
