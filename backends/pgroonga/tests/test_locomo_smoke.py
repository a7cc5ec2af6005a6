"""LoCoMo dev smoke on a live pgroonga server (see hindsight_recall.testing.locomo_smoke).

Floors: the full dev split gave fused hit_any@10 .795 and the keyword arm .669 (docs/backends.md), this
slice .779 and .641. Fused: the full figure minus 0.06. Keyword arm: .61, which Groonga's TF-IDF scorer
clears and a plain match count (pgroonga_score without the scorer: .602 on this slice) does not; the
last test here keeps that true.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hindsight_recall.testing.locomo_smoke import LocomoSmokeSuite, SmokeResult, dev_split, locomo_smoke
from hindsight_recall_pgroonga import HITS_DDL, SCORER, PgroongaBackend


class MatchCountBackend(PgroongaBackend):
    """The backend with Groonga's scorer taken out, so ``pgroonga_score`` is a plain match count."""

    def install_statements(self) -> Sequence[str]:
        plain = HITS_DDL.replace(f"scorers => ARRAY['{SCORER}'], ", "")
        assert plain != HITS_DDL
        return tuple(plain if statement == HITS_DDL else statement for statement in super().install_statements())


class TestLocomoSmoke(LocomoSmokeSuite):
    backend_name = "pgroonga"
    fused_floor = 0.735
    keyword_floor = 0.61

    def test_the_keyword_floor_fails_a_plain_match_count(self, hr_database_url: str, hr_fresh_schema: str,
                                                         hr_run: Any) -> None:
        """The smoke above is what catches a scorer regression: with the scorer taken out it fails."""
        from hindsight_recall import Engine, load_settings

        split = dev_split()
        if split is None:
            pytest.skip("the LoCoMo dev split is not in shared/bench/locomo/dev here or in a parent folder")
        settings = load_settings(database_url=hr_database_url, database_schema=hr_fresh_schema,
                                 text_search_extension=self.backend_name, reranker_provider="rrf")

        async def smoke() -> SmokeResult:
            async with Engine(settings, text_search=MatchCountBackend(settings)) as engine:
                return await locomo_smoke(engine, split)

        result = hr_run(smoke())
        assert result.keyword < self.keyword_floor, str(result)
