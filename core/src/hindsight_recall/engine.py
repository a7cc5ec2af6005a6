"""The engine: settings, plugins, database and models wired together, with the public calls."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from .errors import ConfigError, RecallTimeout
from .plugins import PluginManager, get_plugin_manager
from .protocols import BudgetFunction, EmbeddingProvider, Retriever, TextSearchBackend
from .recall.pipeline import run_recall, warm_date_parser
from .recall.request import build_request
from .recall.rerank import RerankStage
from .retain.ingest import Ingestor, RetainStats
from .retain.memories import parse_memory
from .settings import Settings, load_settings
from .store.db import Database
from .store.schema import migrate
from .tokens import TokenCounter
from .types import Memory

log = logging.getLogger(__name__)

#: Back-off before retrying a recall that lost its connection.
RETRY_DELAYS = (0.5, 1.0, 2.0)


class Engine:
    """A recall engine over one database. Use ``async with Engine() as engine``.

    :param settings: core settings (default: read from ``HINDSIGHT_API_*``).
    :param plugins: a plugin manager (default: core defaults plus installed plugins).
    """

    def __init__(self, settings: Settings | None = None, plugins: PluginManager | None = None) -> None:
        self.settings = settings or load_settings()
        self.plugins = plugins or get_plugin_manager()
        s = self.settings
        self.text_search: TextSearchBackend = self.plugins.get("text_search", s.text_search_extension)(s)
        self.embedder: EmbeddingProvider = self.plugins.get("embeddings", s.embeddings_provider)(s)
        reranker = self.plugins.get("reranker", s.reranker_provider)(s)
        self.rerank = RerankStage(reranker, s)
        self.retrievers: list[Retriever] = [cls(s) for cls in self.plugins.all("retriever")]
        self._budget_functions = {name: self.plugins.get("budget_function", name) for name in self.plugins.names("budget_function")}
        if s.recall_budget_function not in self._budget_functions:
            log.warning("HINDSIGHT_API_RECALL_BUDGET_FUNCTION=%r is unknown (choices: %s); using 'fixed'",
                        s.recall_budget_function, ", ".join(self._budget_functions))
        self.tokens = TokenCounter(s.tokenizer_encoding)
        self.db = Database(s, self.text_search.session_statements())
        self._recalls = asyncio.Semaphore(s.recall_max_concurrent)
        self._ingestor = Ingestor(self.db, self.embedder, self.text_search, s)

    def budget_function(self, config: Settings) -> BudgetFunction:
        """The bank's budget function; unknown names fall back to ``fixed`` (soft-invalid)."""
        cls = self._budget_functions.get(config.recall_budget_function) or self._budget_functions["fixed"]
        return cls(config)  # type: ignore[no-any-return]

    async def open(self) -> Engine:
        """Start the database (embedded by default), apply migrations and check the embedding size."""
        dimensions = await asyncio.to_thread(self.embedder.dimensions)
        await self.db.open()
        try:
            async with self.db.connect() as conn:
                await migrate(conn, dimensions, self.text_search)
        except Exception:
            await self.db.close()
            raise
        if self.settings.enable_temporal_retrieval:
            warm_date_parser()
        return self

    async def close(self) -> None:
        await self.rerank.close()
        await self.db.close()

    async def __aenter__(self) -> Engine:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def retain(
        self, bank_id: str, memories: Iterable[Memory | Mapping[str, Any]], *, progress: bool | None = None,
        embeddings: Sequence[Sequence[float]] | None = None,
    ) -> RetainStats:
        """Store memories in a bank; re-retaining an id updates it. All or nothing.

        :param bank_id: the bank.
        :param memories: :class:`Memory` objects or dicts in the JSONL format.
        :param progress: show a progress bar (default: when stderr is a terminal).
        :param embeddings: precomputed vectors, one per memory in order (a list of lists or a numpy
            array); the embedding model is then not run.
        """
        items = [m if isinstance(m, Memory) else parse_memory(m, i)[1] for i, m in enumerate(memories, start=1)]
        return await self.retain_many({bank_id: items}, progress=progress,
                                      embeddings=None if embeddings is None else {bank_id: embeddings})

    async def retain_many(
        self, batches: Mapping[str, Sequence[Memory]], *, lines: Mapping[str, Sequence[int]] | None = None,
        progress: bool | None = None, embeddings: Mapping[str, Sequence[Sequence[float]]] | None = None,
    ) -> RetainStats:
        """Store several banks' memories in one transaction.

        :param batches: bank id -> memories.
        :param lines: bank id -> source line numbers, for error messages.
        :param progress: show a progress bar (default: when stderr is a terminal).
        :param embeddings: bank id -> precomputed vectors aligned with that bank's memories; every bank
            needs its vectors, and the embedding model is not run.
        """
        return await self._ingestor.retain(batches, lines=lines, progress=progress, embeddings=embeddings)

    async def recall(self, bank_id: str, query: str, **options: Any) -> dict[str, Any]:
        """Return the memories most relevant to ``query``, packed into ``max_tokens``.

        :param bank_id: the bank; an unknown bank gives an empty result.
        :param query: the question.
        :param options: ``budget``, ``max_tokens``, ``types``, ``tags``, ``tags_match``, ``query_timestamp``,
            ``temporal_window``, ``min_scores``, ``include_entities``, ``include_chunks``,
            ``include_source_facts``, ``source_facts_per_observation``, ``prefer_observations``, ``reranking``, ``trace``, ``limit`` (see :func:`~hindsight_recall.recall.request.build_request`).
        """
        request = build_request(bank_id, query, **options)
        queued = time.perf_counter()
        async with self._recalls:
            waited = time.perf_counter() - queued
            for attempt, delay in enumerate((*RETRY_DELAYS, None)):
                try:
                    return await run_recall(self, request, waited)
                except (asyncio.TimeoutError, TimeoutError) as exc:
                    raise RecallTimeout("recall timed out (HINDSIGHT_API_DB_COMMAND_TIMEOUT)") from exc
                except DBAPIError as exc:
                    if getattr(exc.orig, "sqlstate", None) == "57014":
                        raise RecallTimeout("recall timed out (HINDSIGHT_API_DB_STATEMENT_TIMEOUT)") from exc
                    if delay is None or not isinstance(exc, OperationalError | InterfaceError):
                        raise
                    log.warning("recall lost its connection (attempt %d): %s; retrying", attempt + 1, exc)
                    await asyncio.sleep(delay)
        raise ConfigError("unreachable")  # pragma: no cover
