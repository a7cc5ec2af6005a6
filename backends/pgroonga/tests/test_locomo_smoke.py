"""LoCoMo dev smoke on a live pgroonga server (see hindsight_recall.testing.locomo_smoke).

Floors: the full dev split gave fused hit_any@10 .795 and the keyword arm .669 (docs/backends.md), this
slice .775 and .619; each floor is the lower of the two minus 0.05, rounded down.
"""

from __future__ import annotations

from hindsight_recall.testing.locomo_smoke import LocomoSmokeSuite


class TestLocomoSmoke(LocomoSmokeSuite):
    backend_name = "pgroonga"
    fused_floor = 0.72
    keyword_floor = 0.56
