"""The default reranker's cost on the capped candidates, with a random cross-encoder of the default's shape.

The default local reranker, ``cross-encoder/ms-marco-MiniLM-L-6-v2``, cannot be downloaded offline. A model
of the same architecture with random weights does the same arithmetic on the same number of tokens, so it
costs the same; only its scores are meaningless, which a latency benchmark does not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The architecture of cross-encoder/ms-marco-MiniLM-L-6-v2 (its config.json): a 6-layer, 384-wide BERT
#: with one output logit and the uncased BERT vocabulary (which the bundled MiniLM tokenizer has too).
DEFAULT_SHAPE: dict[str, Any] = {
    "model_type": "bert", "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
    "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
    "max_position_embeddings": 512, "type_vocab_size": 2, "num_labels": 1,
}


def random_cross_encoder(path: Path, shape: dict[str, Any] | None = None) -> Path:
    """Write (once) a randomly initialised cross-encoder of ``shape`` to ``path``, with the bundled tokenizer.

    :param path: the model directory; reused when it already holds a model.
    :param shape: ``BertConfig`` fields (default: :data:`DEFAULT_SHAPE`).
    """
    if (path / "config.json").exists():
        return path
    from ..testing.models import random_cross_encoder as build

    return build(path, shape or DEFAULT_SHAPE, seed=0)  # the same weights every run, so runs compare


def local_reranker(model_dir: Path, settings: Any) -> Any:
    """The default ``local`` reranker plugin, pointed at ``model_dir``; ``None`` when it is not installed."""
    try:
        from hindsight_recall_reranker_local import LocalReranker, LocalSettings
    except ImportError:
        return None
    return LocalReranker(settings, LocalSettings(model=str(model_dir)))
