"""What text-search backends share: the index name, query terms, CJK bigrams and protocol defaults."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .protocols import KeywordQuery

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from .protocols import TextSearchBackend
    from .settings import Settings

#: Every backend's index has this name.
INDEX = "idx_memory_units_text_search"

# Han (with iteration marks and compatibility ideographs), Kana and Hangul. These scripts do not
# separate words with spaces, so word-based tokenizers would see a whole sentence as one word.
CJK_RUN = re.compile(
    "["
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005\u3007"  # ideographic iteration mark, ideographic zero
    "\u3041-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended A
    "\uac00-\ud7af"  # Hangul syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo extended B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # halfwidth Katakana
    "\uffa0-\uffdc"  # halfwidth Hangul
    "\U00020000-\U000323af"  # CJK extensions B-H
    "]+"
)


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping bigrams of a run of CJK characters; a single character stays as it is.

    :param run: characters that all match :data:`CJK_RUN`.
    """
    if len(run) < 2:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def bigram_cjk_runs(text: str) -> str:
    """Replace every CJK run in ``text`` by its space-separated bigrams, set apart by spaces.

    :param text: any text.
    """
    return CJK_RUN.sub(lambda m: " " + " ".join(cjk_bigrams(m.group())) + " ", text)


def query_terms(tokens: Sequence[str], *, bigrams: bool = True) -> list[str]:
    """Distinct search terms of the query tokens, in order.

    Anything that is not a letter, mark, digit or underscore splits a token, so no term can carry
    query syntax (quotes, operators, NUL) even if a caller passes raw text.

    :param tokens: the lower-cased word tokens of the query.
    :param bigrams: turn CJK runs into overlapping bigrams, to meet bigram-indexed documents.
    """
    terms: list[str] = []
    for token in tokens:
        cleaned = "".join(ch if ch == "_" or unicodedata.category(ch)[0] in "LMN" else " " for ch in token)
        cleaned = cleaned.lower()
        terms.extend((bigram_cjk_runs(cleaned) if bigrams else cleaned).split())
    return list(dict.fromkeys(terms))


def raw_query_text(query: str, tokens: Sequence[str]) -> str | None:
    """The raw query for backends that tokenize it themselves; ``None`` when it has no word.

    :param query: the normalised query string.
    :param tokens: its lower-cased word tokens.
    """
    if not any(token.strip() for token in tokens):
        return None
    # PostgreSQL text cannot hold NUL; everything else is data in a bound parameter.
    text = query.replace("\x00", " ").strip()
    return text or None


def keyword_query(prepared: KeywordQuery | str | None) -> KeywordQuery | None:
    """What ``prepare_query`` returned, as a :class:`KeywordQuery` (a plain string is its text).

    :param prepared: the backend's answer.
    """
    return KeywordQuery(prepared) if isinstance(prepared, str) else prepared


#: Parameter names core binds next to a backend's SQL (tag filters add ``filter_*``).
CORE_PARAMETERS = frozenset({
    "bank_id", "query_text", "query_terms", "fact_types", "min_score", "limit", "per_type",
    "length_b", "length_mean",
})


def length_pivot(length_sql: str) -> str:
    """SQL: what a backend that applies the bank's length prior (``length_prior``) divides a memory's
    score by, ``1 − b + b × length / mean`` with ``b`` and the bank's mean length bound by core
    (:mod:`hindsight_recall.recall.length_prior`); 1 when ``b`` is 0.

    :param length_sql: the memory's length, as the statistics count it (``length(search_vector)``).
    """
    b = "CAST(:length_b AS float8)"
    return f"(1 - {b} + {b} * {length_sql} / CAST(:length_mean AS float8))"


def backend_parameters(backend: TextSearchBackend) -> dict[str, Any]:
    """The backend's own bound parameters, checked to be named apart from core's.

    :param backend: the selected text-search backend.
    :raises ConfigError: for a name core binds itself, or one that is not an identifier.
    """
    params = dict(backend.parameters())
    wrong = sorted(name for name in params
                   if name in CORE_PARAMETERS or name.startswith("filter_") or not name.isidentifier())
    if wrong:
        raise ConfigError(
            f"text-search backend {backend.name!r}: parameter {wrong[0]!r} collides with core's parameters "
            f"({', '.join(sorted(CORE_PARAMETERS))}, filter_*) or is not an identifier; name it "
            f"{backend.name}_<option>"
        )
    return params


class ExtensionBackend:
    """Defaults for a backend whose index lives on base columns behind a dummy ``search_vector``.

    Subclasses set ``name``, ``extensions`` and the capability flags, and write ``index_statements``
    and ``arm_sql``; they override the rest where their extension differs.
    """

    name: str = ""
    #: Extensions ``install_statements`` creates, in order.
    extensions: tuple[str, ...] = ()
    citus_compatible: bool = False
    supports_cjk: bool = False
    #: ``write_expression`` fills ``search_vector``; false while the index covers base columns.
    writes_search_vector: bool = False
    #: The embedded server (PostgreSQL, pgvector, contrib) can host it; the extension says it cannot.
    runs_on_embedded_server: bool = False
    #: The arm SQL keeps a top-k per fact type rather than scoring every match.
    ranks_every_match: bool = False
    #: Extension backends rank with the extension's own statistics, not core's term counts.
    keeps_term_stats: bool = False
    #: ... and normalise lengths their own way, if at all (docs/backends.md says how each does).
    length_prior: bool = False

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings

    def install_statements(self) -> Sequence[str]:
        return tuple(f"CREATE EXTENSION IF NOT EXISTS {ext}" for ext in self.extensions)

    def parameters(self) -> dict[str, Any]:
        return {}

    def session_statements(self) -> Sequence[str]:
        return ()

    def column_type(self) -> str:
        # A dummy column: the index covers memory_units' own columns.
        return "text"

    def prepare_document(self, document: str) -> str:
        return document

    def write_expression(self, document_sql: str) -> str:
        return "NULL::text"

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: AsyncConnection) -> KeywordQuery | None:
        text = raw_query_text(query, tokens)
        return None if text is None else KeywordQuery(text, tuple(query_terms(tokens, bigrams=False)))
