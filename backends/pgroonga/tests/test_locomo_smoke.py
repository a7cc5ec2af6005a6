"""LoCoMo dev smoke on a live pgroonga server (see hindsight_recall.testing.locomo_smoke).

Floors: the full dev split gave fused hit_any@10 .795 and the keyword arm .669 (docs/backends.md); the
floors are those minus 0.06. A keyword arm that stops ranking (every match scored alike) falls far below.
"""

from __future__ import annotations

from hindsight_recall.testing.locomo_smoke import LocomoSmokeSuite


class TestLocomoSmoke(LocomoSmokeSuite):
    backend_name = "pgroonga"
    fused_floor = 0.735
    keyword_floor = 0.61
