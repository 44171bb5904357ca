"""The client's TLS context, from the official client's options.

``tls_trust_certs_file_path`` names the CAs the broker's certificate must chain to (the
system's when None); ``tls_allow_insecure_connection`` accepts any certificate;
``tls_validate_hostname`` also checks that the certificate names the host connected to (off by
default, as in the official client); an ``AuthenticationTLS`` (or
``tls_certificate_file_path`` with ``tls_private_key_file_path``) adds the client certificate.
"""

from __future__ import annotations

import ssl

from client.auth import Authentication, AuthenticationTLS

__all__ = ["client_ssl_context"]


def client_ssl_context(
    *,
    trust_certs_file_path: str | None,
    allow_insecure_connection: bool,
    validate_hostname: bool,
    authentication: Authentication | None,
    certificate: tuple[str | None, str | None] = (None, None),
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=trust_certs_file_path or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if allow_insecure_connection:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = validate_hostname
    if isinstance(authentication, AuthenticationTLS):
        context.load_cert_chain(authentication.certificate_path, authentication.private_key_path)
    elif certificate[0] and certificate[1]:
        context.load_cert_chain(certificate[0], certificate[1])
    return context
