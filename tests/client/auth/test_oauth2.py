"""AuthenticationOauth2 end to end: a broker with token authentication trusts the key a local
issuer (``tests/oauth2_server.py``) signs its access tokens with; our client gets a token with
the client credentials grant and produces and consumes, over ``pulsar://`` and with lookups
over ``https://``; the token is renewed when the broker challenges it; the same credentials
file works with the official client, each client reading what the other wrote."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

import client.asyncio as client_asyncio
from client import (
    AsyncClient,
    AuthenticationError,
    AuthenticationOauth2,
    Client,
    InitialPosition,
)
from tests.helpers import wait_until_async
from tests.integration.security_setup import (
    NAMESPACE,
    SUPERUSER,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)
from tests.oauth2_server import OAuth2Server

pytestmark = pytest.mark.integration
APP, APP_SECRET, ROLE = "magnetar-app", "app-secret", "oauth2-app"
AUDIENCE = "urn:magnetar:test"
TOPIC = f"persistent://{NAMESPACE}/oauth2"


@dataclass
class Setup:
    secure: SecureBroker
    issuer: OAuth2Server
    credentials: Path

    def params(self, private_key: str | None = None, **extra: str) -> str:
        return json.dumps(
            {
                "type": "client_credentials",
                "issuer_url": self.issuer.issuer_url,
                "private_key": f"file://{self.credentials}" if private_key is None else private_key,
                "audience": AUDIENCE,
                **extra,
            }
        )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("oauth2")
    secure = start_secure_broker(directory, authentication_refresh_check_seconds=1)
    try:
        set_up_acme(secure)
        status, _ = secure.http(
            "POST",
            f"/admin/v2/namespaces/{NAMESPACE}/permissions/{ROLE}",
            role=SUPERUSER,
            body=["produce", "consume"],
        )
        assert status == 204, status
        with OAuth2Server(secure.secret, {APP: (APP_SECRET, ROLE)}) as issuer:
            yield Setup(secure, issuer, issuer.credentials_file(directory, APP))
    finally:
        secure.broker.stop()


async def _round_trip(client: AsyncClient, topic: str) -> None:
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    producer = await client.create_producer(topic)
    await producer.send(b"hi")
    message = await consumer.receive()
    assert message.data() == b"hi"
    consumer.acknowledge(message)


@pytest.mark.parametrize("form", ["file://", "file:", "path", "data"])
async def test_client_credentials_produce_and_consume(setup: Setup, form: str) -> None:
    key = {
        "file://": f"file://{setup.credentials}",
        "file:": f"file:{setup.credentials}",
        "path": str(setup.credentials),
        "data": setup.issuer.credentials_data_url(APP),
    }[form]
    before = setup.issuer.requests_count()
    auth = AuthenticationOauth2(setup.params(key, scope="pulsar"))
    async with AsyncClient(
        setup.secure.url, operation_timeout_seconds=10, authentication=auth
    ) as client:
        await _round_trip(client, f"{TOPIC}-{form.strip(':/')}")
    # One token for every connection of the client, asked for as RFC 6749 section 4.4 says.
    assert setup.issuer.requests_count() == before + 1
    assert setup.issuer.token_requests[-1] == {
        "grant_type": "client_credentials",
        "client_id": APP,
        "client_secret": APP_SECRET,
        "audience": AUDIENCE,
        "scope": "pulsar",
    }


async def test_the_asyncio_api_takes_it_too(setup: Setup) -> None:
    # As pulsar.asyncio.Client(service_url, authentication=...) is used.
    topic = f"{TOPIC}-asyncio"
    client = client_asyncio.Client(
        setup.secure.url, authentication=AuthenticationOauth2(setup.params())
    )
    try:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(topic)
        await producer.send(b"asyncio")
        assert (await consumer.receive()).data() == b"asyncio"
    finally:
        await client.close()


async def test_https_lookups_carry_the_bearer_token(setup: Setup) -> None:
    auth = AuthenticationOauth2(setup.params())
    async with AsyncClient(
        setup.secure.https,
        operation_timeout_seconds=10,
        authentication=auth,
        tls_trust_certs_file_path=str(setup.secure.pki.ca_file),
    ) as client:
        await _round_trip(client, f"{TOPIC}-https")


async def test_a_challenged_token_is_renewed_on_the_live_connection(setup: Setup) -> None:
    # The tokens last 2 s but are advertised for an hour: only the broker's challenges can
    # make the client fetch again, and it must, though its own clock calls the token fresh.
    setup.issuer.token_lifetime = 2
    try:
        auth = AuthenticationOauth2(setup.params())
        async with AsyncClient(
            setup.secure.url, operation_timeout_seconds=10, authentication=auth
        ) as client:
            consumer = await client.subscribe(TOPIC + "-refresh", "s")
            producer = await client.create_producer(TOPIC + "-refresh")
            connections = client._pool.connections
            first = setup.issuer.requests_count()
            await wait_until_async(lambda: setup.issuer.requests_count() >= first + 2, 15)
            await producer.send(b"still here")
            assert (await consumer.receive()).data() == b"still here"
            assert client._pool.connections == connections  # no reconnect
            assert all(c.is_ready for c in connections)
    finally:
        setup.issuer.token_lifetime = None


async def test_a_refused_renewal_ends_the_connection_with_the_reason(setup: Setup) -> None:
    setup.issuer.expires_in = 2
    try:
        auth = AuthenticationOauth2(setup.params())
        async with AsyncClient(
            setup.secure.url, operation_timeout_seconds=10, authentication=auth
        ) as client:
            await client.create_producer(TOPIC + "-rotated")
            connections = list(client._pool.connections)
            setup.issuer.clients[APP] = ("rotated", ROLE)  # the secret is revoked
            await wait_until_async(lambda: not any(c.is_ready for c in connections), 15)
            for connection in connections:
                assert isinstance(connection.close_reason, AuthenticationError)
                assert "invalid_client" in str(connection.close_reason)
    finally:
        setup.issuer.clients[APP] = (APP_SECRET, ROLE)
        setup.issuer.expires_in = 3600


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _refused_params(setup: Setup, directory: Path, case: str) -> str:
    if case == "wrong secret":
        return setup.params(str(setup.issuer.credentials_file(directory, APP, secret="wrong")))
    if case == "missing file":
        return setup.params(str(directory / "absent.json"))
    if case == "not JSON":
        (directory / "not.json").write_text("client_id=x")
        return setup.params(str(directory / "not.json"))
    if case == "no issuer":
        return json.dumps({"private_key": str(setup.credentials)})
    if case == "issuer unreachable":
        issuer = f"http://127.0.0.1:{_closed_port()}"
        return json.dumps({"issuer_url": issuer, "private_key": str(setup.credentials)})
    if case == "unparsable parameters":
        return "{issuer_url"
    return setup.params(case)  # a bad private_key, from the official client's own test


@pytest.mark.parametrize(
    "case",
    [
        "wrong secret",
        "missing file",
        "not JSON",
        "no issuer",
        "issuer unreachable",
        "unparsable parameters",
        "xxx:yyy",
        "data:",
        "data:application/x-pem",
        "data:application/json;xxx",
    ],
)
async def test_refusals_are_authentication_errors(setup: Setup, tmp_path: Path, case: str) -> None:
    auth = AuthenticationOauth2(_refused_params(setup, tmp_path, case))
    async with AsyncClient(
        setup.secure.url, operation_timeout_seconds=5, authentication=auth
    ) as client:
        with pytest.raises(AuthenticationError, match="OAuth2"):
            await client.create_producer(TOPIC)


def test_the_same_credentials_work_with_the_official_client(setup: Setup) -> None:
    topic = f"{TOPIC}-interop"
    params = setup.params()
    official = pulsar.Client(setup.secure.url, authentication=pulsar.AuthenticationOauth2(params))
    ours = Client(
        setup.secure.url, operation_timeout_seconds=10, authentication=AuthenticationOauth2(params)
    )
    try:
        official_consumer = official.subscribe(topic, "official")
        our_consumer = ours.subscribe(topic, "ours")
        ours.create_producer(topic).send(b"from ours")
        official.create_producer(topic).send(b"from official")
        for consumer in (official_consumer, our_consumer):
            received = [consumer.receive(5000).data() for _ in range(2)]
            assert sorted(received) == [b"from official", b"from ours"]
    finally:
        ours.close()
        official.close()
