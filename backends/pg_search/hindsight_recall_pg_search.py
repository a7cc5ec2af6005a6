"""ParadeDB pg_search keyword search: Tantivy BM25 over text, context and signals (Citus-compatible)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.protocols import KeywordQuery
from hindsight_recall.settings import plugin_settings
from hindsight_recall.textsearch import INDEX, ExtensionBackend
from hindsight_recall.textsearch import query_terms as word_terms
from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings
    from sqlalchemy.ext.asyncio import AsyncConnection

VARIABLE = "HINDSIGHT_API_TEXT_SEARCH_EXTENSION_PG_SEARCH_TOKENIZER"
STEMMER_VARIABLE = "HINDSIGHT_API_TEXT_SEARCH_EXTENSION_PG_SEARCH_STEMMER"
#: The stemmers ParadeDB's tokenizers take (``stemmer=<language>``).
STEMMERS = ("arabic", "danish", "dutch", "english", "finnish", "french", "german", "greek", "hungarian", "italian",
            "norwegian", "polish", "portuguese", "romanian", "russian", "spanish", "swedish", "tamil", "turkish")
#: Tokenizers that keep a field whole: nothing to stem.
_WHOLE = frozenset({"literal", "literal_normalized"})
#: ParadeDB's default tokenizer, named where a stemmer must be added to it.
DEFAULT_TOKENIZER = "unicode_words"
#: The indexed text fields; each gets one match query in the arm.
FIELDS = ("text", "context", "text_signals")
#: The columns the arm filters on, indexed as single tokens.
FILTERS = ("(bank_id::pdb.literal)", "(fact_type::pdb.literal)")

_NAMED = (
    "unicode_words", "simple", "whitespace", "literal", "literal_normalized",
    "chinese_compatible", "icu", "jieba", "source_code",
)
_LANGUAGES = "chinese|japanese|korean"
_LINDERA = re.compile(
    rf"^(?:lindera\s*\(\s*({_LANGUAGES})\s*\)|({_LANGUAGES})_lindera|lindera_({_LANGUAGES}))$"
)
_NGRAM = re.compile(r"^(ngram|edge_ngram)\s*\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)$")
_MAX_GRAM = 999
# Tokenizers that split CJK text into units a CJK query shares.
_CJK_NAMED = frozenset({"chinese_compatible", "icu", "jieba"})


def parse_tokenizer(value: str) -> str:
    """Validate a tokenizer setting and return its canonical ``pdb`` type ("" for the default).

    :param value: the setting, e.g. ``" Lindera(Japanese) "`` or ``"ngram(2, 3)"``.
    :raises ValueError: naming the variable and the accepted values.
    """
    name = value.strip().lower()
    if not name or name in _NAMED:
        return name
    lindera = _LINDERA.match(name)
    if lindera:
        return f"lindera({next(g for g in lindera.groups() if g)})"
    ngram = _NGRAM.match(name)
    if ngram:
        low, high = int(ngram.group(2)), int(ngram.group(3))
        if 1 <= low <= high <= _MAX_GRAM:
            return f"{ngram.group(1)}({low},{high})"
    raise ValueError(
        f"{VARIABLE}={value!r} is not a ParadeDB tokenizer this backend supports. Use one of "
        f"{', '.join(_NAMED)}, lindera(chinese|japanese|korean) (or chinese_lindera, "
        f"lindera_chinese, ...), ngram(a,b) or edge_ngram(a,b) with 1 <= a <= b <= {_MAX_GRAM}, "
        "or leave it empty for the default."
    )


def handles_cjk(tokenizer: str) -> bool:
    """Whether a canonical tokenizer lets CJK queries match CJK documents.

    :param tokenizer: the value :func:`parse_tokenizer` returned.
    """
    if tokenizer in _CJK_NAMED or tokenizer.startswith("lindera("):
        return True
    ngram = _NGRAM.match(tokenizer)
    # Plain n-grams of at most two characters cover short CJK words; edge n-grams only prefixes.
    return bool(ngram and ngram.group(1) == "ngram" and int(ngram.group(2)) <= 2)


def query_terms(tokens: Sequence[str], max_terms: int) -> list[str]:
    """Distinct word terms of the query, in order, at most ``max_terms`` (0 = all).

    Whitespace and punctuation never reach the match query: some tokenizers (lindera) turn them into
    tokens of their own, which would match nearly every row.

    :param tokens: the lower-cased word tokens of the query.
    :param max_terms: ``BM25_MAX_QUERY_TERMS``.
    """
    unique = word_terms(tokens, bigrams=False)
    return unique[:max_terms] if max_terms else unique


def parse_stemmer(value: str) -> str:
    """Validate a stemmer setting: a language of :data:`STEMMERS`, or "" for none.

    :raises ValueError: naming the variable and the accepted values.
    """
    name = value.strip().lower()
    if name and name not in STEMMERS:
        raise ValueError(f"{STEMMER_VARIABLE}={value!r} is not a ParadeDB stemmer. Use one of {', '.join(STEMMERS)}, "
                         "or leave it empty for none.")
    return name


def tokenizer_type(tokenizer: str, stemmer: str = "") -> Any:
    """The ``pdb`` type a text field is cast to, as a ``psycopg.sql`` composable.

    :param tokenizer: a canonical, non-empty value of :func:`parse_tokenizer`, e.g. ``ngram(2,3)``.
    :param stemmer: a language of :data:`STEMMERS` added as ``'stemmer=<language>'``, or "".
    """
    from psycopg import sql  # late: only start-up composes DDL

    name, _, rest = tokenizer.partition("(")
    # type modifiers are numbers (n-gram sizes) or a plain word (lindera's language), then options
    modifiers = [sql.Literal(int(a)) if a.isdigit() else sql.Identifier(a) for a in rest.rstrip(")").split(",") if a]
    if stemmer:
        modifiers.append(sql.Literal(f"stemmer={stemmer}"))
    base = sql.SQL("pdb.{}").format(sql.Identifier(name))
    return sql.SQL("{}({})").format(base, sql.SQL(",").join(modifiers)) if modifiers else base


class PgSearchSettings(BaseSettings):
    """Settings of the pg_search backend (``HINDSIGHT_API_TEXT_SEARCH_EXTENSION_PG_SEARCH_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="HINDSIGHT_API_TEXT_SEARCH_EXTENSION_PG_SEARCH_", extra="ignore"
    )

    #: A ParadeDB tokenizer for the text fields; empty keeps ParadeDB's default.
    tokenizer: str = ""
    #: The stemmer of the tokenizer (not of ``literal`` ones), as native's ``english`` configuration stems.
    stemmer: str = "english"

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: str) -> str:
        return parse_tokenizer(value)

    @field_validator("stemmer")
    @classmethod
    def _stemmer(cls, value: str) -> str:
        return parse_stemmer(value)


