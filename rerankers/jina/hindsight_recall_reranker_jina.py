"""Jina reranker: the Jina AI rerank HTTP API (``POST {base}/v1/rerank``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from hindsight_recall.errors import MissingSetting
from hindsight_recall.hookspecs import Register, hookimpl
from hindsight_recall.http import HTTPReranker, RerankAPI, RerankHTTP, required_secret
from hindsight_recall.settings import plugin_settings
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

#: ``{"model", "query", "documents", "top_n", "return_documents": false}`` ->
#: ``{"results": [{"index", "relevance_score"}]}``; ``top_n`` is every document, so all come back.
API = RerankAPI(provider="jina", extra={"return_documents": False}, count_key="top_n")


class JinaSettings(BaseSettings):
    """Settings of the Jina reranker (``HINDSIGHT_API_RERANKER_JINA_*``)."""

    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_API_RERANKER_JINA_", extra="ignore")

    api_key: SecretStr | None = None
    model: str = "jina-reranker-v2-base-multilingual"
    base_url: str = "https://api.jina.ai"
    timeout: float = Field(default=60, gt=0)


class JinaReranker(HTTPReranker):
    """Relevance scores from Jina AI's rerank API."""

    name = "jina"

    def __init__(self, settings: Settings | None = None, config: JinaSettings | None = None) -> None:
        """Check the settings; nothing is sent before :meth:`score`.

        :param settings: core settings (bank header).
        :param config: this plugin's settings; when omitted, ``settings.plugins["reranker"]["jina"]`` and then the
            ``HINDSIGHT_API_RERANKER_JINA_*`` variables (:func:`~hindsight_recall.settings.plugin_settings`).
        """
        self.config = config if config is not None else (
            plugin_settings(JinaSettings, self.name, settings, kind="reranker")
        )
        key = required_secret(self.config.api_key, "HINDSIGHT_API_RERANKER_JINA_API_KEY", "the Jina AI API key")
        if not self.config.base_url:
            raise MissingSetting(
                "HINDSIGHT_API_RERANKER_JINA_BASE_URL", "the API's base URL, e.g. https://api.jina.ai"
            )
        self._http = RerankHTTP(
            replace(API, extra={"model": self.config.model, **API.extra}),
            f"{self.config.base_url.rstrip('/')}/v1/rerank",
            timeout=self.config.timeout,
            headers={"Authorization": f"Bearer {key}"},
            send_bank_header=settings.reranker_send_bank_as_header if settings else False,
        )


@hookimpl
def register_rerankers(register: Register) -> None:
    """Register the Jina reranker.

    :param register: core's registration callback.
    """
    register(JinaReranker)
