"""Splitting long content into chunks one extraction call can read whole.

A model asked for every fact of a long text drops some and may run out of reply tokens, so content
longer than ``RETAIN_CHUNK_SIZE`` characters is cut where the text itself breaks: between
paragraphs first, then lines, sentences, clauses and words, and only as a last resort in the middle
of a word. Nothing is lost or repeated: the chunks, joined, give back the content (less any chunk of
blank space, which holds no fact).
"""

from __future__ import annotations

#: where to cut, most natural first; a piece still too long is cut at the next one
SEPARATORS = ("\n\n", "\n", ". ", "! ", "? ", "; ", ", ", " ")


def chunk_text(text: str, size: int) -> list[str]:
    """``text`` in chunks of at most ``size`` characters, in order; short text is one chunk.

    :param text: the item's content.
    :param size: the most characters of a chunk (``RETAIN_CHUNK_SIZE``).
    """
    if size < 1:
        raise ValueError(f"a chunk size must be at least 1, got {size}")
    return [chunk for chunk in _split(text, size, 0) if chunk.strip()]


def _split(text: str, size: int, level: int) -> list[str]:
    if len(text) <= size:
        return [text]
    if level == len(SEPARATORS):
        return [text[start:start + size] for start in range(0, len(text), size)]
    pieces = _pieces(text, SEPARATORS[level])
    if len(pieces) == 1:
        return _split(text, size, level + 1)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if len(piece) > size:
            chunks += [current] if current else []
            chunks += _split(piece, size, level + 1)
            current = ""
        elif len(current) + len(piece) > size:
            chunks.append(current)
            current = piece
        else:
            current += piece
    return chunks + ([current] if current else [])


def _pieces(text: str, separator: str) -> list[str]:
    """``text`` cut after each ``separator``, which stays with the piece before it."""
    parts = text.split(separator)
    pieces = [part + separator for part in parts[:-1]]
    return pieces + ([parts[-1]] if parts[-1] else [])
