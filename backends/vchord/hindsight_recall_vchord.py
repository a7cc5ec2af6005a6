"""VectorChord BM25 (vchord_bm25 + pg_tokenizer) keyword search: true BM25 over a pg_tokenizer model's tokens."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.settings import plugin_settings
from hindsight_recall.textsearch import INDEX, ExtensionBackend
from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

VARIABLE = "HINDSIGHT_API_TEXT_SEARCH_EXTENSION_VCHORD_TOKENIZER"
#: The default model, chosen on LoCoMo dev and LongMemEval dev (docs/backends.md has the comparison).
DEFAULT_TOKENIZER = "wiki_tocken"
#: pg_tokenizer's built-in models whose vocabulary covers CJK text (wiki_tocken's is English only).
CJK_MODELS = frozenset({"bert_base_uncased", "gemma2b", "llmlingua2"})
#: A model name: a plain identifier, so it can be inlined in SQL and DDL.
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def parse_tokenizer(value: str) -> str:
    """Validate a model name (trimmed, lower-cased); the empty string gives the default.

    :raises ValueError: naming the variable and what a name may hold.
    """
    name = value.strip().lower() or DEFAULT_TOKENIZER
    if not _NAME.match(name):
        raise ValueError(
            f"{VARIABLE}={value!r} is not a pg_tokenizer model name. Use a built-in model "
            "(bert_base_uncased, wiki_tocken; gemma2b and llmlingua2 where the extension was built with them) "
            "or one created with tokenizer_catalog.create_huggingface_model or create_lindera_model: "
            "lower-case letters, digits and underscores, at most 63."
        )
    return name


class VchordSettings(BaseSettings):
    """Settings of the vchord backend (``HINDSIGHT_API_TEXT_SEARCH_EXTENSION_VCHORD_*``)."""

    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_API_TEXT_SEARCH_EXTENSION_VCHORD_", extra="ignore")

    #: The pg_tokenizer model documents and queries go through.
    tokenizer: str = DEFAULT_TOKENIZER

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: str) -> str:
        return parse_tokenizer(value)


class VchordBackend(ExtensionBackend):
    """VectorChord-BM25 ranking over a pg_tokenizer model's tokens (bm25vector column, bm25 index)."""

    name = "vchord"
    extensions = ("pg_tokenizer", "vchord_bm25")
    # The bm25 index is on the column itself, filled with each document's tokens.
    writes_search_vector = True

    def __init__(self, settings: Settings | None = None, config: VchordSettings | None = None) -> None:
        """Read the options; nothing touches the database here.

        :param settings: core settings (the engine's schema).
        :param config: this backend's settings; when omitted, ``settings.plugins["text_search"]["vchord"]``
            and then the ``HINDSIGHT_API_TEXT_SEARCH_EXTENSION_VCHORD_*`` variables.
        """
        super().__init__(settings)
        self.config = config if config is not None else (
            plugin_settings(VchordSettings, self.name, settings, kind="text_search")
        )
        #: The tokenizer is named after its model: one per model, shared by every engine on the database.
        self.tokenizer = self.config.tokenizer
        self.supports_cjk = self.tokenizer in CJK_MODELS
        # Settings validate the schema as a plain identifier, so it can be inlined.
        self.schema = settings.database_schema if settings else "public"

    def install_statements(self) -> Sequence[str]:
        # create_tokenizer fails on an existing name, so the migration checks the catalog first.
        create_tokenizer = f"""DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tokenizer_catalog.tokenizer WHERE name = '{self.tokenizer}') THEN
        PERFORM tokenizer_catalog.create_tokenizer('{self.tokenizer}', $config$model = "{self.tokenizer}"$config$);
    END IF;
END
$$"""
        return (*(f"CREATE EXTENSION IF NOT EXISTS {ext} CASCADE" for ext in self.extensions), create_tokenizer)

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
        return f"tokenizer_catalog.tokenize({document_sql}, '{self.tokenizer}')::bm25_catalog.bm25vector"

    def score_sql(self) -> str:
        """The BM25 score of a row (higher is better); ``<&>`` yields it negated.

        Every vchord_bm25 release creates ``<&>`` in ``pg_catalog`` (not ``bm25_catalog``), which
        every search path reaches.
        """
        return (
            "-(search_vector OPERATOR(pg_catalog.<&>) bm25_catalog.to_bm25query("
            f"'{INDEX}', tokenizer_catalog.tokenize(:query_text, '{self.tokenizer}')))"
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
