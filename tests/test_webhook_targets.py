"""A webhook's host is resolved once per connection, every address checked, and the connection made to an
address that passed: a name rebound to 127.0.0.1 after the check never reaches a loopback server. The
resolver and the network are given by the tests (no real DNS, nothing leaves the machine)."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import httpcore
import httpx
import pytest
from hindsight_recall import Engine, load_settings
from hindsight_recall.engine.webhooks import RETAIN_COMPLETED, Retained
from hindsight_recall.service import webhook_delivery, webhook_targets
from hindsight_recall.testing.http_server import FixtureServer, Reply
from sqlalchemy import text

PUBLIC = "93.184.216.34"  # public-looking; the test network routes it to a server on 127.0.0.1


@pytest.fixture
def loopback() -> Iterator[FixtureServer]:
    """What a rebound name would reach: a server on 127.0.0.1 that must get nothing."""
    with FixtureServer({("POST", "/hook"): lambda r: Reply(200, {"reached": "loopback"})}) as server:
        yield server


@pytest.fixture
def public() -> Iterator[FixtureServer]:
    """The webhook's real endpoint, at PUBLIC as far as the client can tell."""
    with FixtureServer({("POST", "/hook"): lambda r: Reply(200, {"reached": "public"})}) as server:
        yield server


class Network(httpcore.AsyncNetworkBackend):
    """The machine's network, except that PUBLIC leads to ``public``; records every connection asked for."""

    def __init__(self, public: FixtureServer) -> None:
        self.asked: list[tuple[str, int]] = []
        self._public_port = int(public.url.rsplit(":", 1)[1])
        self._real = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        self.asked.append((host, port))
        if host == PUBLIC:
            host, port = "127.0.0.1", self._public_port
        return await self._real.connect_tcp(host, port, timeout, local_address, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._real.sleep(seconds)


def resolver(*answers: Sequence[str]) -> tuple[webhook_targets.Resolve, list[str]]:
    """A resolver answering ``answers`` in turn (the last one from then on), and the hosts it was asked."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        asked.append(host)
        return answers[min(len(asked), len(answers)) - 1]

    return resolve, asked


def _port(server: FixtureServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


async def test_a_name_rebound_to_loopback_after_its_check_never_reaches_loopback(
    loopback: FixtureServer, public: FixtureServer
) -> None:
    resolve, asked = resolver([PUBLIC], ["127.0.0.1"])
    network = Network(public)
    url = f"http://hooks.example:{_port(loopback)}/hook"
    async with webhook_targets.client(load_settings(), resolve, network) as client:
        reply = await client.post(url, content=b"{}")
    assert reply.json() == {"reached": "public"} and asked == ["hooks.example"]  # resolved once, for the check
    assert network.asked == [(PUBLIC, _port(loopback))]  # connected where the check looked
    sent = public.requests_to("POST", "/hook")
    assert [r.headers["host"] for r in sent] == [f"hooks.example:{_port(loopback)}"]
    # a new connection resolves again: now 127.0.0.1, refused before any connection is made
    async with webhook_targets.client(load_settings(), resolve, network) as client:
        with pytest.raises(webhook_targets.Refused, match=r"hooks.example resolves to a private address \(127"):
            await client.post(url, content=b"{}")
    assert loopback.requests == [] and len(network.asked) == 1


@pytest.mark.parametrize("answer", [["10.1.2.3"], [PUBLIC, "127.0.0.1"], ["::1"], ["::ffff:127.0.0.1"],
                                    ["169.254.169.254"], ["100.64.0.1"], []])
async def test_any_private_address_among_the_answers_refuses_the_host(public: FixtureServer,
                                                                      answer: list[str]) -> None:
    resolve, _ = resolver(answer)
    network = Network(public)
    async with webhook_targets.client(load_settings(), resolve, network) as client:
        with pytest.raises(webhook_targets.Refused, match="hooks.example"):
            await client.post("http://hooks.example/hook", content=b"{}")
    assert network.asked == [] and public.requests == []


async def test_an_allowed_host_is_connected_to_as_named(loopback: FixtureServer, public: FixtureServer) -> None:
    resolve, asked = resolver(["127.0.0.1"])
    network = Network(public)
    async with webhook_targets.client(load_settings(webhook_allowed_hosts="127.0.0.1"), resolve, network) as client:
        assert (await client.post(f"{loopback.url}/hook", content=b"{}")).json() == {"reached": "loopback"}
    assert asked == [] and network.asked == [("127.0.0.1", _port(loopback))]


async def test_tls_is_started_for_the_host_name_at_the_checked_address() -> None:
    started: list[str | None] = []

    class Stream(httpcore.AsyncNetworkStream):
        async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                            timeout: float | None = None) -> httpcore.AsyncNetworkStream:
            started.append(server_hostname)
            raise httpcore.ConnectError("stopped here")

        async def aclose(self) -> None:
            pass

    class Recorded(httpcore.AsyncNetworkBackend):
        asked: list[str] = []

        async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                              local_address: str | None = None,
                              socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
            self.asked.append(f"{host}:{port}")
            return Stream()

    resolve, _ = resolver([PUBLIC])
    network = Recorded()
    async with webhook_targets.client(load_settings(), resolve, network) as client:
        with pytest.raises(httpx.ConnectError, match="stopped here"):
            await client.post("https://hooks.example/hook", content=b"{}")
    assert network.asked == [f"{PUBLIC}:443"] and started == ["hooks.example"]


# ---- through a delivery -------------------------------------------------------------------------------------


async def _claimed_delivery(engine: Engine, bank: str, url: str) -> Any:
    """The delivery of one ``retain.completed`` to a webhook at ``url``, claimed as a worker claims it."""
    await engine.webhooks.create(bank, {"url": url, "secret": None, "event_types": [RETAIN_COMPLETED],
                                        "enabled": True, "http_config": {"timeout_seconds": 5}})
    await engine.retain(bank, [{"id": "a", "text": "Alice runs."}], within=Retained(bank, [(None, [])]))
    while await engine.webhooks.dispatch():
        pass
    async with engine.db.connect() as conn:
        operation_id = await conn.scalar(text(
            "SELECT operation_id FROM operations WHERE bank_id = :b AND operation_type = 'webhook_delivery'"),
            {"b": bank})
    op = await engine.operations.claim(bank, operation_id, f"test-{uuid.uuid4().hex[:6]}", 30)
    assert op is not None
    return op


async def test_a_delivery_goes_to_the_checked_address_and_a_rebound_one_fails(
    engine: Engine, bank: str, loopback: FixtureServer, public: FixtureServer
) -> None:
    url = f"http://hooks.example:{_port(loopback)}/hook"
    op = await _claimed_delivery(engine, bank, url)
    resolve, _ = resolver([PUBLIC], ["127.0.0.1"])
    async with webhook_targets.client(engine.settings, resolve, Network(public)) as client:
        done = await webhook_delivery.deliver(engine, op, client)
    assert done["last_status_code"] == 200 and len(public.requests) == 1 and loopback.requests == []
    assert public.requests[0].headers["x-hindsight-event"] == RETAIN_COMPLETED
    rebound = await _claimed_delivery(engine, f"{bank}-2", url)
    async with webhook_targets.client(engine.settings, resolve, Network(public)) as client:
        with pytest.raises(webhook_delivery.DeliveryFailed, match="resolves to a private address"):
            await webhook_delivery.deliver(engine, rebound, client)  # failed at once: a retry would not help
    assert loopback.requests == []
