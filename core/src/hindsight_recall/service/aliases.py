"""Bank aliases: their routes, and the one place an aliased bank id becomes the bank's own.

:class:`AliasRouting` rewrites the bank segment of every ``/v1/default/banks/{bank_id}...`` path before
routing, so no handler knows aliases exist. It asks :class:`AliasResolver`, which keeps every alias
of the database in memory: a process listens on the aliases' notification channel, and each change
(sent at commit by whichever process made it) reloads the map, so a request never pays a database
round trip for its bank id and no process routes by a stale map for longer than a notification takes.
While the listening connection is down the map is not trusted: each request then looks its id up.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine.aliases import AliasResolver as AliasResolver  # re-exported: what AliasRouting asks
from ..errors import InvalidRequest
from .base import bank_of, body_of, endpoint, engine_of
from .errors import ServiceError
from .ops import ASGIApp, Message, Receive, Scope, Send
from .schemas import CreateAliasBody, SetAliasPrimaryBody
from .wire import answer

log = logging.getLogger("hindsight_recall.service")

#: the path every bank-scoped route starts with, split on "/": ["", "v1", "default", "banks", id, ...]
BANKS_PREFIX = "/v1/default/banks/"
class AliasRouting:
    """ASGI step between the guard and the routes: a bank path naming an alias is rewritten to its bank.

    Runs only once the service is ready (the guard answers before that) and costs a dict lookup.
    """

    def __init__(self, app: ASGIApp, resolver: AliasResolver) -> None:
        self.app, self.resolver = app, resolver

    @property
    def state(self) -> Any:
        """The application's state, as the app's own (what the guard and tests reach through)."""
        return self.app.state  # type: ignore[attr-defined]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith(BANKS_PREFIX):
            await self.app(scope, receive, send)
            return
        given, sep, rest = path[len(BANKS_PREFIX):].partition("/")
        if given and "\x00" not in given:
            bank = await self.resolver.resolve(given)
            if bank != given:
                scope["path"] = f"{BANKS_PREFIX}{bank}{sep}{rest}"
                scope["raw_path"] = quote(scope["path"]).encode()
                scope["hindsight.alias"] = given
        if scope.get("method") == "GET" or (rest and not rest.startswith("aliases")):
            await self.app(scope, receive, send)
            return

        async def send_refreshed(message: Message) -> None:
            # a bank deleted (its aliases with it) or an alias changed by this process: its next request
            # must see it, so the map is reloaded (the change is committed) before the answer goes out
            if message["type"] == "http.response.start":
                await self.resolver.refresh()
            await send(message)

        await self.app(scope, receive, send_refreshed)


def _answer(request: Request, bank_id: str, listed: list[dict[str, Any]], status: int = 200) -> Response:
    return answer(request, "BankAliasesResponse", {"bank_id": bank_id, "aliases": listed}, status)


async def _aliases_after(request: Request, change: Any, status: int = 200) -> Response:
    """Run ``change(bank_id)`` (an engine call; None when nothing is to change) and answer with the bank's
    aliases."""
    bank_id = bank_of(request)
    parts = engine_of(request).aliases
    if change is None:
        listed = await parts.of(bank_id)
    else:
        try:
            done, listed = await change(parts, bank_id)
        except InvalidRequest as exc:
            if exc.status == 409:
                raise ServiceError(409, "alias_taken", str(exc)) from None
            raise
        if done is False:
            alias = request.path_params["alias"]
            raise ServiceError(404, "alias_not_found", f"Bank '{bank_id}' has no alias '{alias}'")
    return _answer(request, bank_id, listed, status)


@endpoint
async def list_aliases(request: Request) -> Response:
    return await _aliases_after(request, None)


@endpoint
async def create_alias(request: Request) -> Response:
    body: CreateAliasBody = await body_of(request, CreateAliasBody)
    return await _aliases_after(
        request, lambda parts, bank: parts.create(bank, body.alias, primary=body.primary), 201)


@endpoint
async def set_alias_primary(request: Request) -> Response:
    body: SetAliasPrimaryBody = await body_of(request, SetAliasPrimaryBody)
    alias = request.path_params["alias"]
    return await _aliases_after(request, lambda parts, bank: parts.set_primary(bank, alias, body.primary))


@endpoint
async def delete_alias(request: Request) -> Response:
    alias = request.path_params["alias"]
    return await _aliases_after(request, lambda parts, bank: parts.delete(bank, alias))


def routes(banks_path: str) -> list[Route]:
    return [
        Route(f"{banks_path}/aliases", list_aliases, methods=["GET"]),
        Route(f"{banks_path}/aliases", create_alias, methods=["POST"]),
        Route(f"{banks_path}/aliases/{{alias}}", set_alias_primary, methods=["PATCH"]),
        Route(f"{banks_path}/aliases/{{alias}}", delete_alias, methods=["DELETE"]),
    ]
