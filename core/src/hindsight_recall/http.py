"""The async HTTP helper of every remote reranker: timeouts, status checks, retries, index mapping.

Providers declare a :class:`RerankAPI` and a :class:`RetryPolicy` and own one :class:`RerankHTTP`
(one ``httpx.AsyncClient``) per instance; nothing here branches on a provider's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import weakref
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import httpx

from .errors import MissingSetting, RerankerHTTPError

if TYPE_CHECKING:
    from pydantic import SecretStr

T = TypeVar("T")
BANK_HEADER = "X-Hindsight-Bank-Id"
_KEY_HINT = {401: "; check the API key", 403: "; check the API key"}

# Only timeouts are worth another attempt; a refused connection or a full pool is not.
_RETRYABLE_ERRORS = (httpx.ConnectTimeout, httpx.ReadTimeout, httpx.WriteTimeout)

# Semaphores are bound to an event loop, so "process-wide" means per loop (one per process in practice).
_Limits = dict[tuple[str, int], asyncio.Semaphore]
_LIMITS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Limits] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class RetryPolicy:
    """When to send a failed request again, and how long to wait first.

    :param retries: attempts after the first; 0 sends each request once.
    :param base_delay: the first backoff in seconds, doubled after each attempt.
    :param max_delay: the longest wait; the request timeout caps it too.
    :param jitter: the backoff is scaled by a random factor in ``1 ± jitter``.
    """

    retries: int = 0
    base_delay: float = 0.5
    max_delay: float = 5.0
    jitter: float = 0.5

    def retry_status(self, status: int) -> bool:
        """Say whether a response status is worth another attempt (429 and 5xx).

        :param status: the HTTP status code.
        """
        return status == 429 or status >= 500

    def delay(self, attempt: int, retry_after: float | None, timeout: float) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based).

        :param attempt: how many attempts failed before this one.
        :param retry_after: the server's ``Retry-After`` in seconds, honoured when larger.
        :param timeout: the request timeout, which also caps the wait.
        """
        backoff = self.base_delay * 2.0**attempt * random.uniform(1 - self.jitter, 1 + self.jitter)
        wait = max(backoff, retry_after) if retry_after is not None else backoff
        return max(0.0, min(wait, timeout, self.max_delay))


NO_RETRY = RetryPolicy()


@dataclass(frozen=True)
class RerankAPI:
    """The declared wire format of one rerank endpoint.

    :param provider: the provider name, used in error messages.
    :param documents_key: the request key that holds the texts.
    :param extra: fixed request fields, such as the model.
    :param count_key: a request key that receives the number of texts (``top_n``), if any.
    :param results_key: the response key of the results list; ``None`` when the body is the list.
    :param score_key: the result key of the score.
    :param index_key: the result key of the input position.
    """

    provider: str
    documents_key: str = "documents"
    extra: Mapping[str, Any] = field(default_factory=dict)
    count_key: str | None = None
    results_key: str | None = "results"
    score_key: str = "relevance_score"
    index_key: str = "index"

    def body(self, query: str, documents: Sequence[str]) -> dict[str, Any]:
        """The request JSON for one batch.

        :param query: the query.
        :param documents: the batch's texts.
        """
        body: dict[str, Any] = {"query": query, self.documents_key: list(documents), **self.extra}
        if self.count_key:
            body[self.count_key] = len(documents)
        return body

    def scores(self, payload: Any, count: int, where: str) -> list[float]:
        """Map a response body back to one score per document, in input order.

        :param payload: the decoded response JSON.
        :param count: how many documents the request carried.
        :param where: ``"<provider>: POST <url>"``, to start error messages with.
        """
        if self.results_key is None:
            results = payload
        else:
            results = payload.get(self.results_key) if isinstance(payload, dict) else None
        if not isinstance(results, list):
            shape = f"an object with a {self.results_key!r} list" if self.results_key else "a JSON list"
            raise RerankerHTTPError(f"{where}: malformed body, expected {shape}, got {repr(payload)[:120]}")
        if len(results) != count:
            raise RerankerHTTPError(f"{where}: sent {count} documents but got {len(results)} scores back")
        scores: list[float | None] = [None] * count
        for item in results:
            index = item.get(self.index_key) if isinstance(item, dict) else None
            score = item.get(self.score_key) if isinstance(item, dict) else None
            if not _is_number(score) or type(index) is not int:
                raise RerankerHTTPError(
                    f"{where}: malformed result {repr(item)[:120]}, expected integer "
                    f"{self.index_key!r} and numeric {self.score_key!r}"
                )
            if not 0 <= index < count:
                raise RerankerHTTPError(f"{where}: result index {index} is out of range 0..{count - 1}")
            if scores[index] is not None:
                raise RerankerHTTPError(f"{where}: result index {index} appears more than once")
            scores[index] = float(score)
        return [s for s in scores if s is not None]


def shared_limit(key: str, limit: int) -> asyncio.Semaphore:
    """The semaphore that every instance using ``key`` and ``limit`` shares in this process.

    :param key: who shares it, e.g. the provider name.
    :param limit: how many holders may run at once.
    """
    per_loop = _LIMITS.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault((key, limit), asyncio.Semaphore(limit))


