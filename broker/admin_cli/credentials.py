"""How ``magnetar-admin`` authenticates: the ``Authorization`` header from pulsar-admin's options.

``--auth-plugin`` takes ``token``/``basic`` or the Java client's class names
(``org.apache.pulsar.client.impl.auth.AuthenticationToken`` / ``AuthenticationBasic``);
``--auth-params`` is what pulsar-admin takes for them: for a token ``token:<jwt>``,
``file:///path`` or the bare token; for basic ``{"userId": ..., "password": ...}`` or
``userId:password``. ``--auth-token`` is a shortcut for a token plugin.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

__all__ = ["AdminAuthError", "authorization_header"]

_PLUGINS = {
    "token": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "basic": "basic",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
}


class AdminAuthError(ValueError):
    """Options that do not describe credentials."""


def authorization_header(plugin: str | None, params: str | None, token: str | None) -> str | None:
    """The ``Authorization`` header value, or None for no credentials."""
    if token:
        return f"Bearer {token.strip()}"
    if plugin is None:
        if params:
            raise AdminAuthError("--auth-params needs --auth-plugin")
        return None
    kind = _PLUGINS.get(plugin)
    if kind is None:
        raise AdminAuthError(f"unknown --auth-plugin {plugin!r} (token or basic)")
    if not params:
        raise AdminAuthError("--auth-plugin needs --auth-params")
    if kind == "token":
        return f"Bearer {_token_from(params)}"
    return "Basic " + base64.b64encode(_basic_from(params).encode()).decode()


def _token_from(params: str) -> str:
    text = params.strip()
    if text.startswith("token:"):
        return text[len("token:") :]
    if text.startswith("file:"):
        path = Path(text[len("file:") :].removeprefix("//"))
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise AdminAuthError(f"cannot read the token file {path}: {exc.strerror}") from None
    return text


def _basic_from(params: str) -> str:
    text = params.strip()
    if text.startswith("{"):
        try:
            document = json.loads(text)
            return f"{document['userId']}:{document['password']}"
        except (ValueError, KeyError, TypeError):
            raise AdminAuthError('basic --auth-params: {"userId": ..., "password": ...}') from None
    if ":" not in text:
        raise AdminAuthError("basic --auth-params: userId:password")
    return text
