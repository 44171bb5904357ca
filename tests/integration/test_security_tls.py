"""TLS on both ports with certificates made in the test: the official client over
``pulsar+ssl://`` with hostname verification (and refusing a certificate it cannot trust),
``https://`` for the admin API and as the client's service URL, client certificates required
by ``tlsRequireTrustedClientCertOnConnect``, and the plain ports switched off."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest

from tests.helpers import BrokerThread, broker_config, close_client, new_client
from tests.pki import Pki

pytestmark = [pytest.mark.integration, pytest.mark.compat]
TOPIC = "persistent://public/default/tls-topic"


def _tls_broker(tmp_path: Path, pki: Pki, **overrides: object) -> BrokerThread:
    server = pki.server()
    config = broker_config(
        tmp_path / "data",
        broker_service_port_tls=0,
        web_service_port_tls=0,
        tls_certificate_file_path=str(server.cert),
        tls_key_file_path=str(server.key),
        advertised_address="localhost",
        **overrides,
    )
    return BrokerThread(config).start()


def _round_trip(client: pulsar.Client) -> None:
    consumer = client.subscribe(TOPIC, "s", initial_position=pulsar.InitialPosition.Earliest)
    client.create_producer(TOPIC).send(b"over tls")
    assert consumer.receive(5000).data() == b"over tls"


def test_official_client_over_tls_with_hostname_verification(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    running = _tls_broker(tmp_path, pki, tls_protocols="TLSv1.3,TLSv1.2")
    assert running.broker is not None
    port, web_tls = running.broker.tls_port, running.broker.web_tls_port
    try:
        for url in (f"pulsar+ssl://localhost:{port}", f"https://localhost:{web_tls}"):
            client = new_client(
                url, tls_trust_certs_file_path=str(pki.ca_file), tls_validate_hostname=True
            )
            try:
                _round_trip(client)
            finally:
                close_client(client)
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        with urllib.request.urlopen(
            f"https://localhost:{web_tls}/admin/v2/clusters", timeout=10, context=context
        ) as reply:
            assert reply.status == 200
    finally:
        running.stop()


def test_untrusted_certificate_is_refused_by_the_client(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    stranger = Pki(tmp_path / "other", name="Other CA")
    running = _tls_broker(tmp_path, pki)
    assert running.broker is not None
    try:
        client = new_client(
            f"pulsar+ssl://localhost:{running.broker.tls_port}",
            tls_trust_certs_file_path=str(stranger.ca_file),
            operation_timeout=2,
        )
        try:
            with pytest.raises((pulsar.Timeout, pulsar.ConnectError)):
                client.create_producer(TOPIC)
        finally:
            close_client(client)
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(
                f"https://localhost:{running.broker.web_tls_port}/admin/v2/clusters",
                timeout=10,
                context=ssl.create_default_context(cafile=str(stranger.ca_file)),
            )
    finally:
        running.stop()


def test_required_client_certificate_and_plain_ports_off(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    running = _tls_broker(
        tmp_path,
        pki,
        tls_trust_certs_file_path=str(pki.ca_file),
        tls_require_trusted_client_cert_on_connect=True,
        broker_service_port_enabled=False,
        web_service_port_enabled=False,
    )
    assert running.broker is not None
    assert running.broker.port == 0
    assert running.broker.web_port == 0
    url = f"https://localhost:{running.broker.web_tls_port}/admin/v2/clusters"
    try:
        without = ssl.create_default_context(cafile=str(pki.ca_file))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, timeout=10, context=without).read()
        files = pki.client("someone")
        with_cert = ssl.create_default_context(cafile=str(pki.ca_file))
        with_cert.load_cert_chain(files.cert, files.key)
        with urllib.request.urlopen(url, timeout=10, context=with_cert) as reply:
            assert reply.status == 200
        client = new_client(
            f"pulsar+ssl://localhost:{running.broker.tls_port}",
            tls_trust_certs_file_path=str(pki.ca_file),
            authentication=pulsar.AuthenticationTLS(str(files.cert), str(files.key)),
        )
        try:
            _round_trip(client)
        finally:
            close_client(client)
    finally:
        running.stop()
