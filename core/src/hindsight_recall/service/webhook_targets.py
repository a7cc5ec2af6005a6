"""Where a webhook may point, and the HTTP client that connects only there.

A webhook is a request this server makes on a caller's behalf: one naming a private, loopback, link-local
or reserved address is refused unless its host is in WEBHOOK_ALLOWED_HOSTS, when it is registered (as
written, :func:`check_url`) and when a delivery connects (as resolved). A delivery resolves the host
once, checks every address it got, and connects to an address that passed: a name that answers a public
address to the check and a private one a moment later (DNS rebinding) never reaches the private one. The
``Host`` header, TLS's server name and the certificate check stay on the host name.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from ..settings import Settings
from .errors import ServiceError

#: ``(host, port) -> its addresses``: how a delivery resolves a host (tests give their own)
Resolve = Callable[[str, int], Awaitable[Sequence[str]]]


class Refused(Exception):
    """The webhook's host resolves to an address it may not be sent to, or not at all: not worth a retry."""


def allowed_hosts(settings: Settings) -> set[str]:
    """The hosts of WEBHOOK_ALLOWED_HOSTS, lower-cased."""
    return {h.strip().lower() for h in settings.webhook_allowed_hosts.split(",") if h.strip()}


def is_private(address: str) -> bool:
    """Whether an IP address is private, loopback, link-local, reserved or shared (100.64.0.0/10)."""
    ip = ipaddress.ip_address(address)
    return not ip.is_global or ip in ipaddress.ip_network("100.64.0.0/10")


def check_url(url: str, settings: Settings) -> None:
    """400 unless ``url`` is http(s) with a host that is public or allowed (an address checked as written)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise ServiceError(400, "invalid_webhook_url", f"url: {url[:200]!r} is not an http or https URL")
    if host in allowed_hosts(settings):
        return
    try:
        private = is_private(host)
    except ValueError:
        private = host == "localhost" or host.endswith(".localhost")
    if private:
        raise ServiceError(400, "invalid_webhook_url", f"url: {host} is a private, loopback or reserved address; "
                           "allow it with HINDSIGHT_API_WEBHOOK_ALLOWED_HOSTS")


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order.

    :param host: a host name or an address.
    :param port: the port to be connected to.
    """
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


class PinnedNetwork(httpcore.AsyncNetworkBackend):
    """Opens a webhook's connections: to an allowed host as named, to any other only at an address its one
    resolution gave and the check passed.

    :param settings: the service's settings (WEBHOOK_ALLOWED_HOSTS).
    :param resolve: how a host is resolved.
    :param network: what opens the connections (default: httpcore's own).
    """

    def __init__(self, settings: Settings, resolve: Resolve = resolve,
                 network: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._allowed = allowed_hosts(settings)
        self._resolve = resolve
        self._network = network or httpcore.AnyIOBackend()

    async def addresses(self, host: str, port: int, timeout: float | None = None) -> list[str]:
        """The addresses a connection to ``host`` may use: all it resolves to, each checked.

        :raises Refused: it resolves to a private address, or not at all.
        """
        try:
            async with asyncio.timeout(timeout):
                found = list(await self._resolve(host, port))
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} took over {timeout:g} s") from None
        except OSError as exc:
            raise Refused(f"{host} does not resolve: {exc}") from None
        private = sorted({a for a in found if is_private(a)})
        if private:
            raise Refused(f"{host} resolves to a private address ({private[0]})")
        if not found:
            raise Refused(f"{host} does not resolve")
        return found

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        if host.lower() in self._allowed:
            return await self._network.connect_tcp(host, port, timeout, local_address, socket_options)
        *others, last = await self.addresses(host, port, timeout)
        for address in others:
            with contextlib.suppress(httpcore.ConnectError, httpcore.ConnectTimeout):  # the next one may answer
                return await self._network.connect_tcp(address, port, timeout, local_address, socket_options)
        return await self._network.connect_tcp(last, port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise Refused("a webhook cannot be sent to a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._network.sleep(seconds)


class _PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport, over a pool whose connections :class:`PinnedNetwork` opens."""

    def __init__(self, network: PinnedNetwork) -> None:
        super().__init__()
        # httpx gives no way to choose its pool's network backend: the pool is made again as httpx makes
        # it (its default limits and certificate check), with the network given
        self._pool = httpcore.AsyncConnectionPool(ssl_context=httpx.create_ssl_context(), max_connections=100,
                                                  max_keepalive_connections=20, keepalive_expiry=5.0,
                                                  network_backend=network)


def client(settings: Settings, resolve: Resolve = resolve,
           network: httpcore.AsyncNetworkBackend | None = None) -> httpx.AsyncClient:
    """The HTTP client of webhook deliveries: redirects not followed, no proxy from the environment (it
    would connect in our stead), every connection through :class:`PinnedNetwork`.

    :param settings: the service's settings.
    :param resolve: how hosts are resolved.
    :param network: what opens the connections (default: httpcore's own).
    """
    return httpx.AsyncClient(transport=_PinnedTransport(PinnedNetwork(settings, resolve, network)),
                             follow_redirects=False, trust_env=False)
