"""Pulsar's authorization semantics on the wire (issue #24), against a broker with
authentication and authorization on: a producer on a tenant that does not exist is
``TopicNotFound`` at once (the official client's ``test_create_producer_failure``), a PRODUCER's
initial subscription needs consume permission, and proxies (``proxyRoles``) name the client in
``original_principal`` with both roles authorized."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest

from client import AsyncClient, TopicNotFound
from protocol import commands, pb
from protocol.errors import ServerError
from protocol.framing import encode_command
from tests.helpers import close_client, new_client
from tests.integration.security_setup import (
    NAMESPACE,
    PRODUCER,
    SUPERUSER,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)
from tests.raw_client import RawConnection

pytestmark = pytest.mark.integration
T = pb.BaseCommand.Type
PROXY = "the-proxy"
TOPIC = f"persistent://{NAMESPACE}/semantics"
TIMEOUT = 10  # seconds; the answers expected here come far sooner


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    running = start_secure_broker(tmp_path_factory.mktemp("semantics"), proxy_roles=PROXY)
    try:
        set_up_acme(running)
        status, _ = running.http(
            "POST",
            f"/admin/v2/namespaces/{NAMESPACE}/permissions/{PROXY}",
            role=SUPERUSER,
            body=["produce", "consume"],
        )
        assert status == 204, status
        yield running
    finally:
        running.broker.stop()


# ------------------------------------------------------------------ a tenant that does not exist


def test_official_client_gets_topic_not_found_at_once(secure: SecureBroker) -> None:
    client = new_client(secure.url, operation_timeout=TIMEOUT)  # anonymous
    try:
        start = time.monotonic()
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer("tenant/ns/asyncio-test-send-failure")
        assert time.monotonic() - start < TIMEOUT / 4  # answered, not retried to the timeout
    finally:
        close_client(client)


async def test_our_client_gets_topic_not_found_at_once(secure: SecureBroker) -> None:
    async with AsyncClient(secure.url, operation_timeout_seconds=TIMEOUT) as client:
        start = time.monotonic()
        with pytest.raises(TopicNotFound):
            await client.create_producer("tenant/ns/asyncio-test-send-failure")
        assert time.monotonic() - start < TIMEOUT / 4


def test_an_existing_tenant_still_hides_its_namespaces(secure: SecureBroker) -> None:
    # Java looks the tenant up inside authorization; a namespace is not revealed to a stranger.
    client = new_client(secure.url, operation_timeout=TIMEOUT)
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://acme/no-such-ns/t")
    finally:
        close_client(client)


# ------------------------------------------------------------------ raw frames


def _connect(
    secure: SecureBroker, role: str, original: str | None = None
) -> tuple[RawConnection, list[pb.BaseCommand]]:
    cmd = pb.BaseCommand(type=T.CONNECT)
    cmd.connect.client_version = "proxy-test"
    cmd.connect.protocol_version = 20
    cmd.connect.auth_method_name = "token"
    cmd.connect.auth_data = secure.token(role).encode()
    if original is not None:
        cmd.connect.original_principal = original
    conn = RawConnection(secure.broker.port)
    conn.send(encode_command(cmd))
    try:
        conn.read_until(lambda frames: bool(frames), timeout=TIMEOUT)
    except ConnectionError:
        pass
    return conn, [f.command for f in conn.frames]


def _produce(conn: RawConnection, request_id: int, **options: object) -> pb.BaseCommand:
    def answers() -> list[pb.BaseCommand]:
        kinds = (T.PRODUCER_SUCCESS, T.ERROR)
        return [f.command for f in conn.frames[1:] if f.type in kinds]

    before = len(answers())
    conn.send(commands.producer(TOPIC, request_id, request_id, **options))  # type: ignore[arg-type]
    conn.read_until(lambda _frames: len(answers()) > before, timeout=TIMEOUT)
    return answers()[-1]


def test_an_initial_subscription_needs_consume_permission(secure: SecureBroker) -> None:
    conn, answer = _connect(secure, PRODUCER)  # granted produce only
    with conn:
        assert answer[0].type == T.CONNECTED
        refused = _produce(conn, 1, initial_subscription_name="made-by-producer")
        assert refused.type == T.ERROR
        assert ServerError(refused.error.error) == ServerError.AuthorizationError
        assert _produce(conn, 2).type == T.PRODUCER_SUCCESS  # without one: produce suffices
    status, subscriptions = secure.http(
        "GET", "/admin/v2/persistent/acme/ns/semantics/subscriptions", role=SUPERUSER
    )
    assert status == 200
    assert "made-by-producer" not in subscriptions


def test_a_proxy_acts_for_its_original_principal(secure: SecureBroker) -> None:
    conn, answer = _connect(secure, PROXY, original=PRODUCER)
    with conn:
        assert answer[0].type == T.CONNECTED
        assert _produce(conn, 1).type == T.PRODUCER_SUCCESS
        refused = _produce(conn, 2, initial_subscription_name="s")  # PRODUCER may not consume
        assert ServerError(refused.error.error) == ServerError.AuthorizationError
    conn, answer = _connect(secure, PROXY, original="stranger")
    with conn:
        assert answer[0].type == T.CONNECTED
        assert ServerError(_produce(conn, 1).error.error) == ServerError.AuthorizationError


@pytest.mark.parametrize(
    ("role", "original"),
    [(PROXY, None), (PROXY, PROXY), (PRODUCER, "consumer"), (SUPERUSER, PRODUCER)],
    ids=["proxy-without-original", "proxy-as-original", "not-a-proxy", "superuser-not-a-proxy"],
)
def test_invalid_roles_are_refused_at_connect(
    secure: SecureBroker, role: str, original: str | None
) -> None:
    conn, answer = _connect(secure, role, original)
    with conn:
        assert [c.type for c in answer] == [T.ERROR]
        assert ServerError(answer[0].error.error) == ServerError.AuthorizationError
        assert answer[0].error.message == "Invalid roles."
        conn.sock.settimeout(TIMEOUT)
        assert conn.sock.recv(1) == b""  # closed
