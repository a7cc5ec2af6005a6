"""A tiny random-weight cross-encoder, built once per test run, that loads offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from hindsight_recall.testing.models import build_tiny_cross_encoder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))
