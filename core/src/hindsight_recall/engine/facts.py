"""Retain's fact extraction, as the engine offers it: the chat model ``RETAIN_LLM_*`` names, built once.

A retain with a model configured sends its items here before it writes anything, so that a model that
fails leaves the bank as it was; the faces turn the facts into memories and write them with
:meth:`~hindsight_recall.engine.Engine.retain` in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..llm.select import provider_name
from ..retain.extract import BatchExtraction as BatchExtraction  # re-exported: what the faces read
from ..retain.extract import Extraction as Extraction
from ..retain.extract import ExtractionOptions as ExtractionOptions
from ..retain.extract import RetainItem as RetainItem
from ..retain.extract import create_retain_llm, extract_batch, has_retain_model, retain_llm_settings
from ..retain.extract import prompt_blocks as prompt_blocks
from ..retain.extract import reply_schema as reply_schema
from ..retain.extract import to_memories as to_memories
from ..retain.options import extraction_options
from ..types import Usage

if TYPE_CHECKING:
    from ..plugins import PluginManager
    from ..protocols import LLMProvider
    from ..settings import Settings
    from .banks import Banks


class Facts:
    """Extract the facts of retain items with the configured chat model.

    :param settings: the engine's settings.
    :param plugins: the plugin manager holding the ``llm`` providers.
    :param banks: the banks, whose overrides shape their extractions.
    """

    def __init__(self, settings: Settings, plugins: PluginManager, banks: Banks) -> None:
        self._settings, self._plugins, self._banks = settings, plugins, banks
        self._llm: LLMProvider | None = None
        #: what the extractions that succeeded cost, since the engine was built: model calls (repairs
        #: included) and their tokens; the service's ``/metrics`` reports them
        self.calls, self.usage = 0, Usage()

    @property
    def configured(self) -> bool:
        """Whether retain goes through a chat model; without one, items are stored verbatim."""
        return has_retain_model(self._settings)

    def model_names(self) -> tuple[str | None, str | None]:
        """Retain's provider and model as the settings name them; ``(None, None)`` without one (the model is
        ``None`` too when the provider's default is used)."""
        config = retain_llm_settings(self._settings)
        provider = provider_name(config)
        return provider, config.llm_model if provider else None

    async def options(self, bank_id: str, overrides: Mapping[str, Any] | None = None) -> ExtractionOptions:
        """What shapes the bank's extractions: the settings, the bank's overrides over them (none for a bank
        that does not exist yet), then ``overrides`` (a request's; give only what it sets).

        :raises InvalidRequest: (400) a value out of range, or ``custom`` mode without instructions.
        """
        stored = await self._banks.config(bank_id)
        return extraction_options(self._settings, stored or {}, overrides or {})

    async def extract(self, items: Sequence[RetainItem], options: ExtractionOptions | None = None) -> BatchExtraction:
        """Every item's facts, all their chunks asked for at once within ``RETAIN_LLM_MAX_CONCURRENT``.

        :param items: the items, in order.
        :param options: what shapes the requests (:meth:`options`); default, the settings' own.
        :raises LLMError: the model failed, timed out or gave an unusable reply (after its retries and
            one repair); ``LLMNotConfigured`` when none is configured or it cannot be built.
        """
        if self._llm is None:
            self._llm = create_retain_llm(self._settings, self._plugins)
        batch = await extract_batch(self._llm, self._settings, items, options)
        self.calls += batch.calls
        self.usage += batch.usage
        return batch

    async def close(self) -> None:
        """Close the model's connections, if it was built."""
        llm, self._llm = self._llm, None
        close = getattr(llm, "close", None)
        if close is not None:
            await close()