class PgSearchBackend(ExtensionBackend):
    """ParadeDB BM25: match queries on text, context and text_signals, ranked by paradedb.score."""

    name = "pg_search"
    extensions = ("pg_search",)
    citus_compatible = True

    def __init__(self, settings: Settings | None = None, config: PgSearchSettings | None = None) -> None:
        """Read the options; nothing touches the database here.

        :param settings: core settings (``BM25_MAX_QUERY_TERMS``).
        :param config: this backend's settings; when omitted,
            ``settings.plugins["text_search"]["pg_search"]`` and then the
            ``HINDSIGHT_API_TEXT_SEARCH_EXTENSION_PG_SEARCH_*`` variables.
        """
        super().__init__(settings)
        self.config = config if config is not None else (
            plugin_settings(PgSearchSettings, self.name, settings, kind="text_search")
        )
        self.tokenizer = self.config.tokenizer
        self.stemmer = "" if self.tokenizer in _WHOLE else self.config.stemmer
        self.supports_cjk = handles_cjk(self.tokenizer)
        self.max_terms = settings.bm25_max_query_terms if settings else 16

    def install_statements(self) -> Sequence[str]:
        if not self.tokenizer:
            return super().install_statements()
        # Releases differ in their tokenizers (edge_ngram from 0.23; icu only when built with it): say
        # which setting asks for a missing one, rather than fail later on an unknown type in CREATE INDEX.
        base = self.tokenizer.partition("(")[0]
        check = f"""DO $$
BEGIN
    IF to_regtype('pdb.{base}') IS NULL THEN
        RAISE EXCEPTION '{VARIABLE}={self.tokenizer}: pg_search % has no tokenizer pdb.{base}',
            (SELECT extversion FROM pg_extension WHERE extname = 'pg_search')
            USING HINT = 'edge_ngram needs pg_search 0.23 or later, icu a pg_search built with its icu feature; '
                         'or choose another tokenizer';
    END IF;
END
$$"""
        return (*super().install_statements(), check)

    def index_statements(self) -> Sequence[str]:
        # DDL binds no parameters: the tokenizer is composed from its validated parts, quoted.
        tokenizer = self.tokenizer or (DEFAULT_TOKENIZER if self.stemmer else "")
        cast = tokenizer_type(tokenizer, self.stemmer).as_string(None) if tokenizer else ""
        fields = [f"({f}::{cast})" if cast else f for f in FIELDS]
        # The bank and the fact type, indexed whole, let ParadeDB apply the arm's filter on them inside
        # the index; otherwise it reads every match of every bank from the heap to filter it (one
        # recall on LongMemEval dev: 130-240 ms against 3-6 ms).
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON memory_units "
            f"USING bm25 (id, {', '.join([*FILTERS, *fields])}) WITH (key_field = 'id')",
        )

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: AsyncConnection) -> KeywordQuery | None:
        terms = query_terms(tokens, self.max_terms)
        return KeywordQuery(" ".join(terms), tuple(terms)) if terms else None

    def arm_sql(self, *, columns: str, where: str) -> str:
        matches = ", ".join(f"paradedb.match('{f}', :query_text)" for f in FIELDS)
        # The outer query gates the top rows: paradedb.score is defined only next to the @@@ search.
        # The score is a real, so the floor is compared as one: a floor set to a score read back from
        # a trace keeps that row. (Casting the score instead gives garbage in pg_search 0.21.)
        return (
            f"(SELECT * FROM (SELECT {columns}, paradedb.score(id) AS bm25_score FROM memory_units "
            f"WHERE {where} AND id @@@ paradedb.boolean(should => ARRAY[{matches}]) "
            f"ORDER BY bm25_score DESC, id LIMIT :limit) AS pg_search_hits "
            f"WHERE bm25_score >= CAST(:min_score AS real) ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register: Any) -> None:
    register(PgSearchBackend)
