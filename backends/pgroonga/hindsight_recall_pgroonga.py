"""PGroonga keyword search: Groonga full text with bigram tokenizing, for any language including CJK."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.textsearch import INDEX, ExtensionBackend, query_terms

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

#: The indexed document. The arm repeats it verbatim: the planner only uses the index for an
#: identical expression, and without the index pgroonga_score silently reads 0.
DOCUMENT = "COALESCE(text, '') || ' ' || COALESCE(context, '') || ' ' || COALESCE(text_signals, '')"


class PgroongaBackend(ExtensionBackend):
    """PGroonga ``&@~`` query over the document expression, ranked by pgroonga_score."""

    name = "pgroonga"
    extensions = ("pgroonga",)
    supports_cjk = True

    def index_statements(self) -> Sequence[str]:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON memory_units USING pgroonga (({DOCUMENT})) "
            "WITH (tokenizer = 'TokenBigram', normalizer = 'NormalizerNFKC150')",
        )

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
