"""Cluster mode against etcd over mutual TLS with authentication (``metadataStoreConfigPath``),
and admin / lookup 307s that keep a TLS request on TLS.

One etcd for the module (client certificates required, authentication on, a user limited to
``/magnetar/``, tokens expiring after 1 s unused so that re-authentication is exercised); two
brokers with TLS web ports per test.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cli import EXIT_CONFIG_ERROR
from broker.cluster.bundles import bundle_of
from protocol.topic_name import TopicName
from tests.cluster.conftest import Cluster, http_lookup_owner, stop_process
from tests.cluster.secure_etcd import TlsEtcd, start_tls_etcd
from tests.helpers import BrokerProcess, close_client, new_client, wait_until
from tests.pki import Pki

BUNDLES = 4
TOKEN_TTL_SECONDS = 1


@pytest.fixture(scope="module")
def secure_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEtcd]:
    etcd = start_tls_etcd(tmp_path_factory.mktemp("secure-etcd"), TOKEN_TTL_SECONDS)
    try:
        yield etcd
    finally:
        stop_process(etcd.proc)


class TlsCluster:
    """Brokers with plain and TLS ports (binary and web) over the module's secure etcd."""

    def __init__(self, etcd: TlsEtcd, base: Path) -> None:
        self.pki = Pki(base / "broker-pki")  # brokers' own CA: etcd's files stay untouched
        server = self.pki.server()
        self.options = etcd.options_file(base / "etcd.yaml")
        self.cluster = Cluster(
            etcd,
            base / "data",
            f"tls-{uuid.uuid4().hex[:8]}",
            extra=(
                f"metadataStoreConfigPath={self.options}",
                "brokerServicePortTls=0",
                "webServicePortTls=0",
                f"tlsCertificateFilePath={server.cert}",
                f"tlsKeyFilePath={server.key}",
            ),
        )
        self.https_ports: dict[int, int] = {}  # web port -> TLS web port

    @property
    def brokers(self) -> list[BrokerProcess]:
        return self.cluster.brokers

    def add_broker(self) -> BrokerProcess:
        broker = self.cluster.add_broker()
        found = re.search(rb"serving .* and https://[^:]+:(\d+)", broker.log_path.read_bytes())
        assert found is not None
        self.https_ports[broker.web_port] = int(found.group(1))
        return broker

    def https(self, broker: BrokerProcess) -> str:
        return f"https://127.0.0.1:{self.https_ports[broker.web_port]}"

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki.ca_file))

    def request(self, base: str, method: str, path: str) -> tuple[int, str, bytes]:
        """One request, redirects not followed: (status, Location, body)."""
        host, port = base.split("://", 1)[1].split(":")
        if base.startswith("https"):
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, int(port), timeout=10, context=self.context()
            )
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(method, path)
            reply = conn.getresponse()
            return reply.status, reply.getheader("Location", ""), reply.read()
        finally:
            conn.close()


@pytest.fixture
def tls_cluster(secure_etcd: TlsEtcd, tmp_path: Path) -> Iterator[TlsCluster]:
    running = TlsCluster(secure_etcd, tmp_path)
    try:
        running.add_broker()
        running.add_broker()
        yield running
    finally:
        running.cluster.stop()


def topics_of_every_bundle(namespace: str) -> list[str]:
    """One topic name per bundle of ``namespace``."""
    chosen: dict[object, str] = {}
    index = 0
    while len(chosen) < BUNDLES:
        topic = f"persistent://{namespace}/t-{index}"
        chosen.setdefault(bundle_of(TopicName.parse(topic), BUNDLES), topic)
        index += 1
    return list(chosen.values())


def produce_and_consume(url: str, topics: list[str]) -> None:
    client = new_client(url, operation_timeout=30)
    try:
        for topic in topics:
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic)
            producer.send(topic.encode())
            assert consumer.receive(10_000).data() == topic.encode()
            producer.close()
            consumer.close()
    finally:
        close_client(client)


def namespaces_of(tls: TlsCluster, broker: BrokerProcess) -> list[str]:
    status, _, body = tls.request(broker.http, "GET", "/admin/v2/namespaces/public")
    assert status == 200
    listed: list[str] = json.loads(body)
    return listed


def create_namespace(tls: TlsCluster, through: BrokerProcess, namespace: str) -> None:
    status, _, body = tls.request(through.http, "PUT", f"/admin/v2/namespaces/{namespace}")
    assert status in (200, 204), (status, body)
    for broker in tls.brokers:
        wait_until(lambda b=broker: namespace in namespaces_of(tls, b), 5)  # type: ignore[misc]


def test_brokers_share_a_cluster_through_etcd_over_mutual_tls_with_authentication(
    tls_cluster: TlsCluster,
) -> None:
    first, second = tls_cluster.brokers
    topics = topics_of_every_bundle("public/default")
    owners = {topic: http_lookup_owner(first.web_port, topic) for topic in topics}
    assert [http_lookup_owner(second.web_port, t) for t in topics] == list(owners.values())
    produce_and_consume(tls_cluster.cluster.service_url, topics)

    create_namespace(tls_cluster, first, "public/over-tls")
    produce_and_consume(tls_cluster.cluster.service_url, topics_of_every_bundle("public/over-tls"))

    # etcd forgets a token unused for --auth-token-ttl; nothing signals it, so the time itself is
    # the condition. The brokers' metadata connections were idle meanwhile (watches only): the
    # next write through each must authenticate again rather than fail.
    time.sleep(TOKEN_TTL_SECONDS + 1.5)
    create_namespace(tls_cluster, second, "public/after-expiry")
    create_namespace(tls_cluster, first, "public/after-expiry-2")
    produce_and_consume(
        tls_cluster.cluster.service_url, topics_of_every_bundle("public/after-expiry")
    )
    logs = b"".join(b.log_path.read_bytes() for b in tls_cluster.brokers)
    assert b"authenticated again" in logs


