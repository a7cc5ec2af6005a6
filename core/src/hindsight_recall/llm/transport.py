"""One provider's HTTP client: a deadline per attempt, retries with backoff on 429/5xx, JSON or SSE bodies.

Every provider's wire format differs, but what can go wrong on the way does not: this module owns
the status checks, ``Retry-After``, timeouts and the process-wide limit of calls in flight, so a
provider module only builds its request body and reads its reply. The API key travels in a header
and is scrubbed from every message this module raises; nothing here logs a request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import PREFIX
from ..http import RetryPolicy, retry_after, shared_limit
from .errors import LLMError, LLMTimeout

_KEY_HINT = {401: "; check HINDSIGHT_API_LLM_API_KEY", 403: "; check HINDSIGHT_API_LLM_API_KEY",
             404: "; check HINDSIGHT_API_LLM_BASE_URL and HINDSIGHT_API_LLM_MODEL"}
#: a connection attempt never waits longer than this, whatever the request timeout (a dead host fails fast)
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Event:
    """One server-sent event: its ``event:`` name (if any) and its ``data:`` decoded as JSON."""

    name: str | None
    data: Any


class LLMHTTP:
    """The HTTP side of one provider instance; the connection pool opens on first use.

    :param provider: the provider name, to start messages with.
    :param timeout: seconds one attempt may take, from sending to the last byte of the reply.
    :param timeout_variable: the variable that set ``timeout``, which a timeout's message tells to raise.
    :param retry: when to try again.
    :param headers: sent with every request (the API key among them).
    :param max_concurrent: calls in flight across the process for this provider.
    :param secrets: values to scrub from messages (the API key).
    """

    def __init__(self, provider: str, *, timeout: float, retry: RetryPolicy, headers: Mapping[str, str],
                 max_concurrent: int, secrets: Iterable[str] = (),
                 timeout_variable: str = f"{PREFIX}LLM_TIMEOUT") -> None:
        self.provider, self.timeout, self.retry = provider, timeout, retry
        self.timeout_variable = timeout_variable
        self.headers = dict(headers)
        self.max_concurrent = max_concurrent
        self._secrets = tuple(s for s in secrets if s)
        self._client: httpx.AsyncClient | None = None

    async def post(self, url: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` as JSON and return the decoded JSON reply.

        :param url: the full URL.
        :param body: the request body.
        """
        return await self._send(url, body, stream=False)

    async def stream(self, url: str, body: Mapping[str, Any]) -> list[Event]:
        """POST ``body`` and read the server-sent events of the reply to its end.

        The whole stream is one attempt: a retry starts it again, and the deadline covers every event.

        :param url: the full URL.
        :param body: the request body.
        """
        events: list[Event] = await self._send(url, body, stream=True)
        return events

    async def _send(self, url: str, body: Mapping[str, Any], *, stream: bool) -> Any:
        where = f"{self.provider}: POST {url}"
        async with shared_limit(f"llm:{self.provider}", self.max_concurrent):
            for attempt in range(self.retry.retries + 1):
                last = attempt == self.retry.retries
                try:
                    async with asyncio.timeout(self.timeout):
                        status, payload, wait = await self._attempt(url, body, stream, where)
                except TimeoutError:
                    if last:
                        raise LLMTimeout(
                            f"{where} did not answer within {self.timeout_variable}={self.timeout:g} s "
                            f"({attempt + 1} attempt(s)); raise it for a slow model, or check the server"
                        ) from None
                    await asyncio.sleep(self.retry.delay(attempt, None, self.timeout))
                    continue
                if status is None:
                    return payload
                if last or not self.retry.retry_status(status):
                    error = LLMError(self.scrub(
                        f"{where} answered HTTP {status} after {attempt + 1} attempt(s): "
                        f"{payload[:300]!r}{_KEY_HINT.get(status, '')}"))
                    error.answered = status
                    raise error
                await asyncio.sleep(self.retry.delay(attempt, wait, self.timeout))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(self, url: str, body: Mapping[str, Any], stream: bool,
                       where: str) -> tuple[int | None, Any, float | None]:
        """``(None, reply, None)`` on success, else ``(status, body text, Retry-After)``."""
        client = self._client or self._open()
        try:
            async with client.stream("POST", url, json=body) as response:
                if not response.is_success:
                    text = (await response.aread()).decode("utf-8", "replace")
                    return response.status_code, text, retry_after(response)
                if stream:
                    return None, [e async for e in _events(response, where)], None
                raw = await response.aread()
        except httpx.TimeoutException:
            raise TimeoutError from None
        except httpx.HTTPError as exc:
            raise LLMError(self.scrub(
                f"{where} failed: {type(exc).__name__}: {exc}; check HINDSIGHT_API_LLM_BASE_URL and that the "
                "server runs")) from None
        try:
            return None, json.loads(raw), None
        except ValueError:
            raise LLMError(self.scrub(f"{where}: malformed reply, not JSON: {raw[:200]!r}")) from None

    def scrub(self, message: str) -> str:
        """``message`` with every secret replaced by ``***``.

        :param message: text that may quote a request or a server's echo of it.
        """
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message

    def _open(self) -> httpx.AsyncClient:
        timeout = httpx.Timeout(self.timeout, connect=min(CONNECT_TIMEOUT, self.timeout))
        self._client = httpx.AsyncClient(timeout=timeout, headers=self.headers)
        return self._client

    async def close(self) -> None:
        """Close the connection pool; the next call opens a new one."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


async def _events(response: httpx.Response, where: str) -> AsyncIterator[Event]:
    """The server-sent events of ``response`` (``text/event-stream``), until ``[DONE]`` or its end."""
    name: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if line:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            continue
        if data:
            text = "\n".join(data)
            if text.strip() == "[DONE]":
                return
            yield Event(name, _decode(text, where))
        name, data = None, []
    if data and "\n".join(data).strip() != "[DONE]":
        yield Event(name, _decode("\n".join(data), where))


def _decode(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise LLMError(f"{where}: malformed event in the stream, not JSON: {text[:200]!r}") from None


def join_url(base: str, path: str) -> str:
    """``base`` (with or without a trailing slash) followed by ``path``.

    :param base: the configured base URL.
    :param path: the endpoint's path, starting with ``/``.
    """
    return base.rstrip("/") + path


def retry_policy(retries: int, initial: float, maximum: float) -> RetryPolicy:
    """The retry policy of the ``HINDSIGHT_API_LLM_*`` settings.

    :param retries: ``LLM_MAX_RETRIES``, attempts after the first.
    :param initial: ``LLM_INITIAL_BACKOFF``, the first wait in seconds.
    :param maximum: ``LLM_MAX_BACKOFF``, the longest wait (a larger ``Retry-After`` is cut to it).
    """
    return RetryPolicy(retries=retries, base_delay=initial, max_delay=maximum, jitter=0.25)
