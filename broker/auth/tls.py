"""TLS client-certificate authentication (Pulsar's ``AuthenticationProviderTls``, method
``tls``): the role is the certificate subject's common name.

Only a certificate the TLS handshake verified against ``tlsTrustCertsFilePath`` counts
(``ssl.SSLObject.getpeercert()`` is empty otherwise), so ``tlsAllowInsecureConnection`` never
lends a role to an unchecked certificate (Pulsar would take its CN).
"""

from __future__ import annotations

from typing import Any

from broker.auth.identity import AuthenticationFailure, Identity

__all__ = ["TlsProvider", "common_name"]


def common_name(peer_cert: dict[str, Any] | None) -> str | None:
    """The subject CN of a certificate as ``getpeercert()`` returns it."""
    if not peer_cert:
        return None
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


class TlsProvider:
    method = "tls"
    blocking = False

    def __init__(self, *_config: object) -> None:
        pass

    def authenticate(self, data: bytes, peer_cert: dict[str, Any] | None = None) -> Identity:
        role = common_name(peer_cert)
        if role is None:
            raise AuthenticationFailure("no verified client certificate with a common name")
        return Identity(role, self.method)
