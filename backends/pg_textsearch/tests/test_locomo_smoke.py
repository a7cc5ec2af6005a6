"""LoCoMo dev smoke on a live pg_textsearch server (see hindsight_recall.testing.locomo_smoke).

Floors: the full dev split gave fused hit_any@10 .779 and the keyword arm .682 (docs/backends.md), this
slice .797 and .675; each floor is the full figure minus 0.06.
"""

from __future__ import annotations

from hindsight_recall.testing.locomo_smoke import LocomoSmokeSuite


class TestLocomoSmoke(LocomoSmokeSuite):
    backend_name = "pg_textsearch"
    fused_floor = 0.72
    keyword_floor = 0.62
