"""Text Embeddings Inference (TEI) reranker: concurrent batches to a TEI server's ``POST /rerank``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from hindsight_recall.errors import MissingSetting, RerankerError, RerankerHTTPError
from hindsight_recall.hookspecs import Register, hookimpl
from hindsight_recall.http import HTTPReranker, RerankAPI, RerankHTTP, RetryPolicy
from hindsight_recall.settings import plugin_settings
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

#: ``{"query", "texts", "return_text": false}`` -> ``[{"index", "score"}]``.
API = RerankAPI(
    provider="tei", documents_key="texts", extra={"return_text": False}, results_key=None, score_key="score"
)
#: A self-hosted TEI sheds load with 429/503 and restarts in seconds, so it gets retries.
RETRY = RetryPolicy(retries=3, base_delay=0.5, max_delay=5.0, jitter=0.5)


class TEISettings(BaseSettings):
    """Settings of the TEI reranker (``HINDSIGHT_API_RERANKER_TEI_*``)."""

    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_API_RERANKER_TEI_", extra="ignore")

    #: The server's base URL, e.g. ``http://localhost:8080``.
    url: str | None = None
    batch_size: int = Field(default=128, ge=1)
    #: Requests in flight across the process.
    max_concurrent: int = Field(default=8, ge=1)
    http_timeout: float = Field(default=30, gt=0)


class TEIReranker(HTTPReranker):
    """Cross-encoder scores from a Text Embeddings Inference server."""

    name = "tei"

    def __init__(self, settings: Settings | None = None, config: TEISettings | None = None) -> None:
        """Check the settings; nothing is sent before :meth:`start` or :meth:`score`.

        :param settings: core settings (bank header, model start-up bound).
        :param config: this plugin's settings; when omitted, ``settings.plugins["reranker"]["tei"]`` and then the
            ``HINDSIGHT_API_RERANKER_TEI_*`` variables (:func:`~hindsight_recall.settings.plugin_settings`).
        """
        self.config = config if config is not None else (
            plugin_settings(TEISettings, self.name, settings, kind="reranker")
        )
        if not self.config.url:
            raise MissingSetting(
                "HINDSIGHT_API_RERANKER_TEI_URL", "the TEI server's base URL, e.g. http://localhost:8080"
            )
        self.base_url = self.config.url.rstrip("/")
        self.init_timeout = settings.model_init_timeout if settings else 300.0
        self.model_id: str | None = None
        self._http = RerankHTTP(
            API,
            f"{self.base_url}/rerank",
            timeout=self.config.http_timeout,
            retry=RETRY,
            batch_size=self.config.batch_size,
            max_concurrent=self.config.max_concurrent,
            send_bank_header=settings.reranker_send_bank_as_header if settings else False,
        )

    async def start(self) -> None:
        """Read the served model from ``GET /info``, bounded by ``MODEL_INIT_TIMEOUT``."""
        url = f"{self.base_url}/info"
        try:
            info = await asyncio.wait_for(self._http.request("GET", url), self.init_timeout)
        except TimeoutError:
            raise RerankerError(
                f"tei: GET {url} did not answer within "
                f"HINDSIGHT_API_MODEL_INIT_TIMEOUT={self.init_timeout:g} s"
            ) from None
        model_id = info.get("model_id") if isinstance(info, dict) else None
        if not isinstance(model_id, str):
            raise RerankerHTTPError(
                f"tei: GET {url}: malformed body, expected an object with a string 'model_id'"
            )
        self.model_id = model_id


@hookimpl
def register_rerankers(register: Register) -> None:
    """Register the TEI reranker.

    :param register: core's registration callback.
    """
    register(TEIReranker)
