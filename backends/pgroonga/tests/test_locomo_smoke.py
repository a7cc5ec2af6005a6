"""LoCoMo dev smoke on a live pgroonga server (see hindsight_recall.testing.locomo_smoke).

Floors: the full dev split gave fused hit_any@10 .795 and the keyword arm .669 (docs/backends.md), this
slice .775 and .619. Fused: the full figure minus 0.06. Keyword arm: .60, which Groonga's TF-IDF scorer
clears and a plain match count (pgroonga_score without the scorer: .580 on this slice) does not.
"""

from __future__ import annotations

from hindsight_recall.testing.locomo_smoke import LocomoSmokeSuite


class TestLocomoSmoke(LocomoSmokeSuite):
    backend_name = "pgroonga"
    fused_floor = 0.735
    keyword_floor = 0.60
