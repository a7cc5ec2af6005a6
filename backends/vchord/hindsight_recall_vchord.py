"""VectorChord BM25 (vchord_bm25 + pg_tokenizer) keyword search: true BM25, multilingual tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.textsearch import INDEX, ExtensionBackend

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

#: The pg_tokenizer tokenizer (and pre-trained model) both the documents and the queries go through.
TOKENIZER = "llmlingua2"

# create_tokenizer fails on an existing name, so the migration checks the catalog first.
_CREATE_TOKENIZER = f"""DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tokenizer_catalog.tokenizer WHERE name = '{TOKENIZER}') THEN
        PERFORM tokenizer_catalog.create_tokenizer('{TOKENIZER}', $config$model = "{TOKENIZER}"$config$);
    END IF;
END
$$"""


class VchordBackend(ExtensionBackend):
    """VectorChord-BM25 ranking over llmlingua2 tokens (bm25vector column, bm25 index)."""

    name = "vchord"
    supports_cjk = True
    # The bm25 index is on the column itself, filled with each document's tokens.
    writes_search_vector = True

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__(settings)
        # Settings validate the schema as a plain identifier, so it can be inlined.
        self.schema = settings.database_schema if settings else "public"

    def install_statements(self) -> Sequence[str]:
        return (
            "CREATE EXTENSION IF NOT EXISTS pg_tokenizer CASCADE",
            "CREATE EXTENSION IF NOT EXISTS vchord_bm25 CASCADE",
            _CREATE_TOKENIZER,
        )

    def session_statements(self) -> Sequence[str]:
        # This replaces the search_path core sets, so the engine's own schema stays on it.
        schemas = ['"$user"', *([self.schema] if self.schema != "public" else []), "public"]
        return (f"SET search_path TO {', '.join(schemas)}, bm25_catalog, tokenizer_catalog",)

    def column_type(self) -> str:
        return "bm25_catalog.bm25vector"

    def index_statements(self) -> Sequence[str]:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} "
            "ON memory_units USING bm25 (search_vector bm25_catalog.bm25_ops)",
        )

    def write_expression(self, document_sql: str) -> str:
        return f"tokenizer_catalog.tokenize({document_sql}, '{TOKENIZER}')::bm25_catalog.bm25vector"

    def score_sql(self) -> str:
        """The BM25 score of a row (higher is better); ``<&>`` yields it negated."""
        return (
            "-(search_vector OPERATOR(bm25_catalog.<&>) bm25_catalog.to_bm25query("
            f"'{INDEX}', tokenizer_catalog.tokenize(:query_text, '{TOKENIZER}')))"
        )

    def arm_sql(self, *, columns: str, where: str) -> str:
        score = self.score_sql()
        # The operator scores every row (0 when nothing matches), so the gate is the match predicate.
        # Ordering by the negated score keeps the bm25 index out of the scan: an index scan returns
        # only bm25_catalog.bm25_limit rows over all banks before the bank filter applies.
        return (
            f"(SELECT {columns}, {score} AS bm25_score FROM memory_units "
            f"WHERE {where} AND {score} > :min_score "
            f"ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register: Any) -> None:
    register(VchordBackend)
