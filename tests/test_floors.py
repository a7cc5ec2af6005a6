"""Similarity floors carried from the bundled model's scale to the configured model's."""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hindsight_recall.embeddings import LocalEmbeddings
from hindsight_recall.recall.floors import (
    FLOOR_SETTINGS,
    REFERENCE,
    Calibration,
    Calibrations,
    calibrate,
    calibrated_settings,
    carry,
    load,
    model_identity,
    percentiles,
    same_scale,
    stored_path,
    unrelated_similarities,
)
from hindsight_recall.settings import Settings

#: a model whose unrelated texts sit 0.4 higher than the bundled model's (as bge-like models do)
SHIFTED = Calibration("shifted", tuple(min(1.0, p + 0.4) for p in REFERENCE.percentiles))


class Offset:
    """A fake embedder: a unit vector per text plus a component every text shares, which raises
    the similarity of unrelated texts (the anisotropy of many real models)."""

    name = "offset"

    def __init__(self, shared: float) -> None:
        self.shared, self.model_name = shared, f"offset-{shared}"
        self.calls = 0

    def dimensions(self) -> int:
        return 64

    async def embed(self, texts: Sequence[str], *, mode: str) -> list[list[float]]:
        self.calls += 1
        out = []
        for t in texts:
            v = [0.0] * 64
            v[zlib.crc32(t.encode()) % 63] = 1.0  # not hash(): the same slots in every process
            v[63] = self.shared
            out.append(v)
        return out


async def test_reference_is_the_bundled_models_calibration(make_settings: Callable[..., Settings]) -> None:
    measured = await calibrate(LocalEmbeddings(make_settings()), "bundled")
    assert same_scale(measured, REFERENCE)
    # the default floors keep what they always kept with the bundled model
    assert calibrated_settings(make_settings(), REFERENCE, measured) == make_settings()


def test_rank_and_at_are_inverse() -> None:
    for floor in (-0.05, 0.0, 0.1, 0.2, 0.3):
        assert REFERENCE.at(REFERENCE.rank(floor)) == pytest.approx(floor, abs=1e-6)
    assert REFERENCE.rank(-0.9) == 0.0 and REFERENCE.rank(0.9) == 1.0
    assert REFERENCE.rank(0.3) == pytest.approx(0.984, abs=0.002)


def test_carry_keeps_rank_among_unrelated_pairs() -> None:
    assert carry(0.3, REFERENCE, REFERENCE) == pytest.approx(0.3)
    assert carry(0.3, REFERENCE, SHIFTED) == pytest.approx(0.7, abs=1e-6)
    assert carry(0.1, REFERENCE, SHIFTED) == pytest.approx(0.5, abs=1e-6)
    # past the noisiest pair the share of the way to 1 is kept: still monotonic, and 1 stays 1
    top = REFERENCE.percentiles[-1]
    assert carry(1.0, REFERENCE, SHIFTED) == pytest.approx(1.0)
    assert SHIFTED.percentiles[-1] < carry(0.7, REFERENCE, SHIFTED) < 1.0
    assert carry(top + 0.01, REFERENCE, SHIFTED) < carry(0.7, REFERENCE, SHIFTED)
    # below the least similar pair, towards -1
    assert carry(-1.0, REFERENCE, SHIFTED) == pytest.approx(-1.0)
    floors = [carry(f / 20, REFERENCE, SHIFTED) for f in range(-20, 21)]
    assert floors == sorted(floors)


def test_calibrated_settings_move_every_cosine_floor(make_settings: Callable[..., Settings]) -> None:
    s = make_settings()
    moved = calibrated_settings(s, REFERENCE, SHIFTED)
    assert moved.semantic_min_similarity == pytest.approx(0.7, abs=1e-5)
    assert moved.graph_seed_min_similarity == pytest.approx(0.7, abs=1e-5)
    assert moved.temporal_semantic_min_similarity == pytest.approx(0.5, abs=1e-5)
    assert moved.semantic_link_min_similarity == s.semantic_link_min_similarity  # a retain setting
    assert calibrated_settings(s, REFERENCE, None) is s
    off = make_settings(semantic_floor_calibration=False)
    assert calibrated_settings(off, REFERENCE, SHIFTED) is off
    assert set(FLOOR_SETTINGS) <= set(Settings.model_fields)


async def test_a_model_that_finds_everything_similar_gets_higher_floors(make_settings: Callable[..., Settings]) -> None:
    embedder = Offset(shared=1.0)  # unrelated texts: cosine 0.5
    calibration = await calibrate(embedder, "offset")
    assert calibration.at(0.5) == pytest.approx(0.5, abs=1e-6)
    moved = calibrated_settings(make_settings(), REFERENCE, calibration)
    assert moved.semantic_min_similarity > 0.5


