"""What the recall pipeline needs from its host, so recall/ never imports the engine."""

from __future__ import annotations

from typing import Protocol

from ..protocols import BudgetFunction, EmbeddingProvider, Retriever, TextSearchBackend
from ..settings import Settings
from ..store.db import Database
from ..tokens import TokenCounter
from .query_vectors import QueryVectors
from .rerank import RerankStage


class RecallServices(Protocol):
    """The parts one recall uses; :class:`~hindsight_recall.engine.Engine` provides them."""

    settings: Settings
    db: Database
    embedder: EmbeddingProvider
    query_vectors: QueryVectors
    text_search: TextSearchBackend
    retrievers: list[Retriever]
    rerank: RerankStage
    tokens: TokenCounter

    def budget_function(self, config: Settings) -> BudgetFunction:
        """The budget function for a bank's effective settings."""
        ...
