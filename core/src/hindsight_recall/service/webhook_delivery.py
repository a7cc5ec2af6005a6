"""Webhook events and their delivery, as upstream Hindsight sends them.

An event (``retain.completed`` after each retained item) is written with the retain, in its transaction
(an outbox), and becomes one queued operation per subscribed webhook when a queue worker takes it out
(the engine's webhooks do both); the worker sends each from its own lane, so a slow or failing endpoint
never holds back a retain, and an event whose process died before it was queued is queued by the next.
A failed attempt is tried again after ``WEBHOOK_RETRY_DELAYS`` (upstream's 5 s, 5 min, 30 min, 2 h, 5 h),
then the delivery fails.

Each request carries upstream's headers: ``X-Hindsight-Event``, ``X-Hindsight-Event-Id`` (the same for
every webhook and attempt: receivers dedupe on it), ``X-Hindsight-Delivery-Id`` (the operation), and
with a secret ``X-Hindsight-Signature`` and ``X-Hub-Signature-256`` (``sha256=`` HMAC-SHA256 of the
body) and ``X-Hindsight-Signature-V2`` (``t=<unix seconds>,v1=`` HMAC-SHA256 of ``"<t>.<body>"``). Where
a webhook may point, and the client that connects only there, are in :mod:`.webhook_targets`.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from ..engine import Engine
from ..engine.operations import Operation
from .webhook_targets import Refused

#: how much of an endpoint's answer a delivery keeps
MAX_KEPT_BODY = 2048


class RetryLater(Exception):
    """An attempt failed and the delivery has attempts left: queue it again in ``seconds``."""

    def __init__(self, seconds: float, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.seconds, self.message, self.result = seconds, message, result


class DeliveryFailed(Exception):
    """An attempt failed and no attempt is left (or none can succeed): the delivery fails."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def sign(secret: str, body: bytes) -> str:
    """Upstream's body signature: ``sha256=<hex>``, GitHub's construction."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_v2(secret: str, body: bytes, timestamp: int) -> str:
    """Upstream's timestamped signature, ``t=<unix seconds>,v1=<hex>`` over ``"<t>.<body>"``: a receiver
    that checks ``t`` against a tolerance refuses replayed deliveries."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


async def deliver(engine: Engine, op: Operation, client: httpx.AsyncClient) -> dict[str, Any]:
    """Make one attempt at the delivery ``op``; its result metadata. Raises :class:`RetryLater` or
    :class:`DeliveryFailed` when the endpoint failed."""
    task, exists, secret = await engine.webhooks.delivery(op)
    result: dict[str, Any] = {"last_status_code": None, "last_response_body": None,
                              "last_attempt_at": _iso(datetime.now(UTC))}
    if not exists:
        raise DeliveryFailed("the webhook was deleted", result)
    body, config = task["body"].encode(), task.get("http_config") or {}
    headers = {"Content-Type": "application/json", **(config.get("headers") or {}),
               "X-Hindsight-Event": task["event_type"], "X-Hindsight-Event-Id": task["event_id"],
               "X-Hindsight-Delivery-Id": str(op.operation_id)}
    if secret:
        headers["X-Hindsight-Signature"] = headers["X-Hub-Signature-256"] = sign(secret, body)
        headers["X-Hindsight-Signature-V2"] = sign_v2(secret, body, int(time.time()))
    get = str(config.get("method", "POST")).upper() == "GET"
    try:
        response = await client.request("GET" if get else "POST", task["url"], headers=headers,
                                        params=config.get("params") or None, content=None if get else body,
                                        timeout=float(config.get("timeout_seconds", 30)))
    except Refused as refused:  # the host's addresses are checked when it connects: never allowed by trying again
        raise DeliveryFailed(str(refused), result) from None
    except httpx.HTTPError as exc:
        problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    else:
        result.update(last_status_code=response.status_code, last_response_body=response.text[:MAX_KEPT_BODY])
        if response.is_success:
            return result
        problem = f"the endpoint answered {response.status_code}"
    delays = engine.settings.webhook_retry_delays
    if op.retry_count < len(delays):
        raise RetryLater(delays[op.retry_count], problem, result)
    raise DeliveryFailed(f"{problem} (attempt {op.retry_count + 1} of {len(delays) + 1})", result)
