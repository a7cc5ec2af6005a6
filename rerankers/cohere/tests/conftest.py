"""A real Cohere-v2-speaking HTTP server on 127.0.0.1 for every test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hindsight_recall.testing.http_server import FixtureServer, cohere_routes

API_KEY = "test-cohere-key"


@pytest.fixture
def cohere_server() -> Iterator[FixtureServer]:
    with FixtureServer(cohere_routes(api_key=API_KEY)) as server:
        yield server
