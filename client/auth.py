"""Client authentication, with the official ``pulsar`` package's names and arguments.

* ``AuthenticationToken(token)``: a JWT, or a callable returning one (a *token supplier*),
  asked again whenever the broker challenges an expired token (AUTH_CHALLENGE).
* ``AuthenticationBasic(username, password, method="basic")``: ``user:password``; over HTTP
  ``Authorization: Basic``.
* ``AuthenticationTLS(certificate_path, private_key_path)``: a client certificate, presented
  in the TLS handshake (the broker takes its CN as the role).

Each gives the CONNECT's ``auth_method_name`` and ``auth_data`` and the HTTP ``Authorization``
header for lookups over ``http(s)://``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

__all__ = [
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationTLS",
    "AuthenticationToken",
]


class Authentication:
    """Base class: the method name and the credentials sent with CONNECT."""

    method_name = "none"

    def auth_data(self) -> bytes:
        return b""

    def http_authorization(self) -> str | None:
        """The ``Authorization`` header value for HTTP requests, if this method has one."""
        return None

    def __repr__(self) -> str:  # never the credentials
        return f"{type(self).__name__}()"


class AuthenticationToken(Authentication):
    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not (isinstance(token, str) or callable(token)):
            raise TypeError("token must be a string or a callable returning one")
        self._token = token

    def token(self) -> str:
        value = self._token() if callable(self._token) else self._token
        if not isinstance(value, str):
            raise TypeError("the token supplier must return a string")
        return value

    def auth_data(self) -> bytes:
        return self.token().encode()

    def http_authorization(self) -> str | None:
        return f"Bearer {self.token()}"


class AuthenticationBasic(Authentication):
    def __init__(self, username: str, password: str, method: str = "basic") -> None:
        self._username, self._password = username, password
        self.method_name = method

    def auth_data(self) -> bytes:
        return f"{self._username}:{self._password}".encode()

    def http_authorization(self) -> str | None:
        return "Basic " + base64.b64encode(self.auth_data()).decode()


class AuthenticationTLS(Authentication):
    method_name = "tls"

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path
