"""A real Jina-speaking HTTP server on 127.0.0.1 for every test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hindsight_recall.testing.http_server import FixtureServer, jina_routes

API_KEY = "test-jina-key"


@pytest.fixture
def jina_server() -> Iterator[FixtureServer]:
    with FixtureServer(jina_routes(api_key=API_KEY)) as server:
        yield server
