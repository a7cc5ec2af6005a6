"""A question's embedding, remembered: agents ask the same questions again, in every bank.

The vector depends only on the text and the server's embedder, never on the bank, so one cache of the
last ``EMBEDDINGS_QUERY_CACHE_SIZE`` questions serves all banks. A vector is kept as an array of the
floats the embedder gave (3 KB for 384 dimensions), so a question answered from the cache is answered
exactly as the first time.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..protocols import EmbeddingProvider


class QueryVectors:
    """The embeddings of the last ``size`` distinct questions (none kept when ``size`` is 0)."""

    def __init__(self, embedder: EmbeddingProvider, size: int) -> None:
        self.embedder, self.size = embedder, size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.hits = self.misses = 0

    async def vector(self, text: str) -> list[float]:
        """The embedding of ``text`` as a question: from the cache, or from the embedder (and then kept)."""
        kept = self._vectors.get(text)
        if kept is not None:
            self._vectors.move_to_end(text)
            self.hits += 1
            return kept.tolist()  # type: ignore[no-any-return]
        self.misses += 1
        (vector,) = await self.embedder.embed([text], mode="query")
        if self.size:
            # two concurrent misses of one text both embed it; the second store is the same vector
            self._vectors[text] = np.asarray(vector, dtype=np.float64)
            self._vectors.move_to_end(text)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return list(vector)
