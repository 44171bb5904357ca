"""The permission matrix, as Pulsar's ``PulsarAuthorizationProvider`` decides it: binary
commands (official client, raw frames where the client hides the answer) and every admin
endpoint, for a superuser, a tenant admin, a role granted ``produce`` only, one granted
``consume`` only, and anonymous (no credentials: ``anonymousUserRole``, granted nothing).

Denied: ``AuthorizationError`` on the wire, 403 over HTTP, before anything about the resource
is looked up (a missing topic is 403 too, not 404) and with nothing changed."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pulsar
import pytest

from protocol import commands, pb
from protocol.errors import ServerError
from tests.helpers import close_client, new_client
from tests.integration.security_setup import (
    CONSUMER,
    NAMESPACE,
    PRODUCER,
    SUPERUSER,
    TENANT_ADMIN,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)
from tests.raw_client import RawSession

pytestmark = [pytest.mark.integration, pytest.mark.compat]
T = pb.BaseCommand.Type
ANON = None  # no credentials
ROLES = [SUPERUSER, TENANT_ADMIN, PRODUCER, CONSUMER, ANON]
TOPIC = f"persistent://{NAMESPACE}/matrix"

EVERYONE = frozenset(ROLES)
ALL_GRANTED = frozenset({SUPERUSER, TENANT_ADMIN, PRODUCER, CONSUMER})
ADMINS = frozenset({SUPERUSER, TENANT_ADMIN})
SUPER = frozenset({SUPERUSER})
CONSUMERS = frozenset({SUPERUSER, TENANT_ADMIN, CONSUMER})
PRODUCERS = frozenset({SUPERUSER, TENANT_ADMIN, PRODUCER})


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    running = start_secure_broker(tmp_path_factory.mktemp("matrix"))
    try:
        set_up_acme(running)
        client = _client(running, SUPERUSER)
        client.subscribe(TOPIC, "existing").close()
        client.create_producer(TOPIC).send(b"seed")
        close_client(client)
        yield running
    finally:
        running.broker.stop()


def _client(secure: SecureBroker, role: str | None) -> pulsar.Client:
    auth = None if role is None else pulsar.AuthenticationToken(secure.token(role))
    return new_client(secure.url, authentication=auth, operation_timeout=5)


def _id(role: str | None) -> str:
    return role or "anonymous"


# ----------------------------------------------------------------------------- binary commands


@pytest.mark.parametrize("role", ROLES, ids=_id)
def test_produce(secure: SecureBroker, role: str | None) -> None:
    client = _client(secure, role)
    try:
        if role in PRODUCERS:
            client.create_producer(TOPIC).send(b"x")
        else:
            with pytest.raises(pulsar.AuthorizationError):
                client.create_producer(TOPIC)
            with pytest.raises(pulsar.AuthorizationError):  # fencing is producing too
                client.create_producer(
                    TOPIC, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing
                )
    finally:
        close_client(client)


@pytest.mark.parametrize("role", ROLES, ids=_id)
def test_subscribe_seek_and_unsubscribe(secure: SecureBroker, role: str | None) -> None:
    client = _client(secure, role)
    subscription = f"sub-{_id(role)}"
    try:
        if role in CONSUMERS:
            consumer = client.subscribe(TOPIC, subscription)
            consumer.seek(pulsar.MessageId.earliest)
            consumer.unsubscribe()
        else:
            with pytest.raises(pulsar.AuthorizationError):
                client.subscribe(TOPIC, subscription)
            with pytest.raises(pulsar.AuthorizationError):
                client.create_reader(TOPIC, pulsar.MessageId.earliest)
    finally:
        close_client(client)


@pytest.mark.parametrize("role", ROLES, ids=_id)
def test_lookup_and_partition_metadata(secure: SecureBroker, role: str | None) -> None:
    client = _client(secure, role)
    try:
        if role in ALL_GRANTED:
            assert client.get_topic_partitions(TOPIC) == [TOPIC]
        else:
            with pytest.raises(pulsar.AuthorizationError):
                client.get_topic_partitions(TOPIC)
            # A topic that does not exist is refused the same way: nothing is revealed.
            with pytest.raises(pulsar.AuthorizationError):
                client.get_topic_partitions(TOPIC + "-missing")
    finally:
        close_client(client)


def _raw_session(secure: SecureBroker, role: str | None) -> RawSession:
    return RawSession(secure.broker.port, connect=_connect_frame(secure, role))


def _connect_frame(secure: SecureBroker, role: str | None) -> bytes:
    if role is None:
        return commands.connect("raw")
    return commands.connect("raw", auth_method_name="token", auth_data=secure.token(role).encode())


@pytest.mark.parametrize("role", ROLES, ids=_id)
def test_topic_lists_lookup_and_schema_frames(secure: SecureBroker, role: str | None) -> None:
    session = _raw_session(secure, role)
    try:
        listed = session.request(commands.get_topics_of_namespace(NAMESPACE, 1), 1)
        lookup = session.request(commands.lookup(TOPIC + "-never", 2), 2)
        schema = session.request(commands.get_schema(TOPIC, 3), 3)
        if role in ALL_GRANTED:
            assert listed.type == T.GET_TOPICS_OF_NAMESPACE_RESPONSE
            assert TOPIC in listed.command.getTopicsOfNamespaceResponse.topics
            assert (
                lookup.command.lookupTopicResponse.response != pb.CommandLookupTopicResponse.Failed
            )
        else:
            assert listed.type == T.ERROR
            assert listed.command.error.error == ServerError.AuthorizationError
            assert lookup.command.lookupTopicResponse.error == ServerError.AuthorizationError
            assert schema.command.getSchemaResponse.error_code == ServerError.AuthorizationError
    finally:
        session.close()


def test_revoked_consume_permission_stops_seek(secure: SecureBroker) -> None:
    role = "revocable"
    path = f"/admin/v2/namespaces/{NAMESPACE}/permissions/{role}"
    assert secure.http("POST", path, role=SUPERUSER, body=["consume"])[0] == 204
    client = _client(secure, role)
    try:
        consumer = client.subscribe(TOPIC, "revocable-sub")
        assert secure.http("DELETE", path, role=TENANT_ADMIN)[0] == 204
        with pytest.raises(pulsar.AuthorizationError):
            consumer.seek(pulsar.MessageId.earliest)
    finally:
        close_client(client)


# ----------------------------------------------------------------------------- admin endpoints

_N = f"/admin/v2/namespaces/{NAMESPACE}"
_NS = "/admin/v2/namespaces/{tenant}/{ns}"
_TP = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
_SUB = _TP + "/subscription/{subscription}"
#: Who may use each admin route, as Pulsar's admin resources decide (independent of
#: broker/auth/http.py's rules). A route missing here must at least be refused to the
#: produce-only and consume-only roles and to anonymous (the default is admins only).
EXPECTED: dict[tuple[str, str], frozenset[str | None]] = {
    ("GET", "/admin/v2/brokers/health"): EVERYONE,
    ("GET", "/metrics"): EVERYONE,
    ("GET", "/admin/v2/clusters"): EVERYONE,
    ("GET", "/admin/v2/clusters/{cluster}"): SUPER,
    ("PUT", "/admin/v2/clusters/{cluster}"): SUPER,
    ("POST", "/admin/v2/clusters/{cluster}"): SUPER,
    ("GET", "/admin/v2/brokers/{cluster}"): SUPER,
    ("GET", "/admin/v2/broker-stats/load-report"): SUPER,  # Pulsar: super-user only
    ("GET", "/admin/v2/tenants"): SUPER,
    ("GET", "/admin/v2/tenants/{tenant}"): SUPER,
    ("PUT", "/admin/v2/tenants/{tenant}"): SUPER,
    ("POST", "/admin/v2/tenants/{tenant}"): SUPER,
    ("DELETE", "/admin/v2/tenants/{tenant}"): SUPER,
    ("GET", "/admin/v2/namespaces/{tenant}"): ADMINS,
    ("PUT", _NS): ADMINS,
    ("GET", _NS): ADMINS,
    ("DELETE", _NS): ADMINS,
    ("GET", _NS + "/topics"): ALL_GRANTED,
    **{
        (method, _NS + "/" + policy): ADMINS
        for method in ("GET", "POST", "DELETE")
        for policy in ("deduplication", "retention", "messageTTL", "autoTopicCreation")
    },
    ("GET", _NS + "/permissions"): ADMINS,
    ("POST", _NS + "/permissions/{role}"): ADMINS,
    ("DELETE", _NS + "/permissions/{role}"): ADMINS,
    ("GET", "/admin/v2/persistent/{tenant}/{ns}"): ALL_GRANTED,
    ("GET", "/admin/v2/persistent/{tenant}/{ns}/partitioned"): ALL_GRANTED,
    ("PUT", _TP): ADMINS,
    ("DELETE", _TP): ADMINS,
    ("PUT", _TP + "/unload"): ADMINS,
    ("POST", _TP + "/terminate"): ADMINS,
    ("PUT", _TP + "/partitions"): ADMINS,
    ("POST", _TP + "/partitions"): ADMINS,
    ("DELETE", _TP + "/partitions"): ADMINS,
    ("GET", _TP + "/partitions"): ALL_GRANTED,
    ("GET", _TP + "/stats"): ALL_GRANTED,
    ("GET", _TP + "/partitioned-stats"): ALL_GRANTED,
    ("GET", _TP + "/internalStats"): ALL_GRANTED,
    ("GET", _TP + "/partitioned-internalStats"): ALL_GRANTED,
    **{
        (method, _TP + "/" + policy): ADMINS
        for method in ("GET", "POST", "DELETE")
        for policy in ("deduplicationEnabled", "retention", "messageTTL")
    },
    ("GET", _TP + "/subscriptions"): CONSUMERS,
    ("PUT", _SUB): CONSUMERS,
    ("DELETE", _SUB): CONSUMERS,
    ("POST", _SUB + "/skip_all"): CONSUMERS,
    ("POST", _SUB + "/resetcursor"): CONSUMERS,
    ("POST", _SUB + "/resetcursor/{timestamp}"): CONSUMERS,
    ("POST", _SUB + "/expireMessages/{seconds}"): CONSUMERS,
    ("POST", _TP + "/all_subscription/expireMessages/{seconds}"): CONSUMERS,
    ("GET", "/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}"): ALL_GRANTED,
}
_UNLISTED_REFUSED = frozenset({PRODUCER, CONSUMER, ANON})


def _concrete(method: str, pattern: str) -> str:
    """A path for ``pattern`` whose target is harmless to hit: missing topics, subscriptions,
    tenants and namespaces wherever the route changes or deletes something."""
    on_tenant = pattern.startswith("/admin/v2/tenants/")
    creates_or_deletes_ns = pattern == _NS and method in ("PUT", "DELETE")
    values = {
        "tenant": "ghost-tenant" if on_tenant else "acme",
        "ns": "ghost-ns" if creates_or_deletes_ns else "ns",
        "namespace": "ns",
        "topic": "matrix" if method == "GET" else "ghost",
        "subscription": "ghost",
        "role": "someone",
        "cluster": "standalone",
        "seconds": "10",
        "timestamp": "0",
        "domain": "persistent",
        "bundle": "0x00000000_0x40000000",
    }
    return re.sub(r"\{([^}]+)\}", lambda m: values[m.group(1)], pattern)


def _all_routes() -> list[tuple[str, str]]:
    from broker.admin import routes
    from broker.cluster.http import routes as cluster_routes

    found = {(r.method, r.path) for r in [*routes(), *cluster_routes()]}
    return sorted(found | {("GET", "/metrics")})


@pytest.mark.parametrize("role", ROLES, ids=_id)
def test_every_admin_endpoint(secure: SecureBroker, role: str | None) -> None:
    wrong = []
    for method, pattern in _all_routes():
        status, reply = secure.http(method, _concrete(method, pattern), role=role)
        denied = status in (401, 403)
        expected = EXPECTED.get((method, pattern))
        should_deny = role in _UNLISTED_REFUSED if expected is None else role not in expected
        if denied != should_deny or (denied and status != 403):
            wrong.append((method, pattern, status, reply))
    assert wrong == []


def test_the_expectations_name_real_routes() -> None:
    routes = set(_all_routes())
    assert set(EXPECTED) <= routes, set(EXPECTED) - routes


def test_denied_change_changes_nothing(secure: SecureBroker) -> None:
    ttl = _N + "/messageTTL"
    assert secure.http("POST", ttl, role=SUPERUSER, body=120)[0] == 204
    for role in (PRODUCER, CONSUMER, ANON):
        assert secure.http("POST", ttl, role=role, body=999)[0] == 403
        assert secure.http("DELETE", ttl, role=role)[0] == 403
    assert secure.http("GET", ttl, role=SUPERUSER) == (200, 120)
    status, grants = secure.http("GET", _N + "/permissions", role=TENANT_ADMIN)
    assert status == 200
    assert grants[PRODUCER] == ["produce"]
    assert grants[CONSUMER] == ["consume"]
