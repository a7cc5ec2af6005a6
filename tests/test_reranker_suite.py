"""The reranker compliance suite passes a sound third-party reranker and fails broken ones."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hindsight_recall import get_plugin_manager, hookimpl
from hindsight_recall.plugins import PluginManager
from hindsight_recall.testing import RerankerSuite


class OverlapReranker:
    """Scores by the share of query words in the document."""

    name = "overlap"

    def __init__(self, settings: Any = None) -> None:
        pass

    async def score(self, query: str, documents: Sequence[str], *, bank_id: str | None = None) -> list[float]:
        words = set(re.findall(r"\w+", query.lower()))
        return [len(words & set(re.findall(r"\w+", d.lower()))) / (len(words) or 1) for d in documents]


class Plugin:
    @hookimpl
    def register_rerankers(self, register: Any) -> None:
        register(OverlapReranker)


class TestOverlapReranker(RerankerSuite):
    """A reranker registered in-process, the way a plugin author tries one before packaging it."""

    reranker_name = "overlap"

    @pytest.fixture(scope="class")
    @classmethod
    def hr_plugin_manager(cls) -> PluginManager:
        manager = get_plugin_manager()
        manager.register_plugin(Plugin(), "overlap", "overlap-dist", "0.1")
        return manager

    def test_import_loads_no_heavy_library(self, hr_plugin_manager: PluginManager) -> None:
        pytest.skip("the class lives in this test module, which imports pytest and the engine")


BROKEN = '''
import pytest
from hindsight_recall import get_plugin_manager, hookimpl
from hindsight_recall.testing import RerankerSuite


class Positional:
    """Scores by position: the order of the input leaks into the scores."""

    name = "positional"

    def __init__(self, settings=None):
        pass

    async def score(self, query, documents, *, bank_id=None):
        return [float(i) for i in range(len(documents))]


class Short:
    """Drops the last score."""

    name = "short"

    def __init__(self, settings=None):
        pass

    async def score(self, query, documents, *, bank_id=None):
        return [1.0] * max(0, len(documents) - 1)


class Plugin:
    @hookimpl
    def register_rerankers(self, register):
        register(Positional)
        register(Short)


def manager():
    m = get_plugin_manager(load_entry_points=False)
    m.register_plugin(Plugin(), "broken", "broken-dist", "0.1")
    return m


class TestPositional(RerankerSuite):
    reranker_name = "positional"

    @pytest.fixture(scope="class")
    @classmethod
    def hr_plugin_manager(cls):
        return manager()


class TestShort(RerankerSuite):
    reranker_name = "short"

    @pytest.fixture(scope="class")
    @classmethod
    def hr_plugin_manager(cls):
        return manager()
'''


def test_broken_rerankers_fail_the_suite(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text(BROKEN)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-rf",
         "-k", "not recall and not import_loads", str(tmp_path / "test_broken.py")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    failed = set(re.findall(r"FAILED \S+::(\w+::\w+)", result.stdout))
    assert {"TestPositional::test_scores_follow_the_input_order",
            "TestPositional::test_a_score_does_not_depend_on_the_other_documents"} <= failed, result.stdout
    assert {"TestShort::test_one_finite_score_per_document", "TestShort::test_many_documents_in_one_call",
            "TestShort::test_bank_id_is_accepted"} <= failed, result.stdout
    assert "TestPositional::test_one_finite_score_per_document" not in failed
