"""The protocols every plugin implements, one primitive per role.

A plugin registers a *class*; core instantiates it as ``cls(settings)`` with the core
:class:`~hindsight_recall.settings.Settings`, only when the user selects it. Importing a plugin
module must stay cheap: heavy libraries are imported in the first method that needs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .types import ArmResult, Budget, TimeWindow

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from .settings import Settings
    from .store.db import LimitedConnections


@dataclass(frozen=True)
class SqlFilter:
    """A SQL predicate with its bound parameters, AND-ed into every arm's WHERE clause."""

    sql: str = "TRUE"
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RetrievalContext:
    """Everything an arm needs to retrieve for one recall."""

    bank_id: str
    query: str
    #: Lower-cased word tokens of the query (SPEC §3.1); empty means no keyword arm.
    tokens: Sequence[str]
    embedding: Sequence[float]
    fact_types: Sequence[str]
    #: The per-arm, per-fact-type row limit ``B``.
    limit: int
    filter: SqlFilter
    settings: Settings
    db: LimitedConnections
    text_search: TextSearchBackend
    now: datetime
    window: TimeWindow | None = None
    min_semantic: float | None = None
    min_keyword: float | None = None
    #: the bank's rows are in the shared HNSW indexes (a large bank); otherwise arms rank exactly
    indexed: bool = False


@runtime_checkable
class Retriever(Protocol):
    """A retrieval arm: returns scored memories for a query, one result per fact type."""

    name: str

    def enabled(self, ctx: RetrievalContext) -> bool:
        """Say whether the arm runs for this recall (stage toggles, empty tokens, no window).

        :param ctx: the recall's retrieval context.
        """
        ...

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        """Run the arm on its own connection(s) from ``ctx.db`` and return its hits per fact type.

        :param ctx: the recall's retrieval context.
        """
        ...


@runtime_checkable
class TextSearchBackend(Protocol):
    """SQL for one keyword-search extension: DDL, the write expression, query text and arm SQL.

    Statements bind ``:query_text``, ``:min_score`` and ``:limit``; core binds the rest.
    """

    name: str
    #: Capability flags the compliance suite branches on.
    citus_compatible: bool
    supports_cjk: bool

    def install_statements(self) -> Sequence[str]:
        """Idempotent one-time setup such as ``CREATE EXTENSION``."""
        ...

    def session_statements(self) -> Sequence[str]:
        """Statements every new connection runs, e.g. a ``search_path``."""
        ...

    def column_type(self) -> str:
        """The SQL type of ``memory_units.search_vector``."""
        ...

    def index_statements(self) -> Sequence[str]:
        """Idempotent DDL for ``idx_memory_units_text_search``."""
        ...

    def prepare_document(self, document: str) -> str:
        """Rewrite a memory's document text before it is written (e.g. CJK bigrams).

        :param document: ``text || ' ' || context || ' ' || text_signals``.
        """
        ...

    def write_expression(self, document_sql: str) -> str:
        """The SQL expression that computes ``search_vector`` from a document.

        :param document_sql: a SQL expression holding the prepared document text.
        """
        ...

    async def prepare_query(
        self, query: str, tokens: Sequence[str], conn: AsyncConnection
    ) -> str | None:
        """Turn the query into the text bound as ``:query_text``; ``None`` skips the arm.

        :param query: the normalised query string.
        :param tokens: its lower-cased word tokens.
        :param conn: a connection, for backends that consult statistics.
        """
        ...

    def arm_sql(self, *, columns: str, where: str) -> str:
        """One parenthesised sub-select returning ``columns`` plus ``bm25_score``.

        :param columns: the select list of ``memory_units`` columns.
        :param where: the bank, fact-type and filter predicate, to AND with the match.
        """
        ...


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, document) pairs; raw scores, higher is better, one per document."""

    name: str
    #: True for the passthrough that keeps the fused order (SPEC §9.3).
    passthrough: bool

    async def score(
        self, query: str, documents: Sequence[str], *, bank_id: str | None = None
    ) -> list[float]:
        """Score every document against the query, in input order.

        :param query: the recall query.
        :param documents: the pair texts (SPEC §9.1).
        :param bank_id: the bank, for providers that forward it.
        """
        ...


@runtime_checkable
class BudgetFunction(Protocol):
    """Maps a budget level and token budget to the per-arm row limit ``B``."""

    name: str

    def resolve(self, budget: Budget, max_tokens: int, config: Settings) -> int:
        """Return ``B`` for this recall.

        :param budget: the requested level.
        :param max_tokens: the request's token budget.
        :param config: the bank's effective settings.
        """
        ...


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into vectors of a fixed dimension."""

    name: str

    def dimensions(self) -> int:
        """The vector dimension (may load the model)."""
        ...

    async def embed(self, texts: Sequence[str], *, mode: str) -> list[list[float]]:
        """Embed a batch of texts without blocking the event loop.

        :param texts: the texts.
        :param mode: ``"query"`` or ``"passage"``, for providers with prefixes.
        """
        ...


#: Plugin kind -> (protocol, setting that selects it, install-line template).
KINDS: dict[str, tuple[type, str | None, str | None]] = {
    "text_search": (TextSearchBackend, "HINDSIGHT_API_TEXT_SEARCH_EXTENSION", "pip install hindsight-recall-{name}"),
    "reranker": (Reranker, "HINDSIGHT_API_RERANKER_PROVIDER", "pip install hindsight-recall-reranker-{name}"),
    "retriever": (Retriever, None, None),
    "budget_function": (BudgetFunction, "HINDSIGHT_API_RECALL_BUDGET_FUNCTION", None),
    "embeddings": (EmbeddingProvider, "HINDSIGHT_API_EMBEDDINGS_PROVIDER", "pip install hindsight-recall-embeddings-{name}"),
}
