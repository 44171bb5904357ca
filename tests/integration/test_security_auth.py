"""Authentication end to end: the official client's AuthenticationToken, AuthenticationBasic
and AuthenticationTLS against token, basic (bcrypt, APR1) and TLS providers named by Pulsar's
class names; refusals on the wire (ERROR AuthenticationError) and over HTTP (401); the
anonymous role for an unknown method (AuthorizationError, as Pulsar's Python client tests
expect); failures counted in /metrics."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.auth.token import create_token
from protocol import commands, pb
from protocol.errors import ServerError
from tests.helpers import close_client, new_client
from tests.integration.security_setup import (
    BASIC_USERS,
    NAMESPACE,
    PRODUCER,
    SUPERUSER,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)
from tests.pki import Pki
from tests.raw_client import RawConnection

pytestmark = [pytest.mark.integration, pytest.mark.compat]
T = pb.BaseCommand.Type
TOPIC = f"persistent://{NAMESPACE}/auth-topic"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    running = start_secure_broker(tmp_path_factory.mktemp("secure"))
    try:
        set_up_acme(running)
        yield running
    finally:
        running.broker.stop()


def _produce_and_consume(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    producer.send(b"hello")
    message = consumer.receive(5000)
    assert message.data() == b"hello"
    consumer.acknowledge(message)


def _connect_raw(port: int, method: str | None, data: bytes | None) -> pb.BaseCommand:
    """CONNECT with ``method``/``data``; the broker's first answer."""
    with RawConnection(port) as conn:
        conn.send(commands.connect("raw", auth_method_name=method, auth_data=data))
        frames = conn.read_until(lambda fs: bool(fs))
        return frames[0].command


def _refused(command: pb.BaseCommand) -> bool:
    return command.type == T.ERROR and command.error.error == ServerError.AuthenticationError


def test_official_token_client_produces_and_consumes(secure: SecureBroker) -> None:
    client = new_client(
        secure.url, authentication=pulsar.AuthenticationToken(secure.token(PRODUCER))
    )
    try:
        # PRODUCER may only produce: a token for a role with both actions does both.
        both = new_client(
            secure.url, authentication=pulsar.AuthenticationToken(secure.token("bcrypt-user"))
        )
        _produce_and_consume(both, TOPIC + "-token")
        close_client(both)
        client.create_producer(TOPIC + "-token").send(b"ok")
    finally:
        close_client(client)


@pytest.mark.parametrize("user", sorted(BASIC_USERS))
def test_official_basic_client_with_bcrypt_and_apr1(secure: SecureBroker, user: str) -> None:
    client = new_client(
        secure.url, authentication=pulsar.AuthenticationBasic(user, BASIC_USERS[user])
    )
    try:
        _produce_and_consume(client, f"{TOPIC}-{user}")
    finally:
        close_client(client)


def test_official_tls_client_gets_its_certificate_cn_as_role(secure: SecureBroker) -> None:
    files = secure.clients["tls-client"]
    client = new_client(
        secure.tls_url,
        authentication=pulsar.AuthenticationTLS(str(files.cert), str(files.key)),
        tls_trust_certs_file_path=str(secure.pki.ca_file),
        tls_validate_hostname=True,
    )
    try:
        _produce_and_consume(client, TOPIC + "-tls")
    finally:
        close_client(client)


def test_client_certificate_from_another_ca_gets_no_role(
    secure: SecureBroker, tmp_path: Path
) -> None:
    # Signed by a CA the broker does not trust: the TLS handshake itself fails.
    stranger = Pki(tmp_path / "stranger", name="Stranger CA").client("tls-client")
    client = new_client(
        secure.tls_url,
        authentication=pulsar.AuthenticationTLS(str(stranger.cert), str(stranger.key)),
        tls_trust_certs_file_path=str(secure.pki.ca_file),
        operation_timeout=2,
    )
    try:
        with pytest.raises((pulsar.Timeout, pulsar.ConnectError)):
            client.create_producer(TOPIC + "-stranger")
    finally:
        close_client(client)


def test_unknown_basic_method_is_anonymous_and_not_authorized(secure: SecureBroker) -> None:
    client = new_client(
        secure.url,
        authentication=pulsar.AuthenticationBasic("bcrypt-user", "bcrypt-pass", "unknown"),
        operation_timeout=5,
    )
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(TOPIC + "-unknown", "sub")
    finally:
        close_client(client)


