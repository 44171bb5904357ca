"""Client authentication, with the official ``pulsar`` package's names and arguments.

* ``AuthenticationToken(token)``: a JWT, or a callable returning one (a *token supplier*),
  asked again whenever the broker challenges an expired token (AUTH_CHALLENGE).
* ``AuthenticationBasic(username, password, method="basic", auth_params_string=None)``:
  ``user:password``; over HTTP ``Authorization: Basic``.
* ``AuthenticationTLS(certificate_path, private_key_path)``: a client certificate, presented
  in the TLS handshake (the broker takes its CN as the role).
* ``AuthenticationOauth2(auth_params_string)``: OAuth 2.0 client credentials; the access token
  the issuer hands out is sent as method ``token`` (``oauth2.py``).
* ``AuthenticationAthenz`` and the plugin loader ``Authentication(dynamicLibPath, ...)`` exist
  for the names only: they raise ``OperationNotSupported``.

Each gives the CONNECT's ``auth_method_name`` and ``auth_data`` and the HTTP ``Authorization``
header for lookups over ``http(s)://``; ``prepare()`` is awaited before either is read.
"""

from client.auth.base import Authentication
from client.auth.methods import (
    AuthenticationAthenz,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)
from client.auth.oauth2 import AuthenticationOauth2

__all__ = [
    "Authentication",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
]
