"""Test support for hindsight-recall and its plugins: the compliance suite, fixtures and test doubles.

``TextSearchBackendSuite`` is importable from here; it is loaded on first use, because it imports
pytest and SQLAlchemy, which code using only the test doubles need not pay for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TextSearchBackendSuite"]


def __getattr__(name: str) -> Any:
    if name == "TextSearchBackendSuite":
        from .suite import TextSearchBackendSuite

        return TextSearchBackendSuite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
