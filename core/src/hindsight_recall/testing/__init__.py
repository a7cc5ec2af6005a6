"""Test support for hindsight-recall and its plugins: the compliance suite, fixtures and test doubles.

``TextSearchBackendSuite`` and ``RerankerSuite`` are importable from here; each is loaded on first
use, because they import pytest and the engine, which code using only the test doubles need not
pay for. Nothing in the runtime package imports ``hindsight_recall.testing``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RerankerSuite", "TextSearchBackendSuite"]


def __getattr__(name: str) -> Any:
    if name == "TextSearchBackendSuite":
        from .suite import TextSearchBackendSuite

        return TextSearchBackendSuite
    if name == "RerankerSuite":
        from .reranker_suite import RerankerSuite

        return RerankerSuite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
