"""Fitting ranked results into the token budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def pack(items: Sequence[T], max_tokens: int, count: Callable[[T], int]) -> tuple[list[T], int, bool]:
    """Walk in rank order, skipping what does not fit; return (selected, tokens used, truncated).

    With ``max_tokens > 0``, if nothing fits the top-ranked item is returned whole (over budget).
    ``max_tokens = 0`` selects nothing.
    """
    if max_tokens <= 0:
        return [], 0, bool(items)
    selected: list[T] = []
    used, truncated = 0, False
    for position, item in enumerate(items):
        if used == max_tokens:  # full: nothing of one token or more fits, so stop counting
            truncated = truncated or position < len(items)
            break
        tokens = count(item)
        if used + tokens <= max_tokens:
            selected.append(item)
            used += tokens
        else:
            truncated = True
    if not selected and items:
        return [items[0]], count(items[0]), True
    return selected, used, truncated
