"""The torch-free model path: safetensors read with numpy, BERT graphs written with onnx's helpers."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hindsight_recall import _bert_graph, _onnx, _safetensors
from hindsight_recall.errors import ConfigError
from hindsight_recall.testing.models import TINY_SHAPE, build_tiny_cross_encoder


def test_safetensors_round_trip(tmp_path: Path) -> None:
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64),
               "c": np.array([0.5], np.float16), "empty": np.zeros((0, 4), np.float32)}
    _safetensors.write(tmp_path / "t.safetensors", tensors)
    back = _safetensors.read(tmp_path / "t.safetensors")
    assert back.keys() == tensors.keys()
    for name, array in tensors.items():
        assert back[name].dtype == array.dtype and np.array_equal(back[name], array)


def test_bf16_is_read_as_float32(tmp_path: Path) -> None:
    values = np.array([1.0, -2.5, 3.140625], np.float32)  # exact in bfloat16
    raw = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, len(raw)]}}).encode()
    (tmp_path / "bf16.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + raw)
    read = _safetensors.read(tmp_path / "bf16.safetensors")["w"]
    assert read.dtype == np.float32 and np.array_equal(read, values)


@pytest.mark.parametrize("content", [b"\xff" * 16, b"\x08\x00\x00\x00\x00\x00\x00\x00{}"])
def test_a_file_that_is_not_safetensors_is_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad").write_bytes(content)
    with pytest.raises(ValueError):
        _safetensors.read(tmp_path / "bad")


def test_an_unknown_dtype_is_refused(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}).encode()
    (tmp_path / "f8").write_bytes(len(header).to_bytes(8, "little") + header + b"\x00")
    with pytest.raises(ValueError, match="F8_E4M3"):
        _safetensors.read(tmp_path / "f8")


@pytest.mark.parametrize("change", [{"model_type": "roberta"}, {"hidden_act": "relu"},
                                    {"position_embedding_type": "relative_key"}])
def test_only_bert_with_gelu_and_absolute_positions_is_built(tmp_path: Path, change: dict[str, str]) -> None:
    model = build_tiny_cross_encoder(tmp_path / "ce")
    config = {**json.loads((model / "config.json").read_text()), **change}
    with pytest.raises(_bert_graph.UnsupportedModel):
        _bert_graph.build(_safetensors.read(model / "model.safetensors"), config, "classify")


def test_missing_weights_are_named(tmp_path: Path) -> None:
    model = build_tiny_cross_encoder(tmp_path / "ce")
    weights = _safetensors.read(model / "model.safetensors")
    del weights["bert.encoder.layer.1.output.dense.weight"]
    with pytest.raises(_bert_graph.UnsupportedModel, match="encoder.layer.1.output.dense.weight"):
        _bert_graph.build(weights, json.loads((model / "config.json").read_text()), "classify")
    # the builder's error reaches a user as a ConfigError naming the model
    _safetensors.write(model / "model.safetensors", weights)
    with pytest.raises(ConfigError, match="cannot be built as an ONNX graph"):
        _onnx.built(str(model), tmp_path / "cache", "classify")


def test_the_classifier_graph_gives_one_logit_per_pair(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    model = build_tiny_cross_encoder(tmp_path / "ce")
    session = _onnx.inference_session(_onnx.built(str(model), tmp_path / "cache", "classify"))
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_padding()
    names = {i.name for i in session.get_inputs()}
    pairs = [("a question", "a passage"), ("q", "another, longer passage about the lake")]
    together = session.run(None, _onnx.padded(tokenizer.encode_batch(pairs), names))[0]
    assert together.shape == (2, TINY_SHAPE["num_labels"])
    alone = [session.run(None, _onnx.padded([tokenizer.encode(*p)], names))[0][0] for p in pairs]
    assert np.allclose(together, alone, atol=1e-5)  # padding changes no score
    assert together[0, 0] != pytest.approx(together[1, 0])


def test_graphs_are_cached_per_head_and_weights_by_content(tmp_path: Path) -> None:
    model = build_tiny_cross_encoder(tmp_path / "ce")
    classify = _onnx.built(str(model), tmp_path / "cache", "classify")
    mean = _onnx.built(str(model), tmp_path / "cache", "mean")
    assert classify != mean and classify.parent.name.startswith("ce-")
    stamp = classify.stat().st_mtime_ns
    assert _onnx.built(str(model), tmp_path / "cache", "classify") == classify
    assert classify.stat().st_mtime_ns == stamp
    weights = model / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert _onnx.built(str(model), tmp_path / "cache", "classify") == classify  # touched, same graph
    copy = tmp_path / "elsewhere" / "ce"
    shutil.copytree(model, copy)
    assert _onnx.built(str(copy), tmp_path / "cache", "classify") == classify  # installed elsewhere, same graph
    build_tiny_cross_encoder(copy, seed=1)
    assert _onnx.built(str(copy), tmp_path / "cache", "classify") != classify  # new weights, new graph
    assert not list((tmp_path / "cache").glob("*/*.part"))
