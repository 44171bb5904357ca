"""Token refresh on a live connection (Pulsar's AUTH_CHALLENGE): when a connection's token
expires, the broker challenges it; the official client asks its token supplier (a callable)
for a new token and answers, and the consumer goes on over the same connection. A new token
naming another role, or no answer, ends the connection."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.connection.core import ServerConnection
from tests.helpers import close_client, new_client, wait_until
from tests.integration.security_setup import (
    CONSUMER,
    NAMESPACE,
    PRODUCER,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat]
TOPIC = f"persistent://{NAMESPACE}/refresh"


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureBroker]:
    running = start_secure_broker(tmp_path, authentication_refresh_check_seconds=1)
    try:
        set_up_acme(running)
        yield running
    finally:
        running.broker.stop()


class Supplier:
    """A token supplier that hands out short-lived tokens and counts the calls."""

    def __init__(self, secure: SecureBroker, role: str, lifetime: float) -> None:
        self._secure, self.role, self._lifetime = secure, role, lifetime
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            self.calls += 1
        return self._secure.token(self.role, expires_in=self._lifetime)


def _connections_of(secure: SecureBroker, role: str) -> list[ServerConnection]:
    assert secure.broker.broker is not None
    assert secure.broker.broker.service is not None
    return [
        c
        for c in list(secure.broker.broker.service.connections)
        if c.auth.identity is not None and c.auth.identity.role == role
    ]


def _expiry(connection: ServerConnection) -> float:
    identity = connection.auth.identity
    assert identity is not None
    assert identity.expires_at is not None
    return identity.expires_at


def test_expiring_token_is_refreshed_by_the_supplier(secure: SecureBroker) -> None:
    supplier = Supplier(secure, CONSUMER, lifetime=2)
    client = new_client(secure.url, authentication=pulsar.AuthenticationToken(supplier))
    producer_client = new_client(
        secure.url, authentication=pulsar.AuthenticationToken(secure.token(PRODUCER))
    )
    try:
        consumer = client.subscribe(TOPIC, "sub")
        # The C++ client may hold more than one connection (lookup, then the topic's).
        connections = _connections_of(secure, CONSUMER)
        first_expiry = {c: _expiry(c) for c in connections}
        calls = supplier.calls
        # Past the first token's expiry the broker challenges; the supplier is asked again.
        wait_until(lambda: supplier.calls > calls, timeout=10)
        wait_until(lambda: all(_expiry(c) > first_expiry[c] for c in connections), timeout=10)
        assert not any(c.closing for c in connections)  # refreshed in place
        producer = producer_client.create_producer(TOPIC)
        producer.send(b"after refresh")
        assert consumer.receive(5000).data() == b"after refresh"
        assert set(_connections_of(secure, CONSUMER)) == set(connections)
    finally:
        close_client(client)
        close_client(producer_client)


def test_refresh_may_not_change_the_role(secure: SecureBroker) -> None:
    switched = threading.Event()

    def supplier() -> str:
        # Short-lived CONSUMER tokens until subscribed; then tokens naming PRODUCER.
        if switched.is_set():
            return secure.token(PRODUCER, expires_in=600)
        return secure.token(CONSUMER, expires_in=2)

    client = new_client(secure.url, authentication=pulsar.AuthenticationToken(supplier))
    try:
        client.subscribe(TOPIC, "sub2")
        connections = _connections_of(secure, CONSUMER)
        assert connections
        switched.set()
        wait_until(lambda: all(c.closing for c in connections), timeout=10)
    finally:
        close_client(client)
