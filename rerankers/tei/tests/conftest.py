"""A real TEI-speaking HTTP server on 127.0.0.1 for every test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hindsight_recall.testing.http_server import FixtureServer, tei_routes


@pytest.fixture
def tei_server() -> Iterator[FixtureServer]:
    with FixtureServer(tei_routes()) as server:
        yield server
