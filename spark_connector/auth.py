"""``authPluginClassName`` / ``authParams``: pulsar-spark's authentication options, checked at
planning time and turned into one of our client's ``Authentication`` objects in each worker.

Pure until ``AuthSpec.build`` (which only constructs the client object; an OAuth2 token is
fetched by the client's first connection). An ``AuthSpec`` is a small frozen value: it is
pickled to the executors with the options and is part of the per-process client cache key.

Plugin names: the Java client's classes (``org.apache.pulsar.client.impl.auth.Authentication
Token``, ``...AuthenticationBasic``, ``...AuthenticationTls``, ``...oauth2.AuthenticationOAuth2``),
the Python client's class names (``AuthenticationToken``, ``AuthenticationBasic``,
``AuthenticationTLS``, ``AuthenticationOauth2``) or the method names (``token``, ``basic``,
``tls``, ``oauth2``). ``authParams`` takes the forms the Java plugins take:

* token: ``token:<jwt>``, ``file:///path`` (read again whenever the client needs the token, so a
  rotated file is picked up), a bare JWT, or JSON ``{"token": "<jwt>"}``;
* basic: JSON ``{"userId": ..., "password": ...}`` (``username`` too) or ``userId:u,password:p``;
* tls: JSON ``{"tlsCertFile": ..., "tlsKeyFile": ...}`` or ``tlsCertFile:/a,tlsKeyFile:/b``;
* oauth2: JSON with the Java keys (``issuerUrl``, ``privateKey``, ``audience``, ``scope``) or
  the Python client's (``issuer_url``, ``private_key``, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from client.auth import (
    Authentication,
    AuthenticationBasic,
    AuthenticationOauth2,
    AuthenticationTLS,
    AuthenticationToken,
)
from spark_connector.option_table import OptionError

__all__ = ["AuthSpec", "parse_auth"]

_JAVA = "org.apache.pulsar.client.impl.auth."
_PLUGINS = {
    f"{_JAVA}authenticationtoken": "token",
    f"{_JAVA}authenticationbasic": "basic",
    f"{_JAVA}authenticationtls": "tls",
    f"{_JAVA}oauth2.authenticationoauth2": "oauth2",
    "authenticationtoken": "token",
    "authenticationbasic": "basic",
    "authenticationtls": "tls",
    "authenticationoauth2": "oauth2",
    "token": "token",
    "basic": "basic",
    "tls": "tls",
    "oauth2": "oauth2",
}
_OAUTH2_KEYS = {
    "issuerUrl": "issuer_url",
    "privateKey": "private_key",
    "audience": "audience",
    "scope": "scope",
}


@dataclass(frozen=True)
class AuthSpec:
    """A checked authentication: ``method`` and its parameters as ``(key, value)`` pairs."""

    method: str
    params: tuple[tuple[str, str], ...]

    def build(self) -> Authentication:
        """The client's ``Authentication`` (in the worker that opens the client)."""
        params = dict(self.params)
        if self.method == "token":
            path = params.get("file")
            if path is not None:
                return AuthenticationToken(lambda: Path(path).read_text().strip())
            return AuthenticationToken(params["token"])
        if self.method == "basic":
            return AuthenticationBasic(params["userId"], params["password"])
        if self.method == "tls":
            return AuthenticationTLS(params["tlsCertFile"], params["tlsKeyFile"])
        return AuthenticationOauth2(json.dumps(params))

    def __repr__(self) -> str:
        # Never print a credential (options end up in logs and Spark's plan strings).
        return f"AuthSpec({self.method}, keys={[key for key, _ in self.params]})"


def parse_auth(plugin: str | None, params: str | None) -> AuthSpec | None:
    """The authentication ``authPluginClassName`` and ``authParams`` name (None: none).

    Raises:
        OptionError: an unknown or unsupported plugin, or parameters it cannot use.
    """
    if not plugin:
        if params:
            raise OptionError("option 'authParams' needs 'authPluginClassName'")
        return None
    method = _PLUGINS.get(plugin.strip().lower())
    if method is None:
        raise OptionError(
            f"option 'authPluginClassName': {plugin!r} is not supported; use "
            f"{_JAVA}AuthenticationToken, AuthenticationBasic, AuthenticationTls or "
            "oauth2.AuthenticationOAuth2"
        )
    text = (params or "").strip()
    parsers = {"token": _token, "basic": _basic, "tls": _tls, "oauth2": _oauth2}
    return AuthSpec(method, tuple(sorted(parsers[method](text).items())))


def _pairs(text: str, what: str) -> dict[str, str]:
    """JSON object, or Pulsar's older ``key:value,key:value`` form."""
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OptionError(f"option 'authParams' of {what} is not valid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise OptionError(f"option 'authParams' of {what} must be a JSON object")
        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in document.items()}
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, colon, value = item.partition(":")
        if not colon:
            raise OptionError(f"option 'authParams' of {what}: {item!r} is not key:value")
        out[key.strip()] = value.strip()
    return out


def _require(params: dict[str, str], keys: tuple[str, ...], what: str) -> dict[str, str]:
    missing = [key for key in keys if not params.get(key)]
    if missing:
        raise OptionError(f"option 'authParams' of {what} lacks {', '.join(missing)}")
    return {key: params[key] for key in keys}


def _token(text: str) -> dict[str, str]:
    if text.startswith("{"):
        return _require(_pairs(text, "token authentication"), ("token",), "token authentication")
    if text.startswith("token:"):
        text = text[len("token:") :]
    elif text.startswith("file:"):
        path = text[len("file:") :]
        return {"file": path[2:] if path.startswith("//") else path}
    if not text:
        raise OptionError("option 'authParams' of token authentication has no token")
    return {"token": text}


def _basic(text: str) -> dict[str, str]:
    params = _pairs(text, "basic authentication")
    if "userId" not in params and "username" in params:
        params["userId"] = params["username"]
    return _require(params, ("userId", "password"), "basic authentication")


def _tls(text: str) -> dict[str, str]:
    return _require(_pairs(text, "TLS authentication"), ("tlsCertFile", "tlsKeyFile"), "TLS")


def _oauth2(text: str) -> dict[str, str]:
    params = _pairs(text, "OAuth2 authentication")
    out = {_OAUTH2_KEYS.get(key, key): value for key, value in params.items()}
    out.pop("type", None)  # Java's "client_credentials": the only flow there is
    return _require(out, ("issuer_url", "private_key"), "OAuth2") | out
