"""Webhook routes: register, list, change and delete a bank's webhooks, and read their deliveries.

A webhook's URL is checked when it is registered or changed (:func:`~.webhook_targets.check_url`);
its secret is never answered.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._params import bounded_int, path_text
from .base import bank_of, body_of, endpoint, engine_of, text_query
from .errors import ServiceError
from .schemas import _Body
from .webhook_targets import check_url
from .wire import answer


class HttpConfig(_Body):
    """Upstream's ``WebhookHttpConfig``."""

    method: Literal["GET", "POST"] = "POST"
    timeout_seconds: int = Field(30, ge=1, le=300)
    headers: dict[str, str] = Field(default_factory=dict, max_length=50)
    params: dict[str, str] = Field(default_factory=dict, max_length=50)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


EventType = Literal["retain.completed", "consolidation.completed", "memory_defense.triggered"]
EventTypes = list[EventType]


def _default_events() -> EventTypes:
    return ["consolidation.completed"]  # upstream's default


class CreateWebhookBody(_Body):
    """Upstream's ``CreateWebhookRequest``."""

    url: str = Field(min_length=1, max_length=2048)
    secret: str | None = Field(None, min_length=1, max_length=512)
    event_types: EventTypes = Field(default_factory=_default_events)
    enabled: bool = True
    http_config: HttpConfig = Field(default_factory=HttpConfig)


class UpdateWebhookBody(_Body):
    """Upstream's ``UpdateWebhookRequest``: only the fields sent change (``secret: null`` clears it)."""

    url: str | None = Field(None, min_length=1, max_length=2048)
    secret: str | None = Field(None, min_length=1, max_length=512)
    event_types: EventTypes | None = None
    enabled: bool | None = None
    http_config: HttpConfig | None = None


def _webhook_id(request: Request) -> uuid.UUID:
    raw = path_text(request, "webhook_id")
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ServiceError(422, "invalid_webhook_id", "Invalid webhook ID") from None


def _not_found() -> ServiceError:
    return ServiceError(404, "webhook_not_found", "Webhook not found")


def _answered(webhook: dict[str, Any]) -> dict[str, Any]:
    """A webhook as answered: its secret never leaves the server."""
    return {**webhook, "secret": None, "http_config": HttpConfig.model_validate(webhook["http_config"]).model_dump()}


@endpoint
async def create_webhook(request: Request) -> Response:
    bank_id = bank_of(request)
    body: CreateWebhookBody = await body_of(request, CreateWebhookBody)
    engine = engine_of(request)
    check_url(body.url, engine.settings)
    made = await engine.webhooks.create(bank_id, {**body.model_dump(), "event_types": list(
        dict.fromkeys(body.event_types))})
    return answer(request, "WebhookResponse", _answered(made), 201)


@endpoint
async def list_webhooks(request: Request) -> Response:
    bank_id = bank_of(request)
    limit, offset = bounded_int(request, "limit", 100, maximum=1000), bounded_int(request, "offset", 0)
    found, total = await engine_of(request).webhooks.page(bank_id, limit, offset)
    return answer(request, "WebhookListResponse", {"items": [_answered(w) for w in found], "total": total,
                                                   "limit": limit, "offset": offset})


@endpoint
async def update_webhook(request: Request) -> Response:
    bank_id, webhook_id = bank_of(request), _webhook_id(request)
    body: UpdateWebhookBody = await body_of(request, UpdateWebhookBody)
    changes = {k: getattr(body, k) for k in body.model_fields_set}
    if not changes:
        raise ServiceError(422, "invalid_request", "No fields provided to update")
    for name in ("url", "event_types", "enabled", "http_config"):
        if name in changes and changes[name] is None:
            raise ServiceError(422, "invalid_request", f"{name}: must not be null")
    engine = engine_of(request)
    if "url" in changes:
        check_url(changes["url"], engine.settings)
    if "http_config" in changes:
        changes["http_config"] = body.http_config.model_dump() if body.http_config else None
    updated = await engine.webhooks.update(bank_id, webhook_id, changes)
    if updated is None:
        raise _not_found()
    return answer(request, "WebhookResponse", _answered(updated))


@endpoint
async def delete_webhook(request: Request) -> Response:
    bank_id, webhook_id = bank_of(request), _webhook_id(request)
    if not await engine_of(request).webhooks.delete(bank_id, webhook_id):
        raise _not_found()
    return answer(request, "DeleteResponse", {"success": True})


def _iso(value: Any) -> str | None:
    return None if value is None else str(value.isoformat())


def _delivery(row: dict[str, Any]) -> dict[str, Any]:
    """A delivery (an operation) as upstream's ``WebhookDeliveryResponse``; the endpoint's answer withheld
    (it would let a caller read what any URL answers), its status shown."""
    task = json.loads(row["payload"] or "{}")
    meta = row["result"] or {}
    waiting = row["status"] == "pending" and row["not_before"] is not None
    return {"id": str(row["operation_id"]), "event_id": task.get("event_id"), "webhook_id": task.get("webhook_id"),
            "url": task.get("url", ""), "event_type": task.get("event_type", ""), "status": row["status"],
            "attempts": row["retry_count"] + 1, "next_retry_at": _iso(row["not_before"]) if waiting else None,
            "last_error": row["error_message"], "last_response_status": meta.get("last_status_code"),
            "last_attempt_at": meta.get("last_attempt_at"), "created_at": _iso(row["created_at"]),
            "updated_at": _iso(row["updated_at"])}


@endpoint
async def list_deliveries(request: Request) -> Response:
    """Newest first; ``cursor`` (the ``next_cursor`` of the page before) continues."""
    bank_id, webhook_id = bank_of(request), _webhook_id(request)
    limit = bounded_int(request, "limit", 50, minimum=1, maximum=200)
    cursor = text_query(request, "cursor", max_chars=64)
    before = None
    if cursor is not None:
        try:
            before = datetime.fromisoformat(cursor.replace("Z", "+00:00"))
        except ValueError:
            raise ServiceError(400, "invalid_request", f"cursor: {cursor!r} is not a next_cursor") from None
    rows = await engine_of(request).webhooks.deliveries(bank_id, webhook_id, limit, before)
    if rows is None:
        raise _not_found()
    page = rows[:limit]
    more = len(rows) > limit
    return answer(request, "WebhookDeliveryListResponse", {
        "items": [_delivery(r) for r in page], "next_cursor": _iso(page[-1]["created_at"]) if more else None})


def routes(banks_path: str) -> list[Route]:
    path = f"{banks_path}/webhooks"
    return [
        Route(path, create_webhook, methods=["POST"]),
        Route(path, list_webhooks, methods=["GET"]),
        Route(f"{path}/{{webhook_id}}/deliveries", list_deliveries, methods=["GET"]),
        Route(f"{path}/{{webhook_id}}", update_webhook, methods=["PATCH"]),
        Route(f"{path}/{{webhook_id}}", delete_webhook, methods=["DELETE"]),
    ]

