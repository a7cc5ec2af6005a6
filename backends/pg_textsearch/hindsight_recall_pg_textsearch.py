"""Timescale pg_textsearch keyword search: BM25 over ``memory_units.text`` (PostgreSQL 17+, English)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.protocols import KeywordQuery
from hindsight_recall.textsearch import INDEX, ExtensionBackend, query_terms

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

#: The text search configuration the index tokenizes and stems with.
TEXT_CONFIG = "english"
# The ORDER BY expression must be exactly the index's operator form for the index to drive it.
_DISTANCE = f"text <@> to_bm25query(:query_text, '{INDEX}')"


class PgTextsearchBackend(ExtensionBackend):
    """pg_textsearch BM25 on the ``text`` column; the index orders, an outer query gates."""

    name = "pg_textsearch"
    # The library must also be in shared_preload_libraries; that is server configuration.
    extensions = ("pg_textsearch",)

    def index_statements(self) -> Sequence[str]:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} "
            f"ON memory_units USING bm25 (text) WITH (text_config = '{TEXT_CONFIG}')",
        )

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: AsyncConnection) -> KeywordQuery | None:
        # Each distinct word once: to_bm25query counts a repeated word once per occurrence, so
        # "solar solar solar panel" would outweigh every other term. The index's English parser
        # still tokenizes and stems the words.
        terms = query_terms(tokens, bigrams=False)
        return KeywordQuery(" ".join(terms), tuple(terms)) if terms else None

    def arm_sql(self, *, columns: str, where: str) -> str:
        # <@> is a distance (the negated BM25 score). A gate next to the ORDER BY ... LIMIT can keep
        # the index from driving it, so an outer query gates the top rows instead; rows
        # that match nothing score 0 and fail the gate.
        return (
            f"(SELECT * FROM (SELECT {columns}, -({_DISTANCE}) AS bm25_score FROM memory_units "
            f"WHERE {where} ORDER BY {_DISTANCE} LIMIT :limit) AS pg_textsearch_hits "
            f"WHERE bm25_score > :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register: Any) -> None:
    register(PgTextsearchBackend)
