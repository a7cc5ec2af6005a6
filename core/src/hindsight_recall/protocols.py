"""The protocols every plugin implements, one primitive per role.

A plugin registers a *class*; core instantiates it as ``cls(settings)`` with the core
:class:`~hindsight_recall.settings.Settings`, only when the user selects it. A plugin with options
of its own reads them with :func:`~hindsight_recall.settings.plugin_settings` (values given in code
win over its environment variables). Importing a plugin module must stay cheap: heavy libraries are
imported in the first method that needs them.

Members with a default in a protocol body are optional: a class may leave them out and core sets
the documented default on it when it is registered (:func:`apply_defaults`). A class may also
subclass the protocol explicitly to inherit the defaults. :func:`missing_members` names what a
class lacks; :func:`sync_members` names methods that must be ``async def`` but are not.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from .types import ArmResult, Budget, TimeWindow

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from .settings import Settings
    from .store.db import LimitedConnections

F = TypeVar("F")


def optional(func: F) -> F:
    """Mark a protocol method as optional: its body is the default a plugin class inherits.

    :param func: the method.
    """
    func.__optional__ = True  # type: ignore[attr-defined]
    return func


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
    #: Lower-cased word tokens of the query; empty means no keyword arm.
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
    """A retrieval arm: returns scored memories for a query, one result per fact type.

    An arm that uses neither the query vector nor the date window may set the class attribute
    ``needs_embedding = False``: it then starts while the query is embedded, with an empty
    ``ctx.embedding`` and no ``ctx.window``.
    """

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
    #: The backend's SQL works on Citus (distributed tables); the suite branches on it.
    citus_compatible: bool
    #: Chinese, Japanese and Korean text is found by words of the query; the suite branches on it.
    supports_cjk: bool
    #: Optional. The arm SQL scores every matching row (no top-k index scan), so core may rank all
    #: fact types in one statement instead of one per fact type.
    ranks_every_match: bool = False
    #: Optional. :meth:`write_expression` fills ``search_vector``; false when the index covers the
    #: base columns and the column is a dummy.
    writes_search_vector: bool = True
    #: Optional. The embedded server (PostgreSQL with pgvector and contrib) can host the backend, so
    #: the compliance suite runs without ``HINDSIGHT_TEST_DATABASE_URL_<NAME>``.
    runs_on_embedded_server: bool = False
    #: Optional. PostgreSQL extensions the backend needs, in install order (informational; core
    #: runs :meth:`install_statements`).
    extensions: tuple[str, ...] = ()

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
    #: Optional. True for the passthrough that keeps the fused order; core then never
    #: calls :meth:`score`.
    passthrough: bool = False

    async def score(
        self, query: str, documents: Sequence[str], *, bank_id: str | None = None
    ) -> list[float]:
        """Score every document against the query, in input order.

        Core bounds each call by ``HINDSIGHT_API_RERANKER_TIMEOUT`` and min-max normalises the raw
        scores of one recall into [0, 1]; any finite floats will do.

        :param query: the recall query.
        :param documents: the pair texts.
        :param bank_id: the bank, for providers that forward it.
        """
        ...

    @optional
    async def start(self) -> None:
        """Optional. Load the model or reach the service before the first :meth:`score`.

        Core calls it in a task of its own when the first recall reranks, bounded by
        ``HINDSIGHT_API_MODEL_INIT_TIMEOUT``; recalls wait for it at most ``HINDSIGHT_API_RERANKER_TIMEOUT``.
        After a failure core calls it again in the background, with a growing pause in between. The
        default does nothing.
        """
        return None

    @optional
    async def close(self) -> None:
        """Optional. Release the model or the connection pool; the engine calls it on close.

        The default does nothing.
        """
        return None


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


#: Methods that must be coroutine functions, per protocol.
ASYNC_MEMBERS: dict[type, tuple[str, ...]] = {
    Retriever: ("retrieve",),
    TextSearchBackend: ("prepare_query",),
    Reranker: ("score", "start", "close"),
    EmbeddingProvider: ("embed",),
}


def optional_members(protocol: type) -> dict[str, Any]:
    """The optional members of a protocol and their defaults (members given a value in its body).

    :param protocol: one of the protocol classes above.
    """
    defaults: dict[str, Any] = {}
    for name in _members(protocol):
        value = protocol.__dict__.get(name, _NO_DEFAULT)
        if inspect.isfunction(value) and not getattr(value, "__optional__", False):
            continue  # a required method: its body is only ``...``
        if value is not _NO_DEFAULT:
            defaults[name] = value
    return defaults


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The required members of ``protocol`` that ``obj`` (a class or an instance) lacks, sorted.

    :param obj: the plugin class or instance.
    :param protocol: the protocol it should satisfy.
    """
    optional = optional_members(protocol)
    return sorted(name for name in _members(protocol) if name not in optional and not hasattr(obj, name))


def sync_members(obj: Any, protocol: type) -> list[str]:
    """Members that the protocol declares ``async`` but ``obj`` defines as plain functions.

    :param obj: the plugin class or instance.
    :param protocol: the protocol it should satisfy.
    """
    found = []
    for name in ASYNC_MEMBERS.get(protocol, ()):
        member = getattr(obj, name, None)
        if member is not None and not inspect.iscoroutinefunction(member):
            found.append(name)
    return found


def apply_defaults(obj: Any, protocol: type) -> list[str]:
    """Set every optional member ``obj`` leaves out to the protocol's default; return their names.

    :param obj: the plugin class (or an instance, for instances handed to the engine).
    :param protocol: the protocol it satisfies.
    """
    applied = []
    for name, default in optional_members(protocol).items():
        if not hasattr(obj, name):
            if inspect.isfunction(default) and not isinstance(obj, type):
                default = default.__get__(obj)  # bind, since an instance attribute is not bound
            setattr(obj, name, default)
            applied.append(name)
    return applied


_NO_DEFAULT = object()


def _members(protocol: type) -> list[str]:
    annotated = list(protocol.__dict__.get("__annotations__", {}))
    methods = [n for n, v in protocol.__dict__.items() if inspect.isfunction(v) and not n.startswith("_")]
    return list(dict.fromkeys(annotated + methods))


# Until the distributions are on PyPI, the hint also says how to install from the repository.
_FROM_REPOSITORY = (
    "pip install {dist}  (before it is published: pip install -e {folder}/{{name}} from a clone of the "
    'hindsight-recall repository, or pip install "git+<repository URL>#subdirectory={folder}/{{name}}")'
)

#: Plugin kind -> (protocol, setting that selects it, install-line template).
KINDS: dict[str, tuple[type, str | None, str | None]] = {
    "text_search": (TextSearchBackend, "HINDSIGHT_API_TEXT_SEARCH_EXTENSION",
                    _FROM_REPOSITORY.format(dist="hindsight-recall-{name}", folder="backends")),
    "reranker": (Reranker, "HINDSIGHT_API_RERANKER_PROVIDER",
                 _FROM_REPOSITORY.format(dist="hindsight-recall-reranker-{name}", folder="rerankers")),
    "retriever": (Retriever, None, None),
    "budget_function": (BudgetFunction, "HINDSIGHT_API_RECALL_BUDGET_FUNCTION", None),
    # No embedding provider is distributed separately, so there is no install line to suggest.
    "embeddings": (EmbeddingProvider, "HINDSIGHT_API_EMBEDDINGS_PROVIDER", None),
}
