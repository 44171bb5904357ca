"""AuthenticationBasic from ``auth_params_string`` against the broker's htpasswd users
(bcrypt and APR1 hashes), over ``pulsar://`` and with lookups over ``https://``; the official
client with the same parameters reads what ours wrote."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pulsar
import pytest

from client import (
    AsyncClient,
    AuthenticationBasic,
    AuthenticationError,
    AuthorizationError,
    InitialPosition,
    MessageId,
)
from tests.integration.security_setup import (
    BASIC_USERS,
    NAMESPACE,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)

pytestmark = pytest.mark.integration
TOPIC = f"persistent://{NAMESPACE}/basic"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    running = start_secure_broker(tmp_path_factory.mktemp("basic"))
    try:
        set_up_acme(running)
        yield running
    finally:
        running.broker.stop()


def _params(user: str, password: str | None = None, key: str = "username", **extra: str) -> str:
    return json.dumps({key: user, "password": password or BASIC_USERS[user], **extra})


@pytest.mark.parametrize(
    ("user", "key", "over"),
    [
        ("bcrypt-user", "username", "pulsar"),
        ("apr-user", "username", "https"),
        ("apr-user", "userId", "pulsar"),
    ],
)
async def test_basic_from_auth_params_string(
    secure: SecureBroker, user: str, key: str, over: str
) -> None:
    auth = AuthenticationBasic(auth_params_string=_params(user, key=key))
    url, trust = secure.url, None
    if over == "https":
        url, trust = secure.https, str(secure.pki.ca_file)
    topic = f"{TOPIC}-{user}-{key}-{over}"
    async with AsyncClient(
        url, operation_timeout_seconds=10, authentication=auth, tls_trust_certs_file_path=trust
    ) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        await (await client.create_producer(topic)).send(b"basic")
        assert (await consumer.receive()).data() == b"basic"


@pytest.mark.parametrize(
    ("params", "error"),
    [
        (_params("apr-user", "wrong"), AuthenticationError),
        (_params("nobody", "pass"), AuthenticationError),
        # The JSON's method is sent: the broker has no provider for it and, as Pulsar does with
        # an anonymous role configured, takes the client as anonymous, who may not publish.
        (_params("apr-user", method="oms3.0"), AuthorizationError),
    ],
    ids=["wrong password", "unknown user", "unknown method"],
)
async def test_refused_basic_credentials(
    secure: SecureBroker, params: str, error: type[Exception]
) -> None:
    auth = AuthenticationBasic(auth_params_string=params)
    async with AsyncClient(secure.url, operation_timeout_seconds=5, authentication=auth) as client:
        with pytest.raises(error):
            await client.create_producer(TOPIC)


async def test_the_official_client_reads_what_ours_wrote(secure: SecureBroker) -> None:
    params = _params("bcrypt-user")
    topic = f"{TOPIC}-interop"
    auth = AuthenticationBasic(auth_params_string=params)
    async with AsyncClient(secure.url, operation_timeout_seconds=10, authentication=auth) as client:
        await (await client.create_producer(topic)).send(b"ours")
    official = pulsar.Client(
        secure.url, authentication=pulsar.AuthenticationBasic(auth_params_string=params)
    )
    try:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(5000).data() == b"ours"
        official.create_producer(topic).send(b"official")
    finally:
        official.close()
    async with AsyncClient(secure.url, operation_timeout_seconds=10, authentication=auth) as client:
        ours = await client.create_reader(topic, MessageId.earliest)
        assert [(await ours.read_next()).data() for _ in range(2)] == [b"ours", b"official"]
