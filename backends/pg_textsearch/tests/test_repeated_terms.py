"""A word repeated in the query scores as once, on a live server.

Server: HINDSIGHT_TEST_DATABASE_URL_PG_TEXTSEARCH (with the extension and pgvector), else one the test kit
builds when the backend is in HINDSIGHT_TEST_EXTENSION_SERVERS (nox's session sets it); skips without either.
"""

from __future__ import annotations

from typing import Any

from hindsight_recall.testing.suite import RANKING, Run, keyword_hits


class TestRepeatedTerms:
    backend_name = "pg_textsearch"

    def test_a_repeated_word_does_not_inflate_the_score(
        self, hr_engine: Any, hr_run: Run, hr_bank: str
    ) -> None:
        hr_run(hr_engine.retain(hr_bank, RANKING))
        once = hr_run(keyword_hits(hr_engine, hr_bank, "solar panel"))
        repeated = hr_run(keyword_hits(hr_engine, hr_bank, "solar solar Solar panel SOLAR"))
        assert [h.id for h in once] == ["strong", "weak"]
        assert [(h.id, round(h.score, 6)) for h in repeated] == [(h.id, round(h.score, 6)) for h in once]
