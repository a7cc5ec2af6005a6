"""PostgreSQL full text search (tsvector + GIN): no extension needed, Citus-compatible."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.protocols import KeywordQuery
from hindsight_recall.settings import plugin_settings
from hindsight_recall.textsearch import INDEX, bigram_cjk_runs, length_pivot, query_terms
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings
    from sqlalchemy.ext.asyncio import AsyncConnection

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The configuration every statement uses, bound from :meth:`NativeBackend.parameters`.
_LANGUAGE = "CAST(:native_language AS regconfig)"

#: The per-bank statistics of the query's terms (``term_stats``, kept by core at every write), and the
#: terms kept: stopwords out, then terms in more than ``max_frequency`` of the memories (unless that
#: leaves none), then the rarest ``max_terms`` (or the first, when not ``selective``; 0: all). ``N`` and
#: ``df`` cover the bank's memories of every fact type searched; a term the parser reads as several
#: lexemes (``foo_bar``) is as rare as its rarest lexeme. Tiers: the rarest terms whose summed ``df``
#: fits in ``max_rows`` are "exact" (every memory holding one is scored); the others fill what is left
#: of ``max_rows``, memories holding every one of them first (they score highest among the rest).
_KEPT_TERMS = " ".join(line.strip() for line in """
terms AS MATERIALIZED (
    SELECT t.ord, t.term, q, tsvector_to_array(to_tsvector({language}, t.term)) AS lexemes
    FROM unnest(CAST(:query_terms AS text[])) WITH ORDINALITY AS t(term, ord)
    CROSS JOIN LATERAL to_tsquery({language}, quote_literal(t.term)) AS q
    WHERE numnode(q) > 0),
counts AS MATERIALIZED (
    SELECT s.lexeme, sum(s.df) AS df FROM term_stats s
    WHERE s.bank_id = :bank_id AND s.fact_type = ANY(CAST(:fact_types AS text[]))
    AND s.lexeme = ANY(ARRAY(SELECT DISTINCT l FROM terms CROSS JOIN LATERAL unnest(terms.lexemes) AS l)
                       || CAST('' AS text))
    GROUP BY s.lexeme),
stats AS MATERIALIZED (
    SELECT terms.ord, terms.term, terms.q, d.df,
           greatest(coalesce((SELECT c.df FROM counts c WHERE c.lexeme = ''), 0), d.df) AS n
    FROM terms CROSS JOIN LATERAL (SELECT greatest(coalesce(min(coalesce(c.df, 0)), 0), 0) AS df
        FROM unnest(terms.lexemes) AS l(lexeme) LEFT JOIN counts c ON c.lexeme = l.lexeme) AS d),
specific AS MATERIALIZED (
    SELECT * FROM stats WHERE df <= CAST(:native_max_frequency AS float8) * n
    OR NOT EXISTS (SELECT 1 FROM stats s WHERE s.df <= CAST(:native_max_frequency AS float8) * s.n)),
kept AS MATERIALIZED (
    SELECT ord, term, q, df, n, CAST(ln(1 + (n - df + 0.5) / (df + 0.5)) AS float8) AS w,
           sum(df) OVER (ORDER BY df, ord) AS reach
    FROM (SELECT specific.*, row_number() OVER (
              ORDER BY CASE WHEN CAST(:native_selective AS boolean) THEN df ELSE 0 END, ord) AS pick
          FROM specific) AS picked
    WHERE CAST(:native_max_terms AS int) = 0 OR pick <= CAST(:native_max_terms AS int)),