async def test_calibrations_are_kept_per_model(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    s = make_settings(embeddings_onnx_cache_dir=tmp_path)
    kept = Calibrations()
    embedder = Offset(shared=0.5)
    first = await kept.get(embedder, s)
    assert await kept.get(embedder, s) is first
    assert embedder.calls == 2  # queries and passages, once
    other = await kept.get(Offset(shared=2.0), s)
    assert other.model != first.model and other.at(0.5) > first.at(0.5)


async def test_a_calibration_is_stored_once_and_read_by_a_new_process(make_settings: Callable[..., Settings],
                                                                      tmp_path: Path) -> None:
    s = make_settings(embeddings_onnx_cache_dir=tmp_path)
    first = await Calibrations().get(Offset(shared=0.5), s)
    (stored,) = (tmp_path / "floors").glob("*.json")
    assert json.loads(stored.read_text())["model"] == first.model
    again = Offset(shared=0.5)
    assert await Calibrations().get(again, s) == first and again.calls == 0  # read, not embedded
    assert not list((tmp_path / "floors").glob("*.part"))


async def test_a_stored_calibration_is_not_another_models(make_settings: Callable[..., Settings],
                                                          tmp_path: Path) -> None:
    s = make_settings(embeddings_onnx_cache_dir=tmp_path)
    await Calibrations().get(Offset(shared=0.5), s)
    other = Offset(shared=0.5)
    other.fingerprint = "onnx-int8:new-weights"  # type: ignore[attr-defined]  # same name, other weights
    await Calibrations().get(other, s)
    assert other.calls == 2 and len(list((tmp_path / "floors").glob("*.json"))) == 2
    # a file that names another model (a hash collision, a hand edit) is not used either
    prefixed = make_settings(embeddings_onnx_cache_dir=tmp_path, embeddings_query_prefix="q: ")
    path = stored_path(Offset(shared=0.5), model_identity(Offset(shared=0.5), prefixed), prefixed)
    path.write_text(json.dumps({"model": "someone else", "percentiles": list(REFERENCE.percentiles)}))
    assert load(path, model_identity(Offset(shared=0.5), prefixed)) is None


@pytest.mark.parametrize("content", ["not json", '{"model": "x"}', '{"percentiles": [1, 0]}', "[]"])
async def test_an_unreadable_stored_calibration_is_computed_again(make_settings: Callable[..., Settings],
                                                                  tmp_path: Path, content: str) -> None:
    s = make_settings(embeddings_onnx_cache_dir=tmp_path)
    first = await Calibrations().get(Offset(shared=0.5), s)
    (stored,) = (tmp_path / "floors").glob("*.json")
    stored.write_text(content)
    again = Offset(shared=0.5)
    assert (await Calibrations().get(again, s)).percentiles == first.percentiles and again.calls == 2
    assert load(stored, first.model) == first  # written again, whole


async def test_a_cache_that_cannot_be_written_still_calibrates(make_settings: Callable[..., Settings],
                                                               tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # its "floors" folder cannot be made
    calibration = await Calibrations().get(Offset(shared=0.5), make_settings(embeddings_onnx_cache_dir=blocked))
    assert len(calibration.percentiles) == len(REFERENCE.percentiles)


def test_model_identity_names_provider_model_and_prefixes(make_settings: Callable[..., Settings]) -> None:
    a = model_identity(Offset(0.5), make_settings())
    b = model_identity(Offset(0.5), make_settings(embeddings_query_prefix="query: "))
    assert a.startswith("offset:offset-0.5:") and a != b


def test_percentiles_and_similarities() -> None:
    assert percentiles([3.0, 1.0, 2.0], points=3) == (1.0, 2.0, 3.0)
    assert percentiles([0.0, 1.0], points=5) == (0.0, 0.25, 0.5, 0.75, 1.0)
    sims = unrelated_similarities([[1, 0], [0, 1], [0, 0]], [[1, 0], [1, 1], [0, 2]])
    # pairs (i, j) with i != j; a zero vector is similar to nothing
    assert sims == pytest.approx([1 / math.sqrt(2), 0.0, 0.0, 1.0, 0.0, 0.0])


async def test_a_model_that_cannot_be_calibrated_keeps_the_floors(engine: Any, bank: str) -> None:
    """An embedder that fails on the calibration texts leaves the floors as configured."""
    from hindsight_recall.recall import pipeline

    class Failing:
        name = "failing"

        async def embed(self, texts: Sequence[str], *, mode: str) -> list[list[float]]:
            raise RuntimeError("no")

    class Host:
        settings = engine.settings
        embedder = Failing()

    assert await pipeline._calibration(Host()) is None  # type: ignore[arg-type]
