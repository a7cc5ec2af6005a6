"""The local cross-encoder passes the reranker compliance suite with a tiny offline model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hindsight_recall.testing import RerankerSuite


class TestLocalReranker(RerankerSuite):
    reranker_name = "local"

    @pytest.fixture(scope="class")
    @classmethod
    def hr_reranker_config(cls, tiny_model: Path) -> dict[str, Any]:
        return {"model": str(tiny_model), "batch_size": 16}
