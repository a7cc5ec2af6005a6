"""The TEI reranker passes the reranker compliance suite against a real TEI-speaking server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hindsight_recall.testing import RerankerSuite
from hindsight_recall.testing.http_server import FixtureServer, tei_routes


class TestTEIReranker(RerankerSuite):
    reranker_name = "tei"

    @pytest.fixture(scope="class")
    @classmethod
    def hr_reranker_config(cls) -> Iterator[dict[str, Any]]:
        with FixtureServer(tei_routes()) as server:
            yield {"url": server.url, "batch_size": 64}
