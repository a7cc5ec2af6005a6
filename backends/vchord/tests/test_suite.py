"""The hindsight-recall compliance suite for the vchord backend.

Server: HINDSIGHT_TEST_DATABASE_URL_VCHORD (with the extensions and pgvector), else one the test kit builds
when the backend is in HINDSIGHT_TEST_EXTENSION_SERVERS (nox's session sets it); skips without either.
"""

from __future__ import annotations

from hindsight_recall.testing import TextSearchBackendSuite


class TestCompliance(TextSearchBackendSuite):
    """Runs every compliance test against ``vchord``."""

    backend_name = "vchord"


class TestComplianceBertTokens(TextSearchBackendSuite):
    """The compliance suite on bert_base_uncased's tokens, whose vocabulary covers CJK (its CJK tests run)."""

    backend_name = "vchord"
    settings_overrides = {"database_schema": "suite_vchord_bert",
                          "plugins": {"text_search": {"vchord": {"tokenizer": "bert_base_uncased"}}}}
