"""OAuth 2.0 client credentials (RFC 6749 section 4.4), as Pulsar's ``AuthenticationOauth2``.

The parameters are the official JSON: ``issuer_url`` and ``private_key`` (required),
``audience``, ``scope``, ``connect_timeout_seconds`` and ``request_timeout_seconds``.
``private_key`` names the credentials file (``client_id``, ``client_secret``) as a path,
``file://`` or ``file:`` URL, or inline as ``data:application/json;base64,...``.

The flow: the issuer's metadata (``<issuer_url>/.well-known/openid-configuration``) names the
``token_endpoint``; a form-encoded POST of ``grant_type=client_credentials`` with the client's
id and secret (and ``audience``, ``scope``) returns ``access_token`` and ``expires_in``. The
access token is sent as method ``token``, exactly what a token supplier would send, so the
broker needs only its token provider.

As in the official client, a bad parameter is not an error at construction: the official one
logs it and fails the first connection with ``AuthenticationError``, and so does this one. The
token is kept and reused until most of its lifetime is gone, then fetched again by the next
connection or AUTH_CHALLENGE, so a challenged connection gets a fresh token rather than the
one the broker just found expired.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from client.arguments import check_type
from client.auth.base import Authentication
from client.errors import AuthenticationError, OperationNotSupported

__all__ = ["AuthenticationOauth2"]

#: The official client's HTTP limits when the parameters do not set them.
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_REQUEST_TIMEOUT_SECONDS = 30
#: A token is renewed once this share of its lifetime has passed: the rest is the margin for
#: clock skew and for the broker's own periodic expiry check.
RENEW_AFTER = 0.8
WELL_KNOWN = "/.well-known/openid-configuration"


@dataclass(frozen=True, slots=True)
class _Credentials:
    client_id: str
    client_secret: str


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    renew_at: float  # time.monotonic()


class AuthenticationOauth2(Authentication):
    method_name = "token"

    def __init__(self, auth_params_string: str) -> None:
        check_type(str, auth_params_string, "auth_params_string")
        params = _parse_params(auth_params_string)
        endpoint_auth = params.get("tokenEndpointAuthMethod") or "client_secret_post"
        if endpoint_auth == "tls_client_auth":
            raise OperationNotSupported("OAuth2 with tls_client_auth is not supported")
        if endpoint_auth != "client_secret_post":
            raise ValueError(f"Unknown tokenEndpointAuthMethod: {endpoint_auth}")
        self._params = params
        self._issuer_url = params.get("issuer_url", "")
        self._audience = params.get("audience", "")
        self._scope = params.get("scope", "")
        self._timeout = aiohttp.ClientTimeout(
            connect=_seconds(params, "connect_timeout_seconds", DEFAULT_CONNECT_TIMEOUT_SECONDS),
            total=_seconds(params, "request_timeout_seconds", DEFAULT_REQUEST_TIMEOUT_SECONDS),
        )
        self._token_endpoint: str | None = None
        self._token: _Token | None = None
        self._fetching: asyncio.Task[_Token] | None = None

    async def prepare(self, renew: bool = False) -> None:
        token = self._token
        if not renew and token is not None and time.monotonic() < token.renew_at:
            return
        loop = asyncio.get_running_loop()
        fetching = self._fetching
        # Connections opened together share one request to the issuer. A task from another
        # loop (two blocking clients sharing this object) cannot be awaited here; a renewal
        # may join a request already under way (it was sent after the token was found stale).
        if fetching is None or fetching.done() or fetching.get_loop() is not loop:
            fetching = self._fetching = loop.create_task(self._fetch())
            fetching.add_done_callback(_retrieve)
        # Shielded: one caller's cancellation (a connect timeout) must not fail the others.
        self._token = await asyncio.shield(fetching)

    def auth_data(self) -> bytes:
        if self._token is None:
            raise AuthenticationError("no OAuth2 access token: prepare() was not awaited")
        return self._token.value.encode()

    def http_authorization(self) -> str | None:
        return None if self._token is None else f"Bearer {self._token.value}"

    async def _fetch(self) -> _Token:
        credentials = _credentials(self._params)
        if not self._issuer_url:
            raise AuthenticationError("OAuth2: issuer_url is not set")
        form = {
            "grant_type": "client_credentials",
            "client_id": credentials.client_id,
            "client_secret": credentials.client_secret,
            # Sent even when empty, as the official client does.
            "audience": self._audience,
        }
        if self._scope:
            form["scope"] = self._scope
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session:
                if self._token_endpoint is None:
                    metadata = await _get_json(
                        session, "GET", self._issuer_url.rstrip("/") + WELL_KNOWN
                    )
                    endpoint = metadata.get("token_endpoint")
                    if not isinstance(endpoint, str) or not endpoint:
                        raise AuthenticationError(
                            f"OAuth2: the metadata of {self._issuer_url} has no token_endpoint"
                        )
                    self._token_endpoint = endpoint
                started = time.monotonic()
                answer = await _get_json(session, "POST", self._token_endpoint, form)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AuthenticationError(f"OAuth2: cannot reach {self._issuer_url}: {exc!r}") from exc
        access_token, expires_in = answer.get("access_token"), answer.get("expires_in")
        if not isinstance(access_token, str) or not access_token:
            raise AuthenticationError("OAuth2: the token endpoint's answer has no access_token")
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in)
        if (
            not isinstance(expires_in, int | float)
            or isinstance(expires_in, bool)
            or expires_in <= 0
        ):
            # The official client cannot cache a token without a lifetime, and fails too.
            raise AuthenticationError(f"OAuth2: invalid expires_in {expires_in!r}")
        return _Token(access_token, started + expires_in * RENEW_AFTER)


def _retrieve(task: asyncio.Task[_Token]) -> None:
    # Every waiter may have been cancelled: the failure is theirs to see, not the loop's log.
    if not task.cancelled():
        task.exception()


async def _get_json(
    session: aiohttp.ClientSession, method: str, url: str, form: dict[str, str] | None = None
) -> dict[str, Any]:
    """One request to the issuer; a non-200 answer is an ``AuthenticationError`` with the
    RFC 6749 ``error`` and ``error_description`` when the server gave them."""
    headers = {"Accept": "application/json"}
    async with session.request(method, url, data=form, headers=headers) as reply:
        body = await reply.read()
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if reply.status != 200:
        detail = ""
        if isinstance(document, dict) and "error" in document:
            detail = f": {document['error']} {document.get('error_description', '')}".rstrip()
        raise AuthenticationError(f"OAuth2: {method} {url} answered {reply.status}{detail}")
    if not isinstance(document, dict):
        raise AuthenticationError(f"OAuth2: {method} {url} did not answer a JSON object")
    return document


def _parse_params(text: str) -> dict[str, str]:
    # Unparsable JSON leaves no parameters: the first connection then fails, as officially.
    try:
        document = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(document, dict):
        return {}
    return {
        str(key): value if isinstance(value, str) else json.dumps(value)
        for key, value in document.items()
    }


def _seconds(params: dict[str, str], key: str, default: int) -> float | None:
    # As the official client: not a whole number keeps the default; 0 is no limit.
    value = params.get(key, "")
    if not value.isdigit():
        return default
    return int(value) or None


def _credentials(params: dict[str, str]) -> _Credentials:
    """The client id and secret, from ``private_key`` (a path, ``file:`` or ``data:`` URL)
    or, as the official client allows, from ``client_id``/``client_secret`` parameters."""
    url = params.get("private_key")
    if url is None:
        return _checked(params, "the parameters")
    scheme, colon, rest = url.partition(":")
    if not colon:
        return _from_file(url)
    if scheme == "file":
        return _from_file(rest[2:] if rest.startswith("//") else rest)
    if scheme == "data":
        media_type, _, rest = rest.partition(";")
        encoding, comma, payload = rest.partition(",")
        if media_type != "application/json" or encoding != "base64" or not comma:
            raise AuthenticationError(
                "OAuth2: private_key data URLs must be data:application/json;base64,..."
            )
        try:
            text = base64.b64decode(payload, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise AuthenticationError(f"OAuth2: private_key is not base64 JSON: {exc}") from None
        return _checked(_json_object(text, "the private_key data URL"), "the private_key data URL")
    raise AuthenticationError(f"OAuth2: unsupported private_key URL scheme {scheme!r}")


def _from_file(path: str) -> _Credentials:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise AuthenticationError(
            f"OAuth2: cannot read the credentials file {path}: {exc}"
        ) from None
    return _checked(_json_object(text, path), path)


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise AuthenticationError(f"OAuth2: {where} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise AuthenticationError(f"OAuth2: {where} is not a JSON object")
    return document


def _checked(document: dict[str, Any], where: str) -> _Credentials:
    client_id, client_secret = document.get("client_id"), document.get("client_secret")
    if not isinstance(client_id, str) or not client_id or not isinstance(client_secret, str):
        raise AuthenticationError(f"OAuth2: {where} lacks client_id or client_secret")
    return _Credentials(client_id, client_secret)
