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
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from .types import ArmResult, Budget, ChatReply, ChatRequest, LengthPrior, Placement, TimeWindow

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from .settings import Settings

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
class KeywordQuery:
    """What :meth:`TextSearchBackend.prepare_query` returns: the query as the backend's SQL binds it.

    The keyword arm binds ``text`` as ``:query_text`` and ``terms`` as ``:query_terms`` (a
    ``text[]``), so SQL that needs the terms one by one reads the array instead of parsing the text.
    """

    #: bound as ``:query_text``, in the backend's own query syntax
    text: str
    #: bound as ``:query_terms``; empty when the backend's SQL does not use them
    terms: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArmStatement:
    """One arm's UNION ALL of per-fact-type sub-selects, ready to be composed with other arms'."""

    arm: str
    subselects: Sequence[str]
    params: Mapping[str, Any]
    #: ``hnsw.*`` settings the statement needs (empty: none)
    ann: Mapping[str, str] = field(default_factory=dict)
    #: seconds the arm allows itself; past it the arms run apart (the arm's own fallback applies)
    timeout: float | None = None
    #: named common table expressions the sub-selects read, ``{name: "(SELECT ...)"}``. Composed arms
    #: that declare one with the same name and text share it: the semantic arm's nearest memories are
    #: also the graph arm's seeds, searched once.
    ctes: Mapping[str, str] = field(default_factory=dict)

    def sql(self) -> str:
        """The statement on its own: its CTEs, then the UNION ALL of its sub-selects."""
        return with_ctes(self.ctes, " UNION ALL ".join(self.subselects))


def with_ctes(ctes: Mapping[str, str], body: str) -> str:
    """``body`` preceded by ``WITH`` and the named CTEs (none: ``body`` itself)."""
    if not ctes:
        return body
    return "WITH " + ", ".join(f"{name} AS {sql}" for name, sql in ctes.items()) + " " + body


class Connections(Protocol):
    """Where a recall's stages take database connections, at most the recall's budget at once
    (:class:`~hindsight_recall.store.db.LimitedConnections`)."""

    #: seconds spent waiting for a slot or a pooled connection, summed (a trace diagnostic)
    waited: float

    def connect(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection for the block: the recall's own while it is free, else one from the pool."""
        ...


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
    db: Connections
    text_search: TextSearchBackend
    now: datetime
    window: TimeWindow | None = None
    min_semantic: float | None = None
    min_keyword: float | None = None
    #: the bank's rows are in HNSW indexes (a large bank); otherwise arms rank exactly. :meth:`where`
    #: adds the indexes' predicate when it is true: ``ann_slot = n`` for a bank with a slot of its own
    #: (:attr:`ann_slot`), else ``ann`` (the shared indexes).
    indexed: bool = False
    #: the bank's index slot (``banks.ann_slot``, see :mod:`hindsight_recall.store.ann`), if it has one
    ann_slot: int | None = None
    #: the bank's keyword length prior (:mod:`hindsight_recall.recall.length_prior`); ``None`` when the
    #: text-search backend applies none
    length_prior: LengthPrior | None = None

    def where(self, fact_type: str) -> str:
        """The predicate every statement over ``memory_units`` for one fact type ANDs in.

        It holds the bank (``:bank_id``), the fact type, the tag filter (its parameters are in
        :meth:`params`) and, for a bank in HNSW indexes (:attr:`indexed`), the indexes' own
        predicate (``ann_slot = n`` or ``ann``): without it the planner cannot use them, and a large
        bank is scanned exactly.

        :param fact_type: one of :attr:`fact_types`.
        :raises ValueError: for a fact type the recall does not search.
        """
        if fact_type not in self.fact_types:  # inlined below: only validated values may pass
            raise ValueError(f"{fact_type!r} is not one of this recall's fact types {list(self.fact_types)}")
        index = Placement(self.ann_slot, self.indexed).predicate() if self.indexed else ""
        ann = f" AND {index}" if index else ""
        return f"bank_id = :bank_id AND fact_type = '{fact_type}'{ann} AND {self.filter.sql}"

    def params(self) -> dict[str, Any]:
        """The parameters :meth:`where` binds: ``bank_id`` and the tag filter's."""
        return {"bank_id": self.bank_id, **self.filter.params}


@runtime_checkable
class Retriever(Protocol):
    """A retrieval arm: returns scored memories for a query, one result per fact type.

    Build statements with :meth:`RetrievalContext.where` and bind :meth:`RetrievalContext.params`.
    """

    name: str
    #: Optional. False for an arm that uses neither the query vector nor the date window: it then
    #: starts while the query is embedded, with an empty ``ctx.embedding`` and no ``ctx.window``.
    needs_embedding: bool = True

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

    @optional
    def statement(self, ctx: RetrievalContext) -> ArmStatement | None:
        """Optional. The arm as one SQL statement that core may run together with other arms'.

        Arms that return one (and agree on shared parameters) run as a single statement on one
        connection; ``None`` (the default) runs :meth:`retrieve`.

        :param ctx: the recall's retrieval context.
        """
        return None


@runtime_checkable
class TextSearchBackend(Protocol):
    """SQL for one keyword-search extension: DDL, the write expression, query text and arm SQL.

    Statements bind ``:query_text`` and ``:query_terms`` (from :meth:`prepare_query`),
    ``:fact_types`` (every fact type the recall searches, a ``text[]``), ``:min_score``, ``:limit``
    and the backend's own :meth:`parameters`; core binds the rest.
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
    #: Optional. The backend's SQL reads ``term_stats`` (per bank and fact type: memories, and
    #: memories per ``search_vector`` lexeme; a ``tsvector`` column), so core keeps it at every write.
    #: False (the default): core writes none, and the backend must not read it.
    keeps_term_stats: bool = False
    #: Optional. The arm SQL divides each score by the bank's length prior,
    #: :func:`~hindsight_recall.textsearch.length_pivot` of the row's ``length(search_vector)``, with
    #: ``:length_b`` and ``:length_mean`` bound by core from ``length_stats`` (kept with
    #: ``keeps_term_stats``, which it needs). False (the default): core binds the prior that changes nothing.
    length_prior: bool = False
    #: Optional. The embedded server (PostgreSQL with pgvector and contrib) can host the backend, so
    #: the compliance suite runs without ``HINDSIGHT_TEST_DATABASE_URL_<NAME>``.
    runs_on_embedded_server: bool = False
    #: Optional. PostgreSQL extensions the backend needs, in install order (informational; core
    #: runs :meth:`install_statements`).
    extensions: tuple[str, ...] = ()

    def install_statements(self) -> Sequence[str]:
        """Idempotent setup such as ``CREATE EXTENSION`` or ``CREATE OR REPLACE FUNCTION``.

        Core runs them at every start, so a new version of a statement reaches existing databases.
        """
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

    @optional
    def parameters(self) -> Mapping[str, Any]:
        """Optional. The backend's own bound parameters (e.g. a text-search configuration).

        Core binds them in every statement holding the backend's :meth:`arm_sql` or
        :meth:`write_expression`, so options reach SQL as values, never as SQL text. Names must
        not be core's (``bank_id``, ``query_text``, ``query_terms``, ``fact_types``, ``min_score``, ``limit``,
        ``per_type``, ``filter_*``); the backend's name as a prefix (``native_language``) keeps
        them apart from names core may add. The default binds none.
        """
        return {}

    async def prepare_query(
        self, query: str, tokens: Sequence[str], conn: AsyncConnection
    ) -> KeywordQuery | str | None:
        """Turn the query into what the arm binds (:class:`KeywordQuery`); ``None`` skips the arm.

        A plain string is read as ``KeywordQuery(text=...)``.

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

        Core bounds each call by ``HINDSIGHT_API_RERANKER_TIMEOUT`` and normalises one recall's raw
        scores into [0, 1] (:func:`hindsight_recall.recall.scoring.normalise`: a batch inside
        [0, 1] is kept as it is, any other goes through the logistic sigmoid); any finite floats
        will do.

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


