"""Similarity floors that mean the same thing whatever embedding model is configured.

The cosine floors (``SEMANTIC_MIN_SIMILARITY``, ``GRAPH_SEED_MIN_SIMILARITY``,
``TEMPORAL_SEMANTIC_MIN_SIMILARITY``) are numbers on the scale of the bundled all-MiniLM-L6-v2
model. Models differ in how similar they find text that has nothing in common: one gives unrelated
sentences cosines around 0.05, another around 0.5, so a fixed 0.3 keeps everything with one and
almost nothing with the other. A model is therefore *calibrated* once: the cosines it
gives pairs of :data:`~._unrelated.UNRELATED` sentences (one embedded as a query, the other as a
passage) form its noise distribution. A floor is carried over by its rank in that distribution: a
floor that 99 % of unrelated pairs stay below on the bundled model becomes the similarity that 99 %
of unrelated pairs stay below on the configured one (``SEMANTIC_FLOOR_CALIBRATION``). Above the
noisiest unrelated pair, the distance to a perfect match scales instead.

A calibration is kept for the life of the process and stored on disk beside the ONNX graphs
(``EMBEDDINGS_ONNX_CACHE_DIR``/floors), one file per model identity and weights, so that a new
process reads it in a millisecond instead of embedding the texts again.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocols import EmbeddingProvider
from ..settings import Settings
from ._unrelated import UNRELATED

log = logging.getLogger(__name__)

#: points of a distribution kept: the 0th to the 100th percentile
POINTS = 101
#: the settings that hold cosine floors
#: the widest gap between percentiles of calibrations that are one model's
SAME_SCALE = 0.01
FLOOR_SETTINGS = ("semantic_min_similarity", "graph_seed_min_similarity", "temporal_semantic_min_similarity")


@dataclass(frozen=True)
class Calibration:
    """One model's similarities between unrelated texts, as percentiles (ascending)."""

    model: str
    percentiles: tuple[float, ...]

    def rank(self, similarity: float) -> float:
        """The fraction of unrelated pairs below ``similarity``, in [0, 1] (interpolated)."""
        p = self.percentiles
        if similarity <= p[0]:
            return 0.0
        if similarity >= p[-1]:
            return 1.0
        i = bisect.bisect_right(p, similarity) - 1
        width = p[i + 1] - p[i]
        within = (similarity - p[i]) / width if width > 0 else 0.0
        return (i + within) / (len(p) - 1)

    def at(self, rank: float) -> float:
        """The similarity at ``rank`` (a fraction in [0, 1]) of the unrelated pairs."""
        position = min(max(rank, 0.0), 1.0) * (len(self.percentiles) - 1)
        i = min(int(position), len(self.percentiles) - 2)
        low, high = self.percentiles[i], self.percentiles[i + 1]
        return low + (position - i) * (high - low)


#: The bundled all-MiniLM-L6-v2's calibration (torch, no prefixes): the scale the floor settings are
#: written on. tests/test_floors.py checks it against the model.
REFERENCE = Calibration("bundled all-MiniLM-L6-v2", (
    -0.146825, -0.094190, -0.081243, -0.073477, -0.067764, -0.060064, -0.051659, -0.046922, -0.040678,
    -0.038316, -0.033820, -0.031068, -0.027982, -0.025931, -0.022810, -0.019522, -0.016869, -0.014734,
    -0.010600, -0.008126, -0.006964, -0.004724, -0.002847, -0.001125, 0.002864, 0.006398, 0.008730,
    0.010331, 0.011986, 0.014373, 0.016159, 0.018415, 0.019978, 0.021944, 0.024128, 0.026816,
    0.028423, 0.030862, 0.032271, 0.033687, 0.035040, 0.036670, 0.040417, 0.041615, 0.044245,
    0.048580, 0.049171, 0.050876, 0.053591, 0.055212, 0.056536, 0.058549, 0.060539, 0.063676,
    0.065541, 0.067497, 0.069616, 0.071047, 0.072828, 0.074324, 0.076327, 0.077966, 0.080125,
    0.082554, 0.086128, 0.088987, 0.090554, 0.093017, 0.094431, 0.097427, 0.099550, 0.102208,
    0.104409, 0.106339, 0.110189, 0.112162, 0.114823, 0.118824, 0.122696, 0.126401, 0.129711,
    0.133758, 0.137061, 0.140116, 0.145819, 0.150707, 0.156865, 0.159547, 0.164674, 0.170634,
    0.175876, 0.181956, 0.187001, 0.196663, 0.207106, 0.217624, 0.236789, 0.264107, 0.286303,
    0.320980, 0.416234,
))


def carry(floor: float, reference: Calibration, model: Calibration) -> float:
    """A floor on ``reference``'s scale carried to ``model``'s: same rank among unrelated pairs.

    Past the noisiest pair the share of the way to 1 (or, below the least similar, to -1) is kept,
    so distinct floors stay distinct and 1 stays 1.
    """
    top, bottom = reference.percentiles[-1], reference.percentiles[0]
    if floor > top:
        share = (floor - top) / (1 - top) if top < 1 else 1.0
        return model.percentiles[-1] + share * (1 - model.percentiles[-1])
    if floor < bottom:
        share = (bottom - floor) / (bottom + 1) if bottom > -1 else 1.0
        return model.percentiles[0] - share * (model.percentiles[0] + 1)
    return model.at(reference.rank(floor))


