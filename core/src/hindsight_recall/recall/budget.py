"""The built-in budget functions: ``fixed`` and ``adaptive``."""

from __future__ import annotations

from typing import Any

from ..hookspecs import hookimpl
from ..settings import Settings
from ..types import Budget


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
