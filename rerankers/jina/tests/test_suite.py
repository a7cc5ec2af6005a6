"""The Jina reranker passes the reranker compliance suite against a real Jina-speaking server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hindsight_recall.testing import RerankerSuite
from hindsight_recall.testing.http_server import FixtureServer, jina_routes


class TestJinaReranker(RerankerSuite):
    reranker_name = "jina"

    @pytest.fixture(scope="class")
    @classmethod
    def hr_reranker_config(cls) -> Iterator[dict[str, Any]]:
        with FixtureServer(jina_routes(api_key="suite-key")) as server:
            yield {"api_key": "suite-key", "base_url": server.url}
