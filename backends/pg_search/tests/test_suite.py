"""The hindsight-recall compliance suite for the pg_search backend.

Server: HINDSIGHT_TEST_DATABASE_URL_PG_SEARCH (with the extension and pgvector), else one the test kit builds
when the backend is in HINDSIGHT_TEST_EXTENSION_SERVERS (nox's session sets it); skips without either.
"""

from __future__ import annotations

from hindsight_recall.testing import TextSearchBackendSuite


class TestCompliance(TextSearchBackendSuite):
    """Runs every compliance test against ``pg_search``."""

    backend_name = "pg_search"