tiers AS MATERIALIZED (
    SELECT to_tsquery({language}, string_agg(quote_literal(term), ' | ' ORDER BY ord)
               FILTER (WHERE CAST(:native_max_rows AS int) = 0 OR reach <= CAST(:native_max_rows AS int))) AS exact,
           to_tsquery({language}, string_agg(quote_literal(term), ' & ' ORDER BY ord)
               FILTER (WHERE CAST(:native_max_rows AS int) > 0 AND reach > CAST(:native_max_rows AS int))) AS every,
           to_tsquery({language}, string_agg(quote_literal(term), ' | ' ORDER BY ord)
               FILTER (WHERE CAST(:native_max_rows AS int) > 0 AND reach > CAST(:native_max_rows AS int))) AS common
    FROM kept)""".splitlines()).strip()


class NativeSettings(BaseSettings):
    """Settings of the native backend (``HINDSIGHT_API_TEXT_SEARCH_EXTENSION_NATIVE_*``)."""

    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_API_TEXT_SEARCH_EXTENSION_NATIVE_", extra="ignore")

    #: The text-search configuration (dictionary), bound as ``:native_language``; checked to be a name.
    language: str = "english"
    #: ``ts_rank`` (default) or ``ts_rank_cd``; see :class:`NativeBackend` for why not the latter.
    rank: Literal["ts_rank", "ts_rank_cd"] = "ts_rank"
    #: Weigh each query term by its inverse document frequency in the bank (the fact types searched).
    idf: bool = True
    #: PostgreSQL's ``normalization`` of ``ts_rank``/``ts_rank_cd``, a bit mask: 0 ignores a memory's length;
    #: 1 divides by 1 + ln(its word count), 2 by its word count, 8 by its distinct words, 16 by 1 + ln(those),
    #: 32 maps rank r to r/(r + 1) (4, the extent distance, applies to ``ts_rank_cd`` only). Unset (the
    #: default): each bank's length prior instead (see :class:`NativeBackend`); set, it replaces the prior.
    normalization: int | None = Field(None, ge=0, le=63)
    #: At most this many matching memories are scored per query (0: all). Every memory holding one of
    #: the rarest terms (as many as fit, by their counts) is scored; common terms fill what is left.
    max_rows: int = Field(2000, ge=0)

    @field_validator("language")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _IDENTIFIER.match(value):
            raise ValueError(
                "HINDSIGHT_API_TEXT_SEARCH_EXTENSION_NATIVE_LANGUAGE must be a text-search "
                "configuration name such as 'english' or 'simple'"
            )
        return value


class NativeBackend:
    """PostgreSQL tsvector full text search ranked with ts_rank.

    Upstream Hindsight ranks with ``ts_rank_cd``; ``ts_rank`` is the default here because it ranks
    better on conversational memories (LoCoMo dev: hit_any@10 .671 vs .650, MRR .489 vs .444 for
    OR-ed terms) and costs 2–7× less per matching row. ``..._NATIVE_RANK=ts_rank_cd`` restores
    upstream's ranking.

    Neither function knows how common a term is, so a name found in every memory of a bank counts
    as much as a rare word. With ``idf`` (the default) a memory's score is instead the mean over the
    kept query terms of ``idf(t) × rank(memory, t)``, with the BM25 weight
    ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))``: ``N`` the bank's memories of every fact type the
    query searches and ``df`` those among them containing ``t``. Both are read from the counts core
    keeps per bank at every write (``keeps_term_stats``, :mod:`hindsight_recall.store.term_stats`),
    so no query counts the bank; they are bank-wide, so a tag or date filter narrows the matches but
    not the weights. The same counts choose the terms (``BM25_MAX_TERM_FREQUENCY``,
    ``BM25_MAX_QUERY_TERMS``) and bound the work: at most ``max_rows`` matches are scored.

    ``ts_rank`` does not weigh a memory's length. Unless ``normalization`` is set, each score is divided
    by the bank's length prior, ``1 − b + b × length / mean`` over ``length(search_vector)`` (the
    memory's distinct lexemes), with ``b`` chosen from how the bank's lengths spread
    (:mod:`hindsight_recall.recall.length_prior`): 0, no change, in a bank of even lengths.
    """

    name = "native"
    citus_compatible = True
    # IDF weights and term selection read the per-bank counts core keeps at every write.
    keeps_term_stats = True
    supports_cjk = True
    writes_search_vector = True
    # Built-in full text search: no extension beyond what every PostgreSQL ships.
    runs_on_embedded_server = True
    # ts_rank scores every match (no top-k index), so core may rank all fact types in one pass.
    ranks_every_match = True
    # scores are divided by the bank's length prior (off when NORMALIZATION is set: see __init__)
    length_prior = True
    extensions: tuple[str, ...] = ()

    def __init__(self, settings: Settings | None = None, config: NativeSettings | None = None) -> None:
        """Read the options; nothing touches the database here.

        :param settings: core settings (``BM25_*`` query options).
        :param config: this backend's settings; when omitted, ``settings.plugins["text_search"]["native"]`` and then the
            ``HINDSIGHT_API_TEXT_SEARCH_EXTENSION_NATIVE_*`` variables.
        """
        self.config = config if config is not None else (
            plugin_settings(NativeSettings, self.name, settings, kind="text_search")
        )
        self.language = self.config.language
        self.max_terms = settings.bm25_max_query_terms if settings else 16
        self.selective = settings.bm25_selective_terms if settings else True
        self.max_frequency = settings.bm25_max_term_frequency if settings else 1.0
        # a normalization given explicitly replaces the prior, 0 (no length at all) included
        self.length_prior = self.config.normalization is None

    def install_statements(self) -> Sequence[str]:
        return ()

    def session_statements(self) -> Sequence[str]:
        return ()

    def column_type(self) -> str:
        return "tsvector"

    def index_statements(self) -> Sequence[str]:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON memory_units USING gin (search_vector)",
        )

    def prepare_document(self, document: str) -> str:
        # The query side splits CJK the same way, so bigrams meet bigrams.
        return bigram_cjk_runs(document)

    def parameters(self) -> dict[str, Any]:
        return {"native_language": self.language, "native_max_terms": self.max_terms,
                "native_selective": self.selective, "native_max_frequency": self.max_frequency,
                "native_max_rows": self.config.max_rows, "native_normalization": self.config.normalization or 0}

    def write_expression(self, document_sql: str) -> str:
        return f"to_tsvector({_LANGUAGE}, {document_sql})"

    def _tsquery(self) -> str:
        return f"to_tsquery({_LANGUAGE}, :query_text)"

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: AsyncConnection) -> KeywordQuery | None:
        # Which terms to keep is decided per bank, inside the arm's statement (see _KEPT_TERMS).
        terms = query_terms(tokens)
        if not terms:
            return None
        # Terms hold only word characters; quoting each keeps to_tsquery from reading syntax.
        return KeywordQuery(" | ".join(f"'{t}'" for t in terms), tuple(terms))

    def arm_sql(self, *, columns: str, where: str) -> str:
        """The arm in one statement: term statistics, kept terms, matches, scores.

        The matches are one GIN scan for the exact tier, then, stopped at ``max_rows`` rows in all,
        memories holding every common term and memories holding any; each match is scored once per
        kept term. Nothing counts the bank.
        """
        rank = self.config.rank
        normalization = "CAST(:native_normalization AS int)"
        if self.config.idf:
            # the mean over kept terms of idf(t) x rank(memory, t)
            score = f"(SELECT sum(kept.w * {rank}(hits.hit_vector, kept.q, {normalization})) / count(*) FROM kept)"
        else:
            anyterm = f"(SELECT to_tsquery({_LANGUAGE}, string_agg(quote_literal(term), ' | ')) FROM kept)"
            score = f"{rank}(hits.hit_vector, {anyterm}, {normalization})"
        if self.length_prior:
            score = f"{score} / {length_pivot('length(hits.hit_vector)')}"
        match = (f"SELECT {columns}, search_vector AS hit_vector FROM memory_units "
                 f"WHERE {where} AND search_vector @@ ")
        not_exact = "AND NOT coalesce(search_vector @@ (SELECT exact FROM tiers), false) "
        return (
            f"(WITH {_KEPT_TERMS.format(language=_LANGUAGE)}, "
            f"exact_hits AS MATERIALIZED ({match}(SELECT exact FROM tiers)), "
            f"every_hits AS MATERIALIZED ({match}(SELECT every FROM tiers) {not_exact}"
            "LIMIT greatest(CAST(:native_max_rows AS int) - (SELECT count(*) FROM exact_hits), 0)), "
            "hits AS MATERIALIZED (SELECT * FROM exact_hits UNION ALL SELECT * FROM every_hits UNION ALL "
            f"({match}(SELECT common FROM tiers) {not_exact}"
            "AND NOT coalesce(search_vector @@ (SELECT every FROM tiers), false) "
            "LIMIT greatest(CAST(:native_max_rows AS int) - (SELECT count(*) FROM exact_hits) "
            "- (SELECT count(*) FROM every_hits), 0))), "
            f"scored AS MATERIALIZED (SELECT hits.*, {score} AS bm25_score FROM hits) "
            f"SELECT {columns}, bm25_score FROM scored WHERE bm25_score >= :min_score "
            "ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register: Any) -> None:
    register(NativeBackend)