@runtime_checkable
class LLMProvider(Protocol):
    """A chat model: a system prompt and turns in, one reply out (text, or JSON fitting a schema).

    Core builds it as ``cls(settings)`` from the ``HINDSIGHT_API_LLM_*`` settings when a caller first
    needs it, and bounds nothing itself: the provider owns its timeouts and retries
    (:mod:`hindsight_recall.llm.transport` has them for HTTP providers). Errors are
    :class:`~hindsight_recall.llm.errors.LLMError` and its subclasses.
    """

    name: str

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Ask the model once and return its whole reply.

        :param request: the prompt; with ``json_schema`` set, the reply text must be one JSON object
            (the provider asks for it as its server allows; core validates it).
        """
        ...

    @optional
    async def close(self) -> None:
        """Optional. Release the connection pool. The default does nothing."""
        return None


#: Methods that must be coroutine functions, per protocol.
ASYNC_MEMBERS: dict[type, tuple[str, ...]] = {
    Retriever: ("retrieve",),
    TextSearchBackend: ("prepare_query",),
    Reranker: ("score", "start", "close"),
    EmbeddingProvider: ("embed",),
    LLMProvider: ("complete", "close"),
}


def optional_members(protocol: type) -> dict[str, Any]:
    """The optional members of a protocol and their defaults (members given a value in its body).

    :param protocol: one of the protocol classes above.
    """
    defaults: dict[str, Any] = {}
    for name in members(protocol):
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
    return sorted(name for name in members(protocol) if name not in optional and not hasattr(obj, name))


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


def members(protocol: type) -> list[str]:
    """Every member a protocol declares, attributes first, in declaration order.

    :param protocol: one of the protocol classes above.
    """
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
    "llm": (LLMProvider, "HINDSIGHT_API_LLM_PROVIDER",
            _FROM_REPOSITORY.format(dist="hindsight-recall-llm-{name}", folder="llms")),
}
