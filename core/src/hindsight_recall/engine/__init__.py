"""The engine: settings, plugins, database and models wired together, with the public calls."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import ConfigError, DatabaseError, InvalidRequest, RecallError, RecallTimeout, RetainError, db_message
from ..jsonl import parse_memory
from ..plugins import PluginManager, adopt, get_plugin_manager
from ..protocols import BudgetFunction, EmbeddingProvider, Reranker, Retriever, TextSearchBackend
from ..recall.pipeline import run_recall, warm_date_parser
from ..recall.query_vectors import QueryVectors
from ..recall.request import build_request
from ..recall.rerank import RerankStage
from ..retain import edit as edits
from ..retain.ingest import Ingestor, RetainStats
from ..scratch import sweep
from ..settings import Settings, load_settings
from ..store import ann, listing, memory_edit, token_counts
from ..store import banks as bank_rows  # named apart from the part of that name (.banks)
from ..store import documents as document_rows  # and from .documents
from ..store.citus import check_backend, compatible_backends
from ..store.db import Database, database_error, database_errors, is_retryable
from ..store.schema import migrate
from ..store.shards import moved
from ..tokens import TokenCounter
from ..types import Memory
from .aliases import Aliases
from .audit import Audit
from .banks import Banks
from .browse import Browse
from .diagnostics import Diagnostics
from .directives import Directives
from .documents import Documents
from .entities import Entities
from .facts import Facts
from .graph import Graph
from .logouts import Logouts
from .memories import Memories
from .observations import Observations
from .operations import Operations
from .templates import Templates
from .transfers import Transfers
from .webhooks import Webhooks

log = logging.getLogger(__name__)

#: The keyword options :meth:`Engine.recall` accepts (those of :func:`build_request` after the query).
RECALL_OPTIONS = frozenset(list(inspect.signature(build_request).parameters)[2:])
#: Back-off before retrying a recall that lost its connection.
RETRY_DELAYS = (0.5, 1.0, 2.0)
T = TypeVar("T")


class Engine:
    """A recall engine over one database. Use ``async with Engine() as engine``.

    Everything can be configured in code: core options as :class:`Settings` fields, a plugin's own
    options under ``Settings(plugins={"<kind>": {"<name>": {...}}})``, or a ready plugin instance. Whatever the
    code leaves out is read from the ``HINDSIGHT_API_*`` environment.

    :param settings: core settings (default: read from ``HINDSIGHT_API_*``).
    :param plugins: a plugin manager (default: core defaults plus installed plugins).
    :param text_search: a text-search backend instance, used instead of ``TEXT_SEARCH_EXTENSION``.
    :param reranker: a reranker instance, used instead of ``RERANKER_PROVIDER``.
    :param embedder: an embedding provider instance, used instead of ``EMBEDDINGS_PROVIDER``.
    :param warm_date_finder: load the date finder at :meth:`open` (about 2 s of CPU in the background).
    """

    def __init__(
        self, settings: Settings | None = None, plugins: PluginManager | None = None, *,
        text_search: TextSearchBackend | None = None, reranker: Reranker | None = None,
        embedder: EmbeddingProvider | None = None, warm_date_finder: bool = True,
    ) -> None:
        s = settings or load_settings()
        #: load the date finder's language data in the background at open, so that no recall waits for it;
        #: a one-shot command, whose recall may never need it, leaves it to the first query that does
        self.warm_date_finder = warm_date_finder
        # The settings name what runs, so that traces and the database's backend check agree.
        chosen = {"text_search_extension": text_search, "reranker_provider": reranker, "embeddings_provider": embedder}
        names = {field: getattr(obj, "name", None) for field, obj in chosen.items() if obj is not None}
        self.settings = s = s.model_copy(update=names) if names else s
        self.plugins = plugins or get_plugin_manager()
        self.text_search: TextSearchBackend = self._plugin("text_search", text_search, s.text_search_extension)
        self.embedder: EmbeddingProvider = self._plugin("embeddings", embedder, s.embeddings_provider)
        self.query_vectors = QueryVectors(self.embedder, s.embeddings_query_cache_size)
        self.rerank = RerankStage(self._plugin("reranker", reranker, s.reranker_provider), s)
        self.retrievers: list[Retriever] = [cls(s) for cls in self.plugins.all("retriever")]
        self._budget_functions = {
            name: self.plugins.get("budget_function", name) for name in self.plugins.names("budget_function")
        }
        if s.recall_budget_function not in self._budget_functions:
            log.warning("HINDSIGHT_API_RECALL_BUDGET_FUNCTION=%r is unknown (choices: %s); using 'fixed'",
                        s.recall_budget_function, ", ".join(self._budget_functions))
        self.tokens = TokenCounter(s.tokenizer_encoding)
        self.db = Database(s, self.text_search.session_statements())
        self._recalls = asyncio.Semaphore(s.recall_concurrency())
        self._ingestor = Ingestor(self.db, self.embedder, self.text_search, s)
        # the engine's parts, by capability: each call takes its own connection and transaction
        self.banks = Banks(self.db, s)
        self.directives = Directives(self.db)
        self.memories = Memories(self.db)
        self.documents = Documents(self.db)
        self.transfers = Transfers(self.db, self._ingestor)
        self.templates = Templates(self.db)
        self.webhooks = Webhooks(self.db)
        self.entities = Entities(self.db)
        self.graph = Graph(self.db)
        self.observations = Observations(self.db)
        self.aliases = Aliases(self.db)
        self.audit = Audit(self.db)
        self.logouts = Logouts(self.db)
        self.operations = Operations(self.db)
        self.browse = Browse(self.db)
        self.diagnostics = Diagnostics(self.db)
        #: retain's fact extraction (no database: it runs before the write)
        self.facts = Facts(s, self.plugins, self.banks)

    def _plugin(self, kind: str, given: Any, name: str) -> Any:
        """The instance given in code, checked; else the plugin the settings name, built from them."""
        return adopt(kind, given) if given is not None else self.plugins.create(kind, name, self.settings)

    def budget_function(self, config: Settings) -> BudgetFunction:
        """The bank's budget function; unknown names fall back to ``fixed`` (soft-invalid)."""
        cls = self._budget_functions.get(config.recall_budget_function) or self._budget_functions["fixed"]
        return cls(config)  # type: ignore[no-any-return]

    async def open(self) -> Engine:
        """Start the database (embedded by default), apply migrations and check the embedding size; remove
        the work folders of imports and clones whose process was killed (:func:`~hindsight_recall.scratch.sweep`)."""
        await asyncio.to_thread(sweep)
        # the model loads while the database opens: each takes a few hundred ms in a new process
        model = asyncio.ensure_future(asyncio.to_thread(self.embedder.dimensions))
        try:
            await self.db.open()
        except BaseException:
            await asyncio.gather(model, return_exceptions=True)  # the load ends before the error leaves
            raise
        try:
            dimensions = await model
            if self.db.citus:
                check_backend(self.text_search, compatible_backends(self.plugins))
            await migrate(self.db, dimensions, self.text_search)
            await ann.repair(self.db)
            async with self.db.connect() as conn:
                if await token_counts.reconcile(conn, self.tokens.counts_key):
                    log.warning("stored token counts were made under another TOKENIZER_ENCODING; "
                                "cleared: recalls count those memories until they are retained again")
        except DBAPIError as exc:
            await self.db.close()
            raise DatabaseError(_schema_failure(exc, self.settings.text_search_extension)) from None
        except Exception:
            await self.db.close()
            raise
        if self.settings.enable_temporal_retrieval and self.warm_date_finder:
            warm_date_parser()
        return self

    async def warm(self) -> None:
        """Load the model, fill the pool to its minimum, and run one recall through the code paths, so that a
        server's first requests wait for none of them."""
        await self.embedder.embed(["warm up"], mode="query")
        async with contextlib.AsyncExitStack() as hold:  # opened at once, min-size connections stay pooled
            for _ in range(max(self.settings.db_pool_min_size, 1)):
                await hold.enter_async_context(self.db.connect())
        found = await self.list_banks()
        if found:
            try:
                await self.recall(found[0]["bank_id"], "warm up", budget="low", include_entities=None)
            except RecallError as exc:
                log.info("warm-up recall skipped: %s", exc)

    async def close(self) -> None:
        await self.facts.close()
        await self.rerank.close()
        await self.db.close()

    async def __aenter__(self) -> Engine:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def retain(
        self, bank_id: str, memories: Iterable[Memory | Mapping[str, Any]], *, progress: bool | None = None,
        embeddings: Sequence[Sequence[float]] | None = None, replace_documents: Iterable[str] = (),
        document_sizes: Mapping[str, int] | None = None,
        within: Callable[[AsyncConnection], Awaitable[None]] | None = None,
    ) -> RetainStats:
        """Store memories in a bank; re-retaining an id updates it. All or nothing.

        :param bank_id: the bank.
        :param memories: :class:`Memory` objects or dicts in the JSONL format.
        :param progress: show a progress bar (default: when stderr is a terminal).
        :param embeddings: precomputed vectors, one per memory in order (a list of lists or a numpy
            array); the embedding model is then not run.
        :param replace_documents: documents these memories replace whole: a memory of one of them that is
            not among ``memories`` is forgotten in the same transaction, so every reader sees each
            document all old or all new.
        :param document_sizes: document id -> how many memories it holds as the caller read it (the
            place an append was numbered after): if another write changed it meanwhile, nothing is
            written and :class:`~hindsight_recall.errors.DocumentChanged` (409) says to read and retry.
        :param within: more work for the same transaction (see :meth:`retain_many`), such as the
            webhook events of the retain (:class:`~hindsight_recall.engine.webhooks.Retained`).
        """
        if isinstance(memories, str | bytes | Mapping | Memory) or not isinstance(memories, Iterable):
            raise RetainError(None, "memories", f"expected a list of memories, got {type(memories).__name__}")
        items = [m if isinstance(m, Memory) else parse_memory(m, i)[1] for i, m in enumerate(memories, start=1)]
        return await self.retain_many({bank_id: items}, progress=progress,
                                      embeddings=None if embeddings is None else {bank_id: embeddings},
                                      replace_documents={bank_id: _texts("replace_documents", replace_documents)},
                                      document_sizes={bank_id: dict(document_sizes or {})}, within=within)

    async def retain_many(
        self, batches: Mapping[str, Sequence[Memory]], *, lines: Mapping[str, Sequence[int]] | None = None,
        progress: bool | None = None, embeddings: Mapping[str, Sequence[Sequence[float]]] | None = None,
        replace_documents: Mapping[str, Collection[str]] | None = None,
        document_sizes: Mapping[str, Mapping[str, int]] | None = None,
        within: Callable[[AsyncConnection], Awaitable[None]] | None = None,
    ) -> RetainStats:
        """Store several banks' memories in one transaction.

        :param batches: bank id -> memories.
        :param lines: bank id -> source line numbers, for error messages.
        :param progress: show a progress bar (default: when stderr is a terminal).
        :param embeddings: bank id -> precomputed vectors aligned with that bank's memories; every bank
            needs its vectors, and the embedding model is not run.
        :param replace_documents: bank id -> documents replaced whole (see :meth:`retain`).
        :param document_sizes: bank id -> document id -> memories it holds as read (see :meth:`retain`).
        :param within: more work for the same transaction, ``await within(conn)`` once the memories are
            written: it commits with them or, if it raises, nothing does.
        """
        if not isinstance(batches, Mapping) or not all(
            isinstance(ms, Sequence) and not isinstance(ms, str) and all(isinstance(m, Memory) for m in ms)
            for ms in batches.values()
        ):
            raise RetainError(None, "batches", "expected a mapping of bank id to a list of Memory objects")
        # A retain is one transaction and re-retaining an id updates it, so a retry is safe.
        with database_errors("retain"):
            return await self._retrying("retain", lambda: self._ingestor.retain(
                batches, lines=lines, progress=progress, embeddings=embeddings, replace_documents=replace_documents,
                document_sizes=document_sizes, within=within))

    async def recall(self, bank_id: str, query: str, **options: Any) -> dict[str, Any]:
        """Return the memories most relevant to ``query``, packed into ``max_tokens``.

        :param bank_id: the bank; an unknown bank raises :class:`~hindsight_recall.errors.BankNotFound`.
        :param query: the question.
        :param options: ``budget``, ``max_tokens``, ``types``, ``tags``, ``tags_match``, ``query_timestamp``,
            ``temporal_window``, ``min_scores``, ``include_entities``, ``include_chunks``,
            ``include_source_facts``, ``source_facts_per_observation``, ``prefer_observations``, ``reranking``,
            ``trace``, ``limit`` (see :func:`~hindsight_recall.recall.request.build_request`).
        """
        unknown = sorted(set(options) - RECALL_OPTIONS)
        if unknown:
            raise InvalidRequest(unknown[0], f"is not a recall option (options: {', '.join(sorted(RECALL_OPTIONS))})")
        request = build_request(bank_id, query, **options)
        queued = time.perf_counter()
        async with self._recalls:
            waited = time.perf_counter() - queued
            try:
                return await self._retrying("recall", lambda: run_recall(self, request, waited))
            except TimeoutError as exc:
                raise RecallTimeout("recall timed out (HINDSIGHT_API_DB_COMMAND_TIMEOUT)") from exc
            except (DBAPIError, psycopg.Error) as exc:
                if getattr(getattr(exc, "orig", exc), "sqlstate", None) == "57014":
                    raise RecallTimeout("recall timed out (HINDSIGHT_API_DB_STATEMENT_TIMEOUT)") from exc
                raise database_error("recall", exc) from exc

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt``, again after a lost connection or a serialization failure (RETRY_DELAYS apart)."""
        for number, delay in enumerate((*RETRY_DELAYS, None), start=1):
            try:
                return await attempt()
            except (DBAPIError, psycopg.Error) as exc:
                if delay is None or not is_retryable(exc):
                    raise
                log.warning("%s failed (attempt %d): %s; retrying", what, number, db_message(exc))
                await asyncio.sleep(delay)
                await self._recover(exc)
        raise ConfigError("unreachable")  # pragma: no cover

    async def ping(self, timeout: float = 2.0) -> str | None:
        """``None`` when the database answers ``SELECT 1`` within ``timeout`` seconds, else why not. A lost
        connection is recovered from as a recall's is (an embedded server that died is restarted), so a
        probe alone brings the database back."""
        try:
            async with asyncio.timeout(timeout):
                async with self.db.connect() as conn:
                    await conn.exec_driver_sql("SELECT 1")
        except TimeoutError:
            return f"the database did not answer within {timeout:g} s"
        except (DBAPIError, psycopg.Error) as exc:
            if is_retryable(exc):
                await self._recover(exc)
            return db_message(exc)
        except DatabaseError as exc:  # the pool's own refusals (exhausted, closed)
            return str(exc)
        return None

    async def list_banks(self) -> list[dict[str, Any]]:
        """Every bank as ``{bank_id, memories, created_at}``, by name."""
        with database_errors("listing banks"):
            async with self.db.connect() as conn:
                return await bank_rows.list_banks(conn)

    async def bank_stats(self, bank_id: str) -> dict[str, Any] | None:
        """What a bank holds (memories by type, entities, chunks, documents, links, config); ``None`` if absent.

        :param bank_id: the bank.
        """
        return await self._in_bank("bank_stats", bank_id, bank_rows.bank_stats)

    async def delete_bank(self, bank_id: str) -> bool:
        """Delete a bank with everything in it; other banks are untouched. False if it did not exist.

        :param bank_id: the bank.
        """
        deleted = await self._in_bank("delete_bank", bank_id, bank_rows.delete_bank)
        if deleted:  # after the commit: its slot is free, and its indexes go
            await ann.reclaim(self.db, self.settings)
        return deleted

    async def create_bank(self, bank_id: str) -> bool:
        """Create an empty bank; False if it already existed.

        :param bank_id: the bank.
        """
        return (await self._in_bank("create_bank", bank_id, bank_rows.ensure_bank))[1]

    async def get_memory(self, bank_id: str, memory_id: str) -> dict[str, Any] | None:
        """One memory by its id, with its entities and sources; ``None`` if the bank has no such memory.

        :param bank_id: the bank.
        :param memory_id: the caller's id of the memory.
        """
        return await self._in_bank("get_memory", bank_id, lambda conn, bank: listing.get_memory(conn, bank, memory_id))

    async def list_memories(self, bank_id: str, **filters: Any) -> tuple[list[dict[str, Any]], int]:
        """A page of a bank's memories, newest mention first, and the number matching in all.

        :param bank_id: the bank.
        :param filters: ``fact_type``, ``search`` (a substring of text or context), ``document_id``,
            ``limit``, ``offset`` (see :func:`~hindsight_recall.store.listing.list_memories`).
        """
        return await self._in_bank("list_memories", bank_id,
                                   lambda conn, bank: listing.list_memories(conn, bank, **filters))

    async def document_memory_ids(self, bank_id: str, documents: Iterable[str]) -> dict[str, list[str]]:
        """Each document's memory ids in document order (none for a document the bank does not have).

        :param bank_id: the bank.
        :param documents: document ids.
        """
        wanted = _texts("documents", documents)
        return await self._in_bank("document_memory_ids", bank_id,
                                   lambda conn, bank: listing.document_memory_ids(conn, bank, wanted))

    async def forget(self, bank_id: str, ids: Iterable[str]) -> int:
        """Remove memories by their ids with their links, entity pairs and unused chunks; return the count.

        :param bank_id: the bank; an unknown bank removes nothing.
        :param ids: the caller's memory ids (exact strings, as retained); unknown ids are ignored.
        """
        wanted = bank_rows.validate_memory_ids(ids)
        removed = await self._in_bank("forget", bank_id,
                                      lambda conn, bank: bank_rows.forget(conn, bank, wanted, self.text_search))
        if removed:  # after the commit: a bank shrunk below half the index threshold gives its slot back
            await ann.reclaim(self.db, self.settings, bank_id)
        return removed

    async def update_memory(
        self, bank_id: str, memory_id: str, edit: Callable[[Memory], Memory], *,
        state: Literal["valid", "invalidated"] | None = None, reason: str | None = None,
    ) -> str:
        """Edit a memory, invalidate it or restore it, all in one transaction; returns its state then
        (``valid`` or ``invalidated``). See :func:`~hindsight_recall.retain.edit.update_memory`.

        :param bank_id: the bank.
        :param memory_id: the memory (stored or invalidated).
        :param edit: the memory as stored -> as it should be (``dataclasses.replace`` of some fields).
        :param state: ``invalidated`` takes it out of recall's reach, ``valid`` brings it back.
        :param reason: why it is invalidated.
        """
        bank_id = bank_rows.validate_bank_id(bank_id)

        async def attempt() -> str:
            async with self._ingestor.transaction({bank_id: 1}) as tx:
                return await edits.update_memory(tx, bank_id, memory_id, edit, state=state, reason=reason)

        with database_errors("update_memory"):
            ended = await self._retrying("update_memory", attempt)
        if ended == "invalidated":  # after the commit: a slot the bank no longer needs is given back
            await ann.reclaim(self.db, self.settings, bank_id)
        return ended

    async def clear_memories(self, bank_id: str, fact_type: str | None = None) -> int:
        """Forget every memory of the bank, or of one type, in one transaction; the bank, its profile and
        settings stay. Returns how many went (none for an unknown bank).

        :param bank_id: the bank.
        :param fact_type: only memories of this type.
        """

        async def clear(conn: AsyncConnection, bank: str) -> int:
            ids = await memory_edit.memory_ids(conn, bank, fact_type)
            return await bank_rows.forget(conn, bank, ids, self.text_search) if ids else 0

        removed = await self._in_bank("clear_memories", bank_id, clear)
        if removed:
            await ann.reclaim(self.db, self.settings, bank_id)
        return removed

    async def delete_document(self, bank_id: str, document_id: str) -> int | None:
        """Forget a document with its memories and chunks in one transaction; how many memories went, or
        ``None`` when the bank has no such document.

        :param bank_id: the bank.
        :param document_id: the document.
        """
        removed = await self._in_bank("delete_document", bank_id, lambda conn, bank: document_rows.delete_document(
            conn, bank, document_id, self.text_search))
        if removed:
            await ann.reclaim(self.db, self.settings, bank_id)
        return removed

    async def _in_bank(self, what: str, bank_id: str, call: Callable[[AsyncConnection, str], Awaitable[T]]) -> T:
        """``call(conn, bank_id)`` on one connection, the id checked first and driver errors made ours."""
        bank_id = bank_rows.validate_bank_id(bank_id)
        with database_errors(what):
            async with self.db.connect() as conn:
                return await call(conn, bank_id)

    async def _recover(self, exc: Exception) -> None:
        """After a lost connection, reconnect (restarting an embedded server that died)."""
        if getattr(getattr(exc, "orig", exc), "sqlstate", None) in ("40001", "40P01") or moved(exc):
            return  # the connection is fine; only the transaction lost (or the shard it read moved)
        try:
            if await self.db.recover():
                log.warning("restarted the embedded PostgreSQL server after it stopped")
        except DatabaseError as failure:
            log.warning("could not restart the embedded PostgreSQL server: %s", failure)


def _texts(name: str, values: Iterable[str]) -> list[str]:
    """A list of strings given as any iterable of them (never a bare string, which iterates by letter)."""
    found = [] if isinstance(values, str | bytes) else list(values)
    if isinstance(values, str | bytes) or not all(isinstance(v, str) for v in found):
        raise InvalidRequest(name, "expected a list of strings")
    return found


def _schema_failure(exc: DBAPIError, text_search: str) -> str:
    """A one-line reason the schema could not be prepared, naming the missing extension if that is it."""
    first = db_message(exc)
    if "extension" in first.lower() and ("not available" in first.lower() or "could not open" in first.lower()):
        if '"vector"' in first:
            return (f"the PostgreSQL server has no pgvector: {first}. Install pgvector on that server, or unset "
                    "HINDSIGHT_API_DATABASE_URL to use the embedded server (which bundles it).")
        if '"btree_gist"' in first:
            return (f"the PostgreSQL server has no btree_gist: {first}. Install PostgreSQL's contrib modules on "
                    "that server (e.g. the postgresql-contrib package), or unset HINDSIGHT_API_DATABASE_URL to use "
                    "the embedded server.")
        return (f"the PostgreSQL server lacks an extension that HINDSIGHT_API_TEXT_SEARCH_EXTENSION={text_search!r} "
                f"needs: {first}. Install it on the server, or choose another text-search backend (e.g. native).")
    return f"could not prepare the database schema: {first}"
