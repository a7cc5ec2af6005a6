"""How a ranked list of memory ids scores against a question's evidence (LoCoMo's metrics): ``bench recall``
and the LoCoMo smoke tests score alike."""

from __future__ import annotations

from collections.abc import Sequence

#: the cut-offs of hit_any@k ...
KS = (1, 5, 10)
#: ... and of hit_all@k
ALL_KS = (5, 10)


def score_query(evidence: Sequence[str], ranked: Sequence[str]) -> dict[str, float]:
    """hit_any@k, hit_all@k and reciprocal rank of the first evidence id, for one query."""
    wanted = set(evidence)
    row: dict[str, float] = {}
    for k in KS:
        got = len(wanted & set(ranked[:k]))
        row[f"hit_any@{k}"] = 1.0 if got else 0.0
        if k in ALL_KS:
            row[f"hit_all@{k}"] = 1.0 if got == len(wanted) else 0.0
    row["mrr"] = next((1.0 / i for i, x in enumerate(ranked, start=1) if x in wanted), 0.0)
    return row
