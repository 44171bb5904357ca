"""Server-side TLS contexts for ``brokerServicePortTls`` and ``webServicePortTls``.

Pulsar's keys map onto one ``ssl.SSLContext``:

* ``tlsCertificateFilePath`` / ``tlsKeyFilePath``: the broker's PEM certificate chain and key.
* ``tlsTrustCertsFilePath``: CAs that sign client certificates. When set, a certificate is
  asked for and verified if sent (``CERT_OPTIONAL``), and the TLS provider takes its CN as the
  role; with ``tlsRequireTrustedClientCertOnConnect`` a client without one fails the handshake
  (``CERT_REQUIRED``).
* ``tlsAllowInsecureConnection``: client certificates are not asked for or checked at all
  (``CERT_NONE``): Python's TLS cannot accept an unverified certificate and still show it, so
  such connections get no TLS role, where Pulsar would trust an unchecked CN.
* ``tlsProtocols``: e.g. ``TLSv1.3,TLSv1.2`` (the lowest and highest named bound the range);
  empty means TLSv1.2 and newer. ``tlsCiphers``: OpenSSL names for TLSv1.2 (Pulsar's are Java
  names; TLSv1.3 suites are not configurable in Python).
"""

from __future__ import annotations

import ssl

from broker.config import BrokerConfig, ConfigError

__all__ = ["server_ssl_context"]

_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The context both TLS ports use (checked at start-up: a bad file stops the broker)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(config.tls_certificate_file_path, config.tls_key_file_path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"tlsCertificateFilePath/tlsKeyFilePath: cannot load the certificate and key: {exc}",
            key="tlsCertificateFilePath",
        ) from None
    _set_protocols(context, config.tls_protocols)
    if config.tls_ciphers.strip():
        try:
            context.set_ciphers(":".join(c.strip() for c in config.tls_ciphers.split(",")))
        except ssl.SSLError:
            raise ConfigError(
                f"tlsCiphers: no usable cipher in {config.tls_ciphers!r}", key="tlsCiphers"
            ) from None
    _set_client_verification(context, config)
    return context


def _set_protocols(context: ssl.SSLContext, text: str) -> None:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown:
        raise ConfigError(
            f"tlsProtocols: unsupported {', '.join(unknown)} (use TLSv1.2, TLSv1.3)",
            key="tlsProtocols",
        )
    versions = sorted(_VERSIONS[n] for n in names)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _set_client_verification(context: ssl.SSLContext, config: BrokerConfig) -> None:
    if config.tls_allow_insecure_connection or not config.tls_trust_certs_file_path:
        if config.tls_require_trusted_client_cert_on_connect:
            raise ConfigError(
                "tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath and "
                "tlsAllowInsecureConnection = false",
                key="tlsRequireTrustedClientCertOnConnect",
            )
        context.verify_mode = ssl.CERT_NONE
        return
    try:
        context.load_verify_locations(cafile=config.tls_trust_certs_file_path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"tlsTrustCertsFilePath: cannot load {config.tls_trust_certs_file_path}: {exc}",
            key="tlsTrustCertsFilePath",
        ) from None
    context.verify_mode = (
        ssl.CERT_REQUIRED
        if config.tls_require_trusted_client_cert_on_connect
        else ssl.CERT_OPTIONAL
    )
