"""The hindsight-recall compliance suite for the pgroonga backend.

Server: HINDSIGHT_TEST_DATABASE_URL_PGROONGA (with the extension and pgvector); skips without it.
"""

from __future__ import annotations

from hindsight_recall.testing import TextSearchBackendSuite


class TestCompliance(TextSearchBackendSuite):
    """Runs every compliance test against ``pgroonga``."""

    backend_name = "pgroonga"
