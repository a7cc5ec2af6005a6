"""PGroonga keyword search: Groonga full text with bigram tokenizing, for any language including CJK."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings
    from sqlalchemy.ext.asyncio import AsyncConnection

INDEX = "idx_memory_units_text_search"

#: The indexed document. The arm repeats it verbatim: the planner only uses the index for an
#: identical expression, and without the index pgroonga_score silently reads 0.
DOCUMENT = "COALESCE(text, '') || ' ' || COALESCE(context, '') || ' ' || COALESCE(text_signals, '')"

# Han, Kana and Hangul: scripts written without spaces between words.
_CJK_RUN = re.compile(
    "[\u1100-\u11ff\u3005\u3007\u3041-\u309f\u30a0-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\uffa0-\uffdc"
    "\U00020000-\U000323af]+"
)


def query_terms(tokens: Sequence[str]) -> list[str]:
    """Distinct search terms, in order: word pieces of the tokens, CJK runs as overlapping bigrams.

    This mirrors what TokenBigram does to the indexed text, so a CJK query matches a document that
    shares some of its bigrams instead of having to contain the whole run.

    :param tokens: the lower-cased word tokens of the query.
    """
    terms: list[str] = []
    for token in tokens:
        cleaned = "".join(ch if ch == "_" or unicodedata.category(ch)[0] in "LMN" else " " for ch in token)
        for piece in cleaned.lower().split():
            position = 0
            for run in _CJK_RUN.finditer(piece):
                terms.append(piece[position : run.start()])
                chars = run.group()
                terms.extend([chars] if len(chars) < 2 else [chars[i : i + 2] for i in range(len(chars) - 1)])
                position = run.end()
            terms.append(piece[position:])
    return list(dict.fromkeys(t for t in terms if t))


class PgroongaBackend:
    """PGroonga ``&@~`` query over the document expression, ranked by pgroonga_score."""

    name = "pgroonga"
    citus_compatible = False
    supports_cjk = True

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def install_statements(self) -> Sequence[str]:
        return ("CREATE EXTENSION IF NOT EXISTS pgroonga",)

    def session_statements(self) -> Sequence[str]:
        return ()

    def column_type(self) -> str:
        # A dummy: the index is on an expression over the base columns.
        return "text"

    def index_statements(self) -> Sequence[str]:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON memory_units USING pgroonga (({DOCUMENT})) "
            "WITH (tokenizer = 'TokenBigram', normalizer = 'NormalizerNFKC150')",
        )

    def prepare_document(self, document: str) -> str:
        return document

    def write_expression(self, document_sql: str) -> str:
        return "NULL::text"

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: AsyncConnection) -> str | None:
        terms = query_terms(tokens)
        if not terms:
            return None
        # Terms are lower case, so none of them is the query-syntax keyword OR; the SQL still
        # escapes the whole text with pgroonga_query_escape.
        return " OR ".join(terms)

    def arm_sql(self, *, columns: str, where: str) -> str:
        # The outer query gates the top rows: pgroonga_score has a value only in the scan's result.
        return (
            f"(SELECT * FROM (SELECT {columns}, pgroonga_score(tableoid, ctid) AS bm25_score "
            f"FROM memory_units WHERE {where} AND ({DOCUMENT}) &@~ pgroonga_query_escape(:query_text) "
            f"ORDER BY bm25_score DESC, id LIMIT :limit) AS pgroonga_hits "
            f"WHERE bm25_score >= :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register: Any) -> None:
    register(PgroongaBackend)
