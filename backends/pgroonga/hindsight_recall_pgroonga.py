"""PGroonga keyword search: Groonga full text with bigram tokenizing, for any language including CJK."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.protocols import KeywordQuery
from hindsight_recall.textsearch import INDEX, ExtensionBackend, query_terms

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

#: The indexed document. The search repeats it verbatim: the planner only uses the index for an
#: identical expression, and without the index pgroonga_score silently reads 0.
DOCUMENT = "COALESCE(text, '') || ' ' || COALESCE(context, '') || ' ' || COALESCE(text_signals, '')"

#: The function the arm calls for the scored matches of one bank.
HITS_FUNCTION = "hindsight_pgroonga_hits"

#: Groonga's relevance scorer, summed over the query's OR-ed terms ($index is PGroonga's placeholder).
SCORER = "scorer_tf_idf($index)"

# pgroonga_score has a value only while a PGroonga index or bitmap scan produces the row; under a
# sequential scan (a small or never-analysed table) every match would score 0. The function plans
# its query on every call with sequential scans off (and index and bitmap scans on, whatever the
# session says), and OFFSET 0 keeps the bank predicate out of the scan, so the PGroonga index is the
# only path left and the score does not depend on the plan.
HITS_DDL = (
    f"CREATE OR REPLACE FUNCTION {HITS_FUNCTION}(text, text) "
    "RETURNS TABLE (hit_id uuid, hit_score double precision) "
    "LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = on SET enable_bitmapscan = on "
    "AS $hits$ "
    "SELECT id, score FROM (SELECT id, bank_id, pgroonga_score(tableoid, ctid) AS score FROM memory_units "
    f"WHERE ({DOCUMENT}) &@~ pgroonga_condition($1, scorers => ARRAY['{SCORER}'], index_name => '{INDEX}') "
    "OFFSET 0) AS matched WHERE bank_id = $2 $hits$"
)

#: English function words (PostgreSQL's english.stop). OR-ed into the query they match nearly every
#: memory and add a point each to its score, so they are dropped unless the query has nothing else.
STOP_WORDS = frozenset((
    "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself",
    "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself",
    "they", "them", "their", "theirs", "themselves", "what", "which", "who", "whom", "this", "that",
    "these", "those", "am", "is", "are", "was", "were", "be", "been", "being", "have", "has", "had",
    "having", "do", "does", "did", "doing", "a", "an", "the", "and", "but", "if", "or", "because", "as",
    "until", "while", "of", "at", "by", "for", "with", "about", "against", "between", "into", "through",
    "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out", "on", "off",
    "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why", "how",
    "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not",
    "only", "own", "same", "so", "than", "too", "very", "s", "t", "can", "will", "just", "don", "should",
    "now",
))


def content_terms(terms: Sequence[str]) -> list[str]:
    """``terms`` without stop words; all of them when every term is one (e.g. "who are they").

    :param terms: distinct lower-case query terms.
    """
    content = [term for term in terms if term not in STOP_WORDS]
    return content or list(terms)


class PgroongaBackend(ExtensionBackend):
    """PGroonga ``&@~`` query over the document expression, ranked by Groonga's TF-IDF scorer."""

    name = "pgroonga"
    extensions = ("pgroonga",)
    supports_cjk = True

    def install_statements(self) -> Sequence[str]:
        return (*super().install_statements(), HITS_DDL)

    def index_statements(self) -> Sequence[str]:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON memory_units USING pgroonga (({DOCUMENT})) "
            "WITH (tokenizer = 'TokenBigram', normalizer = 'NormalizerNFKC150')",
        )

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: AsyncConnection) -> KeywordQuery | None:
        terms = content_terms(query_terms(tokens))
        if not terms:
            return None
        # Terms are lower case, so none of them is the query-syntax keyword OR; the SQL still
        # escapes the whole text with pgroonga_query_escape.
        return KeywordQuery(" OR ".join(terms), tuple(terms))

    def arm_sql(self, *, columns: str, where: str) -> str:
        # The function scores the bank's matches; the join reads their rows under core's filters.
        return (
            f"(SELECT {columns}, hits.hit_score AS bm25_score "
            f"FROM {HITS_FUNCTION}(pgroonga_query_escape(:query_text), :bank_id) AS hits "
            f"JOIN memory_units ON memory_units.id = hits.hit_id "
            f"WHERE {where} AND hits.hit_score >= :min_score ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register: Any) -> None:
    register(PgroongaBackend)
