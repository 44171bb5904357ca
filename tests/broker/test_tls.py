"""TLS settings: the server context (protocols, ciphers, client certificates) and the checks
that stop a broker whose TLS or authentication configuration cannot work; the TLS provider's
role (the verified certificate's CN)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from broker.auth.identity import AuthenticationFailure
from broker.auth.providers import AuthenticationService
from broker.auth.tls import TlsProvider
from broker.config import BrokerConfig, ConfigError
from broker.tls import server_ssl_context
from tests.pki import Pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def _config(pki: Pki, **settings: object) -> BrokerConfig:
    server = pki.server()
    return BrokerConfig(
        broker_service_port_tls=0,
        tls_certificate_file_path=str(server.cert),
        tls_key_file_path=str(server.key),
        **settings,  # type: ignore[arg-type]
    )


def test_context_defaults_and_client_certificates(pki: Pki) -> None:
    context = server_ssl_context(_config(pki))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    optional = server_ssl_context(_config(pki, tls_trust_certs_file_path=str(pki.ca_file)))
    assert optional.verify_mode == ssl.CERT_OPTIONAL
    required = server_ssl_context(
        _config(
            pki,
            tls_trust_certs_file_path=str(pki.ca_file),
            tls_require_trusted_client_cert_on_connect=True,
        )
    )
    assert required.verify_mode == ssl.CERT_REQUIRED
    insecure = server_ssl_context(
        _config(pki, tls_trust_certs_file_path=str(pki.ca_file), tls_allow_insecure_connection=True)
    )
    assert insecure.verify_mode == ssl.CERT_NONE


def test_protocols_and_ciphers(pki: Pki) -> None:
    only13 = server_ssl_context(_config(pki, tls_protocols="TLSv1.3"))
    assert only13.minimum_version == only13.maximum_version == ssl.TLSVersion.TLSv1_3
    server_ssl_context(_config(pki, tls_ciphers="ECDHE-ECDSA-AES128-GCM-SHA256"))
    with pytest.raises(ConfigError, match="tlsProtocols"):
        server_ssl_context(_config(pki, tls_protocols="SSLv3"))
    with pytest.raises(ConfigError, match="tlsCiphers"):
        server_ssl_context(_config(pki, tls_ciphers="NO-SUCH-CIPHER"))


def test_configurations_that_cannot_work(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tlsCertificateFilePath"):
        BrokerConfig(web_service_port_tls=8443)
    with pytest.raises(ConfigError, match="brokerServicePortTls"):
        BrokerConfig(broker_service_port_enabled=False)
    with pytest.raises(ConfigError, match="authenticationProviders"):
        BrokerConfig(authentication_enabled=True)
    with pytest.raises(ConfigError, match="unknown provider"):
        AuthenticationService(
            BrokerConfig(authentication_enabled=True, authentication_providers="kerberos")
        )
    with pytest.raises(ConfigError, match="tlsRequireTrustedClientCertOnConnect"):
        server_ssl_context(_config(pki, tls_require_trusted_client_cert_on_connect=True))
    with pytest.raises(ConfigError, match="cannot load"):
        server_ssl_context(
            BrokerConfig(
                broker_service_port_tls=0,
                tls_certificate_file_path=str(tmp_path / "missing.pem"),
                tls_key_file_path=str(tmp_path / "missing.key"),
            )
        )


def test_tls_provider_takes_the_common_name() -> None:
    provider = TlsProvider()
    cert = {"subject": ((("countryName", "NL"),), (("commonName", "svc-a"),))}
    assert provider.authenticate(b"", cert).role == "svc-a"
    for missing in (None, {}, {"subject": ((("organizationName", "x"),),)}):
        with pytest.raises(AuthenticationFailure):
            provider.authenticate(b"", missing)