def test_official_client_with_a_bad_token_never_gets_in(secure: SecureBroker) -> None:
    # The C++ client takes any answer to CONNECT but CONNECTED as a broken connection and
    # retries until its operation timeout, against Pulsar too.
    before = _failures(secure)
    client = new_client(
        secure.url, authentication=pulsar.AuthenticationToken("not-a-jwt"), operation_timeout=2
    )
    try:
        with pytest.raises(pulsar.Timeout):
            client.create_producer(TOPIC + "-bad")
    finally:
        close_client(client)
    assert _failures(secure) > before


@pytest.mark.parametrize(
    ("method", "data"),
    [
        ("token", b"not-a-jwt"),  # malformed
        ("token", b""),  # missing
        ("basic", b"bcrypt-user:wrong"),  # wrong password
        ("basic", b"apr-user:wrong"),
        ("basic", b"nobody:bcrypt-pass"),  # unknown user
        ("basic", b"plain-user:plain-pass"),  # a plain-text htpasswd line never works
        ("basic", b"no-colon"),  # malformed
        ("basic", b""),  # missing
        ("tls", b""),  # no certificate on the plain port
    ],
)
def test_refused_credentials_get_authentication_error(
    secure: SecureBroker, method: str, data: bytes
) -> None:
    assert _refused(_connect_raw(secure.broker.port, method, data))


def test_expired_and_foreign_tokens_are_refused(secure: SecureBroker) -> None:
    expired = create_token(secure.secret, PRODUCER, expires_in=-10)
    foreign = create_token(b"another secret of 32 bytes......", PRODUCER)
    for token in (expired, foreign):
        assert _refused(_connect_raw(secure.broker.port, "token", token.encode()))
    valid = secure.token(PRODUCER)
    assert _connect_raw(secure.broker.port, "token", valid.encode()).type == T.CONNECTED


def test_failed_authentication_answer_is_delayed(tmp_path: Path) -> None:
    slow = start_secure_broker(tmp_path, authentication_failure_delay_ms=400)
    try:
        started = time.monotonic()
        assert _refused(_connect_raw(slow.broker.port, "token", b"x"))
        assert time.monotonic() - started >= 0.4
    finally:
        slow.broker.stop()


def test_no_credentials_without_anonymous_role_is_refused(tmp_path: Path) -> None:
    strict = start_secure_broker(tmp_path, anonymous_user_role="")
    try:
        assert _refused(_connect_raw(strict.broker.port, None, None))
        assert _refused(_connect_raw(strict.broker.port, "unknown", b"x"))
        status, body = strict.http("GET", "/admin/v2/tenants")
        assert status == 401, body
        assert strict.http("GET", "/admin/v2/tenants", role=SUPERUSER)[0] == 200
    finally:
        strict.broker.stop()


def test_http_bearer_basic_and_client_certificates(secure: SecureBroker) -> None:
    assert secure.http("GET", "/admin/v2/tenants", role=SUPERUSER)[0] == 200
    assert secure.http("GET", "/admin/v2/tenants")[0] == 403  # anonymous role: not a superuser
    bad = {"Authorization": "Bearer not-a-jwt"}
    assert secure.http("GET", "/admin/v2/tenants", headers=bad)[0] == 401
    wrong = {"Authorization": "Basic " + _b64("bcrypt-user:wrong")}
    assert secure.http("GET", f"/admin/v2/namespaces/{NAMESPACE}/topics", headers=wrong)[0] == 401
    right = {"Authorization": "Basic " + _b64("bcrypt-user:bcrypt-pass")}
    assert secure.http("GET", f"/admin/v2/namespaces/{NAMESPACE}/topics", headers=right)[0] == 200
    # A client certificate with CN=admin is the superuser over https.
    status, tenants = secure.http(
        "GET", "/admin/v2/tenants", base=secure.https, context=secure.ssl_context(SUPERUSER)
    )
    assert status == 200
    assert "acme" in tenants


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def _failures(secure: SecureBroker) -> float:
    with urllib.request.urlopen(secure.broker.http + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("pulsar_authentication_failures_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total
