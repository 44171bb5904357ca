"""Our client's AuthenticationToken (a token or a supplier), AuthenticationBasic and
AuthenticationTLS against a broker with authentication and authorization on, over
``pulsar://``, ``pulsar+ssl://`` (hostname verified) and ``https://`` lookups; a token that
expires on a live connection is refreshed through AUTH_CHALLENGE."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client import (
    AsyncClient,
    AuthenticationBasic,
    AuthenticationError,
    AuthenticationTLS,
    AuthenticationToken,
    AuthorizationError,
    Client,
    InitialPosition,
    MessageId,
)
from client.auth import Authentication
from tests.helpers import BrokerThread, broker_config, wait_until_async
from tests.integration.security_setup import (
    CONSUMER,
    NAMESPACE,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)
from tests.pki import Pki

pytestmark = pytest.mark.integration
TOPIC = f"persistent://{NAMESPACE}/ours"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    running = start_secure_broker(
        tmp_path_factory.mktemp("ours"), authentication_refresh_check_seconds=1
    )
    try:
        set_up_acme(running)
        yield running
    finally:
        running.broker.stop()


async def _round_trip(client: AsyncClient, topic: str) -> None:
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    producer = await client.create_producer(topic)
    await producer.send(b"hi")
    message = await consumer.receive()
    assert message.data() == b"hi"
    consumer.acknowledge(message)


async def test_token_basic_and_tls(secure: SecureBroker) -> None:
    files = secure.clients["tls-client"]
    cases: list[tuple[str, Authentication, dict[str, Any]]] = [
        (secure.url, AuthenticationToken(secure.token("bcrypt-user")), {}),
        (secure.url, AuthenticationBasic("apr-user", "apr-pass"), {}),
        (
            secure.tls_url,
            AuthenticationTLS(str(files.cert), str(files.key)),
            {"tls_trust_certs_file_path": str(secure.pki.ca_file), "tls_validate_hostname": True},
        ),
        (
            secure.https,
            AuthenticationToken(lambda: secure.token("bcrypt-user")),
            {"tls_trust_certs_file_path": str(secure.pki.ca_file), "tls_validate_hostname": True},
        ),
    ]
    for index, (url, auth, options) in enumerate(cases):
        async with AsyncClient(
            url, operation_timeout_seconds=10, authentication=auth, **options
        ) as client:
            await _round_trip(client, f"{TOPIC}-{index}")


async def test_refusals(secure: SecureBroker) -> None:
    async with AsyncClient(
        secure.url, operation_timeout_seconds=5, authentication=AuthenticationToken("bad")
    ) as client:
        with pytest.raises(AuthenticationError):
            await client.create_producer(TOPIC)
    token = AuthenticationToken(secure.token(CONSUMER))
    async with AsyncClient(secure.url, operation_timeout_seconds=5, authentication=token) as client:
        with pytest.raises(AuthorizationError):
            await client.create_producer(TOPIC)
    basic = AuthenticationBasic("apr-user", "wrong")
    async with AsyncClient(
        secure.https,
        operation_timeout_seconds=5,
        authentication=basic,
        tls_trust_certs_file_path=str(secure.pki.ca_file),
    ) as client:
        with pytest.raises(AuthenticationError):
            await client.create_producer(TOPIC)


async def test_hostname_verification(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    elsewhere = pki.issue("other.example", server=True, hosts=("other.example",))
    config = broker_config(
        tmp_path / "data",
        broker_service_port_tls=0,
        web_service_port_tls=0,
        tls_certificate_file_path=str(elsewhere.cert),
        tls_key_file_path=str(elsewhere.key),
    )
    running = BrokerThread(config).start()
    assert running.broker is not None
    url = f"pulsar+ssl://127.0.0.1:{running.broker.tls_port}"
    trust = str(pki.ca_file)
    try:
        # The chain is trusted but the certificate does not name 127.0.0.1.
        async with AsyncClient(
            url,
            operation_timeout_seconds=2,
            tls_trust_certs_file_path=trust,
            tls_validate_hostname=True,
        ) as client:
            with pytest.raises(Exception, match=r"(?i)certificate|hostname"):
                await client.create_producer("hostname-checked")
        async with AsyncClient(
            url, operation_timeout_seconds=10, tls_trust_certs_file_path=trust
        ) as client:
            await (await client.create_producer("hostname-not-checked")).send(b"x")
    finally:
        running.stop()


async def test_token_supplier_refreshes_an_expiring_token(secure: SecureBroker) -> None:
    calls = 0
    lock = threading.Lock()

    def supplier() -> str:
        nonlocal calls
        with lock:
            calls += 1
        return secure.token("bcrypt-user", expires_in=2)

    async with AsyncClient(
        secure.url, operation_timeout_seconds=10, authentication=AuthenticationToken(supplier)
    ) as client:
        consumer = await client.subscribe(TOPIC + "-refresh", "s")
        producer = await client.create_producer(TOPIC + "-refresh")
        connections = client._pool.connections
        first = calls
        await wait_until_async(lambda: calls > first, seconds=10)
        await producer.send(b"still here")
        assert (await consumer.receive()).data() == b"still here"
        assert client._pool.connections == connections  # no reconnect
        assert all(c.is_ready for c in connections)


def test_blocking_client_with_tls_authentication(secure: SecureBroker) -> None:
    files = secure.clients["tls-client"]
    with Client(
        secure.tls_url,
        operation_timeout_seconds=10,
        authentication=AuthenticationTLS(str(files.cert), str(files.key)),
        tls_trust_certs_file_path=str(secure.pki.ca_file),
        tls_validate_hostname=True,
    ) as client:
        producer = client.create_producer(TOPIC + "-sync")
        producer.send(b"sync")
        reader = client.create_reader(TOPIC + "-sync", MessageId.earliest)
        assert reader.read_next(5000).data() == b"sync"
