"""Links recall follows: semantic kNN, temporal proximity and caller-given causes (SPEC §0)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

Link = tuple[uuid.UUID, uuid.UUID, str, float]

SEMANTIC_NEIGHBOURS = 50
TEMPORAL_NEIGHBOURS = 20
TEMPORAL_HOURS = 24.0
_BLOCK = 2048


async def semantic_links(
    conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], vectors: Sequence[Sequence[float]], floor: float
) -> list[Link]:
    """Each new memory links to its 50 most similar memories of the bank above ``floor``."""
    from pgvector.psycopg import register_vector_async  # late: only retain reads vectors back

    raw = (await conn.get_raw_connection()).driver_connection
    await register_vector_async(raw)  # vectors arrive as numpy arrays in binary, not text to parse
    rows = (await conn.execute(
        text("SELECT id, embedding FROM memory_units WHERE bank_id = :bank AND embedding IS NOT NULL"),
        {"bank": bank_id},
    )).all()
    if len(rows) < 2:
        return []
    all_ids = [r.id for r in rows]
    matrix = np.stack([np.asarray(getattr(r.embedding, "to_numpy", lambda e=r.embedding: e)(), dtype=np.float32) for r in rows])
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    new = np.asarray(vectors, dtype=np.float32)
    new /= np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-12)
    position = {uid: i for i, uid in enumerate(all_ids)}
    k = min(SEMANTIC_NEIGHBOURS, len(all_ids) - 1)
    links: list[Link] = []
    for start in range(0, len(ids), _BLOCK):
        sims = new[start : start + _BLOCK] @ matrix.T
        for row, uid in enumerate(ids[start : start + _BLOCK]):
            if uid in position:
                sims[row, position[uid]] = -1.0  # never link a memory to itself
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < sims.shape[1] else np.tile(np.arange(sims.shape[1]), (sims.shape[0], 1))
        for row, uid in enumerate(ids[start : start + _BLOCK]):
            for col in top[row]:
                sim = float(sims[row, col])
                if sim >= floor:
                    links.append((uid, all_ids[col], "semantic", min(1.0, sim)))
    return links


async def temporal_links(
    conn: AsyncConnection, bank_id: str, ids: list[uuid.UUID], dates: Sequence[datetime | None]
) -> list[Link]:
    """Each new dated memory links to its 20 nearest memories within 24 h: ``max(0.3, 1 − Δh/24)``."""
    if not any(dates):
        return []
    rows = (await conn.execute(
        text("SELECT id, extract(epoch FROM event_date) AS epoch FROM memory_units "
             "WHERE bank_id = :bank AND event_date IS NOT NULL ORDER BY event_date"),
        {"bank": bank_id},
    )).all()
    times = np.array([float(r.epoch) for r in rows])
    links: list[Link] = []
    for uid, date in zip(ids, dates, strict=True):
        if date is None:
            continue
        t = date.timestamp()
        lo = int(np.searchsorted(times, t - TEMPORAL_HOURS * 3600, side="left"))
        hi = int(np.searchsorted(times, t + TEMPORAL_HOURS * 3600, side="right"))
        near = sorted((abs(times[j] - t), j) for j in range(lo, hi) if rows[j].id != uid)
        for delta, j in near[:TEMPORAL_NEIGHBOURS]:
            links.append((uid, rows[j].id, "temporal", max(0.3, 1.0 - delta / 3600 / TEMPORAL_HOURS)))
    return links


def causal_links(ids: list[uuid.UUID], causes: Sequence[Sequence[uuid.UUID]]) -> list[Link]:
    """``A causes B`` is stored both ways (causes / caused_by) so either end can reach the other."""
    links: list[Link] = []
    for uid, targets in zip(ids, causes, strict=True):
        for target in targets:
            links.append((uid, target, "causes", 1.0))
            links.append((target, uid, "caused_by", 1.0))
    return links
