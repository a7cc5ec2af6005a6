"""Hook specifications: one ``register_*`` hook per plugin kind.

Each hook receives a ``register`` callback; call it once per class the plugin provides. Core
validates every registration and records failures: the class must have every required member of
its protocol (the message names the missing ones), its ``async`` methods must be coroutine
functions, its ``name`` must be unique and, for a plugin loaded from an entry point, equal to the
entry-point name. Optional protocol members the class leaves out get their documented defaults
(see :mod:`hindsight_recall.protocols`). Core instantiates a class as ``cls(settings)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("hindsight_recall")
hookimpl = pluggy.HookimplMarker("hindsight_recall")

Register = Callable[[Any], None]


@hookspec
def register_text_search_backends(register: Register) -> None:
    """Register text-search backend classes (keyword arm SQL for one extension).

    :param register: call with each class satisfying ``TextSearchBackend``.
    """


@hookspec
def register_rerankers(register: Register) -> None:
    """Register reranker classes that score (query, document) pairs.

    :param register: call with each class satisfying ``Reranker``.
    """


@hookspec
def register_retrievers(register: Register) -> None:
    """Register retrieval arms whose results recall fuses.

    :param register: call with each class satisfying ``Retriever``.
    """


@hookspec
def register_budget_functions(register: Register) -> None:
    """Register budget functions that map a budget level to the per-arm row limit.

    :param register: call with each class satisfying ``BudgetFunction``.
    """


@hookspec
def register_embedding_providers(register: Register) -> None:
    """Register embedding providers that turn texts into vectors.

    :param register: call with each class satisfying ``EmbeddingProvider``.
    """


@hookspec
def register_llm_providers(register: Register) -> None:
    """Register chat-model providers (reflect's answer).

    :param register: call with each class satisfying ``LLMProvider``.
    """
