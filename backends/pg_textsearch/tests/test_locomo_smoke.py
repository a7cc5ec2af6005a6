"""LoCoMo dev smoke on a live pg_textsearch server (see hindsight_recall.testing.locomo_smoke).

Floors: the full dev split gave fused hit_any@10 .779 and the keyword arm .682 (docs/backends.md); the
floors are those minus 0.06. A keyword arm that stops ranking (every match scored alike) falls far below.
"""

from __future__ import annotations

from hindsight_recall.testing.locomo_smoke import LocomoSmokeSuite


class TestLocomoSmoke(LocomoSmokeSuite):
    backend_name = "pg_textsearch"
    fused_floor = 0.72
    keyword_floor = 0.62
