"""The built-in budget functions: ``fixed`` and ``adaptive``."""

from __future__ import annotations

import math
from typing import Any

from ..hookspecs import hookimpl
from ..settings import Settings
from ..types import Budget

#: The budget B the arms' inner pools were sized at: the default of RECALL_BUDGET_FIXED_MID.
REFERENCE_BUDGET = 300


def scaled(size: int, limit: int, floor: int = 1) -> int:
    """An arm's inner pool for budget ``B`` = ``limit``: ``ceil(size × B / 300)``, at least ``floor``.

    The temporal pool and the graph seeds were sized for the mid budget; scaling them with B lets a
    low budget search less and a high one reach further, like the arms' own LIMIT.

    :param size: the pool at B = 300.
    :param limit: the recall's B.
    :param floor: the smallest pool, however small B is.
    """
    return max(floor, math.ceil(size * limit / REFERENCE_BUDGET))


class FixedBudget:
    """B is a fixed row count per level: RECALL_BUDGET_FIXED_{LOW,MID,HIGH}."""

    name = "fixed"

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def resolve(self, budget: Budget, max_tokens: int, config: Settings) -> int:
        return int(getattr(config, f"recall_budget_fixed_{Budget(budget).value}"))


class AdaptiveBudget:
    """B grows with max_tokens: clamp(round(max_tokens × ratio), RECALL_BUDGET_MIN, RECALL_BUDGET_MAX)."""

    name = "adaptive"

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def resolve(self, budget: Budget, max_tokens: int, config: Settings) -> int:
        ratio: float = getattr(config, f"recall_budget_adaptive_{Budget(budget).value}")
        return max(config.recall_budget_min, min(config.recall_budget_max, round(max_tokens * ratio)))


@hookimpl
def register_budget_functions(register: Any) -> None:
    register(FixedBudget)
    register(AdaptiveBudget)
