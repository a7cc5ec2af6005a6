"""Timescale pg_textsearch keyword search: BM25 over ``memory_units.text`` (PostgreSQL 17+, English)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings
    from sqlalchemy.ext.asyncio import AsyncConnection

INDEX = "idx_memory_units_text_search"
#: The text search configuration the index tokenizes and stems with.
TEXT_CONFIG = "english"
# The ORDER BY expression must be exactly the index's operator form for the index to drive it.
_DISTANCE = f"text <@> to_bm25query(:query_text, '{INDEX}')"


def query_text(query: str, tokens: Sequence[str]) -> str | None:
    """The raw query for to_bm25query, or ``None`` when it has no word to search for.

    :param query: the normalised query string.
    :param tokens: its lower-cased word tokens.
    """
    if not any(token.strip() for token in tokens):
        return None
    # PostgreSQL text cannot hold NUL; everything else is data in a bound parameter.
    text = query.replace("\x00", " ").strip()
    return text or None


class PgTextsearchBackend:
    """pg_textsearch BM25 on the ``text`` column; the index orders, an outer query gates."""

    name = "pg_textsearch"
    citus_compatible = False
    supports_cjk = False

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def install_statements(self) -> Sequence[str]:
        # The library must also be in shared_preload_libraries; that is server configuration.
        return ("CREATE EXTENSION IF NOT EXISTS pg_textsearch",)

    def session_statements(self) -> Sequence[str]:
        return ()

    def column_type(self) -> str:
        # A dummy: the bm25 index is on the base column memory_units.text.
        return "text"

    def index_statements(self) -> Sequence[str]:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} "
            f"ON memory_units USING bm25 (text) WITH (text_config = '{TEXT_CONFIG}')",
        )

    def prepare_document(self, document: str) -> str:
        return document

    def write_expression(self, document_sql: str) -> str:
        return "NULL::text"

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: AsyncConnection) -> str | None:
        return query_text(query, tokens)

    def arm_sql(self, *, columns: str, where: str) -> str:
        # <@> is a distance (the negated BM25 score). A gate next to the ORDER BY ... LIMIT can keep
        # the index from driving it (SPEC §6.2), so an outer query gates the top rows instead; rows
        # that match nothing score 0 and fail the gate.
        return (
            f"(SELECT * FROM (SELECT {columns}, -({_DISTANCE}) AS bm25_score FROM memory_units "
            f"WHERE {where} ORDER BY {_DISTANCE} LIMIT :limit) AS pg_textsearch_hits "
            f"WHERE bm25_score > :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register: Any) -> None:
    register(PgTextsearchBackend)