def refused_start(etcd: TlsEtcd, tmp_path: Path, *settings: str) -> str:
    """Start a broker that must refuse to start: its output, having checked it exited with the
    configuration-error status."""
    broker = BrokerProcess(
        tmp_path / "data",
        f"metadataStoreUrl={etcd.url}",
        "clusterName=refused",
        *settings,
        log_path=tmp_path / "broker.log",
    )
    with pytest.raises(RuntimeError, match="broker exited") as caught:
        broker.start()
    assert broker.proc is not None
    assert broker.proc.wait(10) == EXIT_CONFIG_ERROR
    return str(caught.value)


def test_a_broker_does_not_start_with_a_ca_that_does_not_sign_etcds_certificate(
    secure_etcd: TlsEtcd, tmp_path: Path
) -> None:
    stranger = Pki(tmp_path / "other-pki", name="Some Other CA")
    options = secure_etcd.options_file(tmp_path / "etcd.yaml", ca=stranger.ca_file)
    output = refused_start(secure_etcd, tmp_path, f"metadataStoreConfigPath={options}")
    assert (
        f"configuration error: etcd at {secure_etcd.endpoint} refused the TLS handshake" in output
    )
    assert "CERTIFICATE_VERIFY_FAILED" in output


def test_a_broker_does_not_start_with_a_client_certificate_etcd_does_not_trust(
    secure_etcd: TlsEtcd, tmp_path: Path
) -> None:
    stranger = Pki(tmp_path / "other-pki", name="Some Other CA").client("etcd-client")
    options = secure_etcd.options_file(tmp_path / "etcd.yaml", client=stranger)
    output = refused_start(secure_etcd, tmp_path, f"metadataStoreConfigPath={options}")
    assert (
        f"configuration error: etcd at {secure_etcd.endpoint} refused the TLS handshake" in output
    )


def test_a_broker_does_not_start_with_a_wrong_etcd_password(
    secure_etcd: TlsEtcd, tmp_path: Path
) -> None:
    options = secure_etcd.options_file(tmp_path / "etcd.yaml", password="not-the-password")
    output = refused_start(secure_etcd, tmp_path, f"metadataStoreConfigPath={options}")
    assert f"etcd at {secure_etcd.endpoint} refused user 'magnetar'" in output
    assert "authentication failed" in output


def test_a_broker_does_not_start_on_https_etcd_without_tls_options(
    secure_etcd: TlsEtcd, tmp_path: Path
) -> None:
    output = refused_start(secure_etcd, tmp_path)
    assert "an https endpoint needs TLS: set useTls" in output


def test_redirects_keep_a_tls_request_on_tls(tls_cluster: TlsCluster) -> None:
    first, second = tls_cluster.brokers
    https = {b.web_port: tls_cluster.https(b) for b in tls_cluster.brokers}
    namespace = "public/redirects"
    create_namespace(tls_cluster, first, namespace)
    # HTTP lookups through the first broker: unowned bundles placed on the second one are
    # answered 307 to the second's https:// URL over TLS (http:// over plain text).
    redirected = 0
    for topic in topics_of_every_bundle(namespace):
        path = f"/lookup/v2/topic/persistent/{topic.removeprefix('persistent://')}"
        plain_status, plain_location, _ = tls_cluster.request(first.http, "GET", path)
        status, location, body = tls_cluster.request(https[first.web_port], "GET", path)
        if status == 307:
            redirected += 1
            assert location == f"{https[second.web_port]}{path}?authoritative=true"
            assert (plain_status, plain_location) == (
                307,
                f"{second.http}{path}?authoritative=true",
            )
            status, _, body = tls_cluster.request(https[second.web_port], "GET", path)
        assert status == 200
        owner = json.loads(body)
        assert owner["brokerUrlTls"].startswith("pulsar+ssl://127.0.0.1:")
        assert owner["httpUrlTls"] in https.values()
    assert redirected > 0
    # Admin calls on a topic reaching a broker that does not own it: 307 to the owner, on
    # the scheme the request came in with.
    topic = topics_of_every_bundle(namespace)[0]
    owner = tls_cluster.cluster.by_url(http_lookup_owner(first.web_port, topic))
    other = second if owner is first else first
    stats = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats"
    status, location, _ = tls_cluster.request(https[other.web_port], "GET", stats)
    assert (status, location) == (307, f"{https[owner.web_port]}{stats}")
    status, location, _ = tls_cluster.request(other.http, "GET", stats)
    assert (status, location) == (307, f"{owner.http}{stats}")
    # Followed over TLS, the owner answers.
    request = urllib.request.Request(f"{https[other.web_port]}{stats}")
    client = new_client(tls_cluster.cluster.service_url)
    try:
        client.create_producer(topic).close()  # the topic exists: its stats are answered
    finally:
        close_client(client)
    with urllib.request.urlopen(request, timeout=10, context=tls_cluster.context()) as reply:
        assert reply.status == 200
        assert "publishers" in json.loads(reply.read())
