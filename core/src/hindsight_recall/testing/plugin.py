"""pytest plugin (entry point ``pytest11``): markers and fixtures for hindsight-recall plugin authors."""

from __future__ import annotations

from typing import Any


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "hindsight_backend(name): the text-search backend a suite targets")
