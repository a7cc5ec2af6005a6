"""LoCoMo dev smoke on a live pgroonga server (see hindsight_recall.testing.locomo_smoke).

Floors: the full dev split gave fused hit_any@10 .795 and the keyword arm .669 (docs/backends.md), this
slice .771-.779 and .62-.65 (the keyword arm moves with the order the tests run in). Keyword arm: .60. Fused:
.755, which Groonga's TF-IDF scorer clears and a plain match count (pgroonga_score without the scorer:
.745 on this slice in every run) does not; the last test here keeps that true.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hindsight_recall.testing.locomo_smoke import LocomoSmokeSuite
from hindsight_recall_pgroonga import HITS_DDL, SCORER, PgroongaBackend


class MatchCountBackend(PgroongaBackend):
    """The backend with Groonga's scorer taken out, so ``pgroonga_score`` is a plain match count."""

    def install_statements(self) -> Sequence[str]:
        plain = HITS_DDL.replace(f"scorers => ARRAY['{SCORER}'], ", "")
        assert plain != HITS_DDL
        return tuple(plain if statement == HITS_DDL else statement for statement in super().install_statements())


class TestLocomoSmoke(LocomoSmokeSuite):
    backend_name = "pgroonga"
    fused_floor = 0.755
    keyword_floor = 0.60

    def test_the_fused_floor_fails_a_plain_match_count(self, hr_database_url: str, hr_fresh_schema: str,
                                                         hr_run: Any) -> None:
        """The smoke above is what catches a scorer regression: with the scorer taken out it fails."""
        result = self.run_smoke(hr_database_url, hr_fresh_schema, hr_run, text_search=MatchCountBackend)
        assert result.fused < self.fused_floor, str(result)
