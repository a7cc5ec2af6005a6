"""Shared fixtures: one embedded PostgreSQL per test run, engines built from explicit settings."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from hindsight_recall import Engine, load_settings  # noqa: E402
from hindsight_recall.settings import Settings  # noqa: E402


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh embedded-server data dir per run, outside the home directory."""
    return tmp_path_factory.mktemp("pg") / "data"


@pytest.fixture(scope="session")
def make_settings(data_dir: Path) -> Callable[..., Settings]:
    """Settings for tests: the run's embedded server, passthrough reranking unless asked otherwise."""
    url = os.environ.get("HINDSIGHT_TEST_DATABASE_URL")

    def make(**overrides: Any) -> Settings:
        base: dict[str, Any] = {"embedded_data_dir": data_dir, "reranker_provider": "rrf", "database_url": url}
        return load_settings(**{**base, **overrides})

    return make


@pytest.fixture(scope="session")
async def engine(make_settings: Callable[..., Settings]) -> AsyncIterator[Engine]:
    """A shared engine; tests isolate themselves with unique bank ids."""
    async with Engine(make_settings()) as eng:
        yield eng


@pytest.fixture
def bank() -> str:
    """A bank id no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


ALICE_BANK = [
    {"id": "job", "text": "Alice works as a data engineer at Helios Robotics in Munich.", "type": "world",
     "entities": ["Alice", "Helios Robotics"], "tags": ["work"], "occurred_at": "2023-08-01T00:00:00Z"},
    {"id": "old-job", "text": "Alice used to be an analyst at Northwind Labs.", "type": "world",
     "entities": ["Alice", "Northwind Labs"], "tags": ["work"], "occurred_at": "2022-02-01T00:00:00Z"},
    {"id": "marathon", "text": "Alice ran her first marathon in Hamburg.", "type": "world",
     "entities": ["Alice"], "tags": ["personal"], "occurred_at": "2023-04-23T00:00:00Z"},
    {"id": "pasta", "text": "Bob cooked pasta carbonara for dinner.", "type": "experience",
     "entities": ["Bob"], "occurred_at": "2023-05-02T00:00:00Z"},
    {"id": "reorg", "text": "Northwind Labs reorganised Alice's team under a new manager.", "type": "world",
     "entities": ["Northwind Labs", "Alice"], "tags": ["work"], "occurred_at": "2023-05-15T00:00:00Z",
     "causes": ["left"]},
    {"id": "left", "text": "Alice left Northwind Labs in June.", "type": "world",
     "entities": ["Alice", "Northwind Labs"], "occurred_at": "2023-06-30T00:00:00Z"},
    {"id": "summary", "text": "Alice changed jobs in 2023, moving from Northwind Labs to Helios Robotics.",
     "type": "observation", "sources": ["job", "left"], "entities": ["Alice"]},
    {"id": "untagged", "text": "Alice likes green tea.", "type": "world", "entities": ["Alice"]},
]


@pytest.fixture
async def alice(engine: Engine, bank: str) -> str:
    """A small bank about Alice; returns its id."""
    await engine.retain(bank, ALICE_BANK)
    return bank
