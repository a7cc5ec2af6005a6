"""Geometry for the console's SVG charts (drawn by the templates, no JavaScript)."""

from __future__ import annotations

from typing import Any

TYPES = ("world", "experience", "observation")


def stacked_columns(buckets: list[dict[str, Any]], width: int = 640, height: int = 160) -> dict[str, Any]:
    """Memories per time bucket as stacked columns, one colour per fact type."""
    tallest = max((sum(b.get(t, 0) for t in TYPES) for b in buckets), default=0) or 1
    step = width / max(len(buckets), 1)
    columns = []
    for i, b in enumerate(buckets):
        base = float(height)
        parts = []
        for t in TYPES:
            h = height * b.get(t, 0) / tallest
            if h:
                parts.append({"type": t, "y": base - h, "h": h, "n": b.get(t, 0)})
                base -= h
        columns.append({"x": i * step, "w": max(step - 1, 1), "time": b["time"], "parts": parts,
                        "total": sum(b.get(t, 0) for t in TYPES)})
    return {"columns": columns, "width": width, "height": height, "max": tallest}


def ring(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], size: int = 520) -> dict[str, Any]:
    """Entities on a circle, sized by mentions, with an edge for every pair a memory names together."""
    import math

    centre, radius = size / 2, size / 2 - 70
    placed = {}
    most = max((n["memories"] for n in nodes), default=1) or 1
    for i, n in enumerate(nodes):
        angle = 2 * math.pi * i / max(len(nodes), 1)
        placed[n["id"]] = {**n, "x": centre + radius * math.cos(angle), "y": centre + radius * math.sin(angle),
                           "r": 3 + 9 * n["memories"] / most}
    strongest = max((e["n"] for e in edges), default=1) or 1
    lines = [{"x1": placed[e["a"]]["x"], "y1": placed[e["a"]]["y"], "x2": placed[e["b"]]["x"],
              "y2": placed[e["b"]]["y"], "w": 0.5 + 3 * e["n"] / strongest, "n": e["n"]}
             for e in edges if e["a"] in placed and e["b"] in placed]
    return {"nodes": list(placed.values()), "edges": lines, "size": size}