def calibrated_settings(settings: Settings, reference: Calibration, model: Calibration | None) -> Settings:
    """``settings`` with its cosine floors carried onto ``model``'s scale (the same object when
    nothing changes: calibration off, no calibration, or the reference model itself)."""
    if model is None or not settings.semantic_floor_calibration or same_scale(reference, model):
        return settings
    update = {name: round(carry(getattr(settings, name), reference, model), 6) for name in FLOOR_SETTINGS}
    return settings.model_copy(update=update)


def same_scale(a: Calibration, b: Calibration) -> bool:
    """Whether two calibrations are one model's up to numerics (ONNX against torch, another machine)."""
    return max(abs(x - y) for x, y in zip(a.percentiles, b.percentiles, strict=True)) < SAME_SCALE


def percentiles(values: Sequence[float], points: int = POINTS) -> tuple[float, ...]:
    """``points`` evenly spaced percentiles of ``values`` (linear interpolation), ascending."""
    ordered = sorted(values)
    last = len(ordered) - 1
    out = []
    for k in range(points):
        position = k * last / (points - 1)
        i = min(int(position), max(last - 1, 0))
        high = ordered[min(i + 1, last)]
        out.append(round(ordered[i] + (position - i) * (high - ordered[i]), 6))
    return tuple(out)


def unrelated_similarities(queries: Sequence[Sequence[float]], passages: Sequence[Sequence[float]]) -> list[float]:
    """Cosines between each query vector and every *other* text's passage vector."""
    q = [_unit(v) for v in queries]
    p = [_unit(v) for v in passages]
    return [math.fsum(a * b for a, b in zip(q[i], p[j], strict=True))
            for i in range(len(q)) for j in range(len(p)) if i != j]


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else [0.0 for _ in vector]


def model_identity(embedder: EmbeddingProvider, settings: Settings) -> str:
    """What decides a model's similarities: the provider, its model and the prefixes it adds."""
    model = getattr(embedder, "model_name", None) or getattr(embedder, "model", None) or ""
    return (f"{embedder.name}:{model}:query={settings.embeddings_query_prefix!r}:"
            f"passage={settings.embeddings_passage_prefix!r}")


async def calibrate(embedder: EmbeddingProvider, identity: str) -> Calibration:
    """Embed :data:`UNRELATED` as queries and as passages and keep the cosines' percentiles."""
    texts = list(UNRELATED)
    queries = await embedder.embed(texts, mode="query")
    passages = await embedder.embed(texts, mode="passage")
    values = await asyncio.to_thread(unrelated_similarities, queries, passages)
    return Calibration(identity, percentiles(values))


class Calibrations:
    """One calibration per model identity: read from disk when stored there, else computed (about
    0.3 s of CPU with MiniLM) and stored; kept for the life of the process. Two first recalls at
    once may both compute it: the same result."""

    def __init__(self) -> None:
        self._known: dict[str, Calibration] = {}

    async def get(self, embedder: EmbeddingProvider, settings: Settings) -> Calibration:
        identity = model_identity(embedder, settings)
        known = self._known.get(identity)
        if known is None:
            path = stored_path(embedder, identity, settings)
            known = await asyncio.to_thread(load, path, identity)
            if known is None:
                known = await calibrate(embedder, identity)
                await asyncio.to_thread(store, path, known)
            self._known[identity] = known
        return known


def stored_path(embedder: EmbeddingProvider, identity: str, settings: Settings) -> Path:
    """The file of ``identity``'s calibration: it changes with the model's weights and runtime (the
    embedder's ``fingerprint``, when it has one) and with the texts calibrated on."""
    from .._onnx import default_cache_dir  # late: only a recall with floors reads it

    fingerprint = getattr(embedder, "fingerprint", "")
    texts = "\n".join(UNRELATED)
    digest = hashlib.sha256(f"{identity}\n{fingerprint}\n{POINTS}\n{texts}".encode()).hexdigest()[:24]
    return (settings.embeddings_onnx_cache_dir or default_cache_dir()) / "floors" / f"{digest}.json"


def load(path: Path, identity: str) -> Calibration | None:
    """The calibration stored at ``path``; ``None`` when there is none, or it is unreadable or another's."""
    try:
        data = json.loads(path.read_text())
        values = tuple(float(x) for x in data["percentiles"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("ignoring an unreadable stored calibration at %s", path)
        return None
    if data.get("model") != identity or len(values) != POINTS or list(values) != sorted(values):
        return None
    return Calibration(identity, values)


def store(path: Path, calibration: Calibration) -> None:
    """Write ``calibration`` to ``path`` atomically; a read-only cache only costs the next process a calibration."""
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps({"model": calibration.model, "percentiles": list(calibration.percentiles)}))
        part.replace(path)
    except OSError as exc:
        log.info("the floors calibration could not be stored at %s: %s", path, exc)


def describe(settings: Settings, calibrated: Settings, model: Calibration | None) -> dict[str, Any]:
    """The trace's account of the floors: configured, in force, and the model they were carried to."""
    return {
        "calibration": bool(settings.semantic_floor_calibration and model is not None),
        "model": model.model if model else None,
        "unrelated_median": model.at(0.5) if model else None,
        "configured": {name: getattr(settings, name) for name in FLOOR_SETTINGS},
        "in_force": {name: getattr(calibrated, name) for name in FLOOR_SETTINGS},
    }
