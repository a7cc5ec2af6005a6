"""The hindsight-recall compliance suite for the vchord backend.

Server: HINDSIGHT_TEST_DATABASE_URL_VCHORD (with the extension and pgvector); skips without it.
"""

from __future__ import annotations

from hindsight_recall.testing import TextSearchBackendSuite


class TestCompliance(TextSearchBackendSuite):
    """Runs every compliance test against ``vchord``."""

    backend_name = "vchord"
