"""The hindsight-recall compliance suite for the native backend.

Server: HINDSIGHT_TEST_DATABASE_URL_NATIVE, else a fresh embedded server.
"""

from __future__ import annotations

from hindsight_recall.testing import TextSearchBackendSuite


class TestCompliance(TextSearchBackendSuite):
    """Runs every compliance test against ``native``."""

    backend_name = "native"
