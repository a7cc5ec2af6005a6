"""Embedding a retain call's texts: each distinct text once, the whole call sorted by length."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from ..errors import RetainError
from ..protocols import EmbeddingProvider

#: texts per call to the embedder (a progress-bar step; the embedder batches within it)
CHUNK = 256


def distinct_by_length(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The distinct texts, longest first, and for each input text the index of its distinct text."""
    unique = sorted(dict.fromkeys(texts), key=len, reverse=True)
    index = {t: i for i, t in enumerate(unique)}
    return unique, np.fromiter((index[t] for t in texts), dtype=np.intp, count=len(texts))


async def embed_passages(embedder: EmbeddingProvider, texts: Sequence[str], progress: bool | None) -> np.ndarray:
    """One float32 vector per text, in input order.

    Sorting the whole call by length, not each chunk handed to the embedder, keeps texts of similar
    length in the same forward pass, so little padding is computed; a text repeated in the call is
    embedded once.

    :param embedder: the engine's embedding provider.
    :param texts: the passages.
    :param progress: show a progress bar (default: when stderr is a terminal).
    """
    from tqdm import tqdm  # late: only retain needs it

    unique, where = distinct_by_length(texts)
    parts: list[np.ndarray] = []
    show = sys.stderr.isatty() if progress is None else progress
    with tqdm(total=len(texts), desc="embedding", unit="memory", disable=not show, file=sys.stderr) as bar:
        for start in range(0, len(unique), CHUNK):
            chunk = unique[start : start + CHUNK]
            vectors = await embedder.embed(chunk, mode="passage")
            if len(vectors) != len(chunk):
                raise RetainError(None, "embeddings",
                                  f"the embedder returned {len(vectors)} vectors for {len(chunk)} texts")
            parts.append(np.asarray(vectors, dtype=np.float32).reshape(len(chunk), -1))
            bar.update(len(chunk))
        bar.update(len(texts) - len(unique))
    if not parts:
        return np.empty((0, 0), dtype=np.float32)
    vectors_in_order: np.ndarray = np.concatenate(parts)[where]
    return vectors_in_order