async def run_all(calls: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``calls`` concurrently and return their results in order; the first failure is raised as it is.

    The other calls are cancelled at once, so no request keeps running for a result nobody will read.

    :param calls: the coroutines.
    """
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(call) for call in calls]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


class RerankHTTP:
    """One provider instance's HTTP client: batching, a shared in-flight limit, retries, checks.

    The connection pool opens on first use.

    :param api: the declared wire format.
    :param url: the full rerank URL.
    :param timeout: seconds for each of connect, read, write and pool wait.
    :param headers: sent with every request (e.g. ``Authorization``).
    :param retry: the provider's retry policy.
    :param batch_size: documents per request; ``None`` sends all in one.
    :param max_concurrent: requests in flight across the process; ``None`` is unlimited.
    :param send_bank_header: add ``X-Hindsight-Bank-Id`` when a bank is given.
    """

    def __init__(
        self,
        api: RerankAPI,
        url: str,
        *,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy = NO_RETRY,
        batch_size: int | None = None,
        max_concurrent: int | None = None,
        send_bank_header: bool = False,
    ) -> None:
        self.api, self.url, self.timeout, self.retry = api, url, timeout, retry
        self.headers = dict(headers or {})
        self.batch_size, self.max_concurrent = batch_size, max_concurrent
        self.send_bank_header = send_bank_header
        self._client: httpx.AsyncClient | None = None

    async def score(self, query: str, documents: Sequence[str], *, bank_id: str | None = None) -> list[float]:
        """Score every document, sending batches concurrently; raw scores in input order.

        :param query: the query.
        :param documents: the texts.
        :param bank_id: the bank, forwarded as a header when configured.
        """
        headers = {BANK_HEADER: bank_id} if self.send_bank_header and bank_id is not None else {}
        size = self.batch_size or max(1, len(documents))
        batches = [documents[i : i + size] for i in range(0, len(documents), size)]
        scored = await run_all(self._score_batch(query, b, headers) for b in batches)
        return [s for batch in scored for s in batch]

    async def _score_batch(self, query: str, batch: Sequence[str], headers: dict[str, str]) -> list[float]:
        limit = shared_limit(self.api.provider, self.max_concurrent) if self.max_concurrent else None
        async with limit or contextlib.nullcontext():
            payload = await self.request("POST", self.url, json=self.api.body(query, batch), headers=headers)
        return self.api.scores(payload, len(batch), f"{self.api.provider}: POST {self.url}")

    async def request(
        self, method: str, url: str, *, json: Any = None, headers: Mapping[str, str] | None = None
    ) -> Any:
        """Send one request under the retry policy and return its decoded JSON body.

        :param method: ``GET`` or ``POST``.
        :param url: the full URL.
        :param json: the request body, if any.
        :param headers: extra headers for this request.
        """
        client = self._client or self._open()
        where = f"{self.api.provider}: {method} {url}"
        for attempt in range(self.retry.retries + 1):
            last = attempt == self.retry.retries
            try:
                response = await client.request(method, url, json=json, headers=headers)
            except _RETRYABLE_ERRORS as exc:
                if last:
                    raise RerankerHTTPError(
                        f"{where} timed out ({type(exc).__name__}, timeout {self.timeout:g} s, "
                        f"{attempt + 1} attempt(s)); raise the provider's timeout setting or check the server"
                    ) from exc
                await asyncio.sleep(self.retry.delay(attempt, None, self.timeout))
                continue
            except httpx.HTTPError as exc:
                raise RerankerHTTPError(
                    f"{where} failed: {exc!r}; check the URL and that the server runs"
                ) from exc
            if response.is_success:
                try:
                    return response.json()
                except ValueError:
                    raise RerankerHTTPError(
                        f"{where}: malformed body, not JSON: {response.text[:200]!r}"
                    ) from None
            if last or not self.retry.retry_status(response.status_code):
                raise RerankerHTTPError(
                    f"{where} answered HTTP {response.status_code} after {attempt + 1} attempt(s): "
                    f"{response.text[:300]!r}{_KEY_HINT.get(response.status_code, '')}"
                )
            await asyncio.sleep(self.retry.delay(attempt, retry_after(response), self.timeout))
        raise AssertionError("unreachable")  # pragma: no cover

    def _open(self) -> httpx.AsyncClient:
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), headers=self.headers)
        return self._client

    async def close(self) -> None:
        """Close the connection pool; the next request opens a new one."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


class HTTPReranker:
    """The shared body of remote rerankers: scoring and closing go through one :class:`RerankHTTP`."""

    name: str = ""
    passthrough = False
    _http: RerankHTTP

    async def score(self, query: str, documents: Sequence[str], *, bank_id: str | None = None) -> list[float]:
        """Score every document; raw scores in input order.

        :param query: the recall query.
        :param documents: the pair texts.
        :param bank_id: the bank, sent as a header when configured.
        """
        return await self._http.score(query, documents, bank_id=bank_id)

    async def start(self) -> None:
        """Nothing to load: the first request opens the connection."""
        return None

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.close()


def required_secret(secret: SecretStr | None, variable: str, what: str) -> str:
    """The secret's value, or :class:`MissingSetting` naming the variable when it is unset or empty.

    :param secret: the setting.
    :param variable: its environment variable.
    :param what: what it is, for the message.
    """
    value = secret.get_secret_value() if secret else ""
    if not value:
        raise MissingSetting(variable, what)
    return value


def retry_after(response: httpx.Response) -> float | None:
    """The response's ``Retry-After`` in seconds (a number or an HTTP date), or ``None``."""
    value = response.headers.get("Retry-After", "").strip()
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
