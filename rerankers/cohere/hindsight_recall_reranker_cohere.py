"""Cohere reranker: the v2 rerank HTTP API, or any Cohere-compatible server at a given URL."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from hindsight_recall.hookspecs import Register, hookimpl
from hindsight_recall.http import HTTPReranker, RerankAPI, RerankHTTP, required_secret
from hindsight_recall.settings import plugin_settings
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

DEFAULT_URL = "https://api.cohere.com/v2/rerank"
#: ``{"model", "query", "documents"}`` -> ``{"results": [{"index", "relevance_score"}]}``. The v2
#: endpoint rejects unknown fields, and ``return_documents`` is not one of its fields.
API = RerankAPI(provider="cohere")


class CohereSettings(BaseSettings):
    """Settings of the Cohere reranker (``HINDSIGHT_API_RERANKER_COHERE_*``)."""

    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_API_RERANKER_COHERE_", extra="ignore")

    api_key: SecretStr | None = None
    model: str = "rerank-english-v3.0"
    #: The full rerank URL, used as given (a self-hosted or Cohere-compatible server).
    base_url: str | None = None
    timeout: float = Field(default=60, gt=0)


class CohereReranker(HTTPReranker):
    """Relevance scores from Cohere's rerank API (v2) or a Cohere-compatible endpoint."""

    name = "cohere"

    def __init__(self, settings: Settings | None = None, config: CohereSettings | None = None) -> None:
        """Check the settings; nothing is sent before :meth:`score`.

        :param settings: core settings (bank header).
        :param config: this plugin's settings; when omitted, ``settings.plugins["reranker"]["cohere"]`` and then the
            ``HINDSIGHT_API_RERANKER_COHERE_*`` variables (:func:`~hindsight_recall.settings.plugin_settings`).
        """
        self.config = config if config is not None else (
            plugin_settings(CohereSettings, self.name, settings, kind="reranker")
        )
        key = required_secret(self.config.api_key, "HINDSIGHT_API_RERANKER_COHERE_API_KEY", "the Cohere API key")
        self._http = RerankHTTP(
            replace(API, extra={"model": self.config.model}),
            self.config.base_url or DEFAULT_URL,
            timeout=self.config.timeout,
            headers={"Authorization": f"Bearer {key}"},
            send_bank_header=settings.reranker_send_bank_as_header if settings else False,
        )


@hookimpl
def register_rerankers(register: Register) -> None:
    """Register the Cohere reranker.

    :param register: core's registration callback.
    """
    register(CohereReranker)
