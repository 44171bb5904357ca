"""The authentication methods whose credentials are fixed or supplied locally: ``token``,
``basic`` and ``tls`` (and Athenz's name, unsupported). What each sends follows the official
C++ client: the token as is; ``user:password`` (Basic over HTTP); nothing for TLS, whose
credential is the certificate presented in the handshake."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from client.arguments import check_type
from client.auth.base import Authentication
from client.errors import OperationNotSupported

__all__ = [
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationTLS",
    "AuthenticationToken",
]


class AuthenticationToken(Authentication):
    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not (isinstance(token, str) or callable(token)):
            raise ValueError(
                "Argument token is expected to be of type 'str' or a function returning 'str'"
            )
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
    """``AuthenticationBasic(username, password, method="basic", auth_params_string=None)``.

    ``auth_params_string`` is JSON with ``username``, ``password`` and optionally ``method``;
    when given, the other arguments are ignored (as in the official client). Java's key
    ``userId`` is accepted in place of ``username``, so parameters written for the Java
    client's ``AuthenticationBasic`` carry over too.
    """

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string is not None:
            check_type(str, auth_params_string, "auth_params_string")
            username, password, method = _basic_params(auth_params_string)
        else:
            check_type(str, username, "username")
            check_type(str, password, "password")
            check_type(str, method, "method")
        self._username, self._password = username, password
        self.method_name = method

    def auth_data(self) -> bytes:
        return f"{self._username}:{self._password}".encode()

    def http_authorization(self) -> str | None:
        return "Basic " + base64.b64encode(self.auth_data()).decode()


def _basic_params(text: str) -> tuple[str, str, str]:
    """The official client raises ``RuntimeError`` for these (the C++ provider's exceptions
    surface as is), with these messages."""
    try:
        document = json.loads(text) if text else {}
    except ValueError as exc:
        raise RuntimeError(f"invalid auth_params_string: {exc}") from None
    params = (
        {key: _as_text(value) for key, value in document.items()}
        if isinstance(document, dict)
        else {}
    )
    username = params.get("username", params.get("userId"))
    if username is None:
        raise RuntimeError("No username provided for basic provider")
    password = params.get("password")
    if password is None:
        raise RuntimeError("No password provided for basic provider")
    return username, password, params.get("method", "basic")


def _as_text(value: Any) -> str:
    # The C++ parser keeps every scalar as its JSON text (1 -> "1") and an object as "".
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return ""
    return json.dumps(value)


class AuthenticationTLS(Authentication):
    method_name = "tls"

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        check_type(str, certificate_path, "certificate_path")
        check_type(str, private_key_path, "private_key_path")
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path


class AuthenticationAthenz(Authentication):
    """The official name; Athenz (ZTS role tokens) is not implemented by this client."""

    method_name = "athenz"

    def __init__(self, auth_params_string: str) -> None:
        check_type(str, auth_params_string, "auth_params_string")
        raise OperationNotSupported("Athenz authentication is not supported by this client")
