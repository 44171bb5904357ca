"""The admin API over HTTP (httpx): base URL, TLS, credentials, redirects and failures.

Redirects: in cluster mode a broker that does not own the topic or bundle answers 307 with the
owner's URL; pulsar-admin follows it with the same method and body, and so does httpx for 307
and 308. A 301/302/303 would be followed as a GET (RFC 9110), and a PUT or DELETE then reported
done without having been made: those end the request as refused instead.

Credentials: the ``Authorization`` header goes to the admin URL's origin (scheme, host, port)
and follows redirects within it, or to ``https://`` on the same host from ``http://`` on the
default ports. httpx drops it on a redirect anywhere else, another port of the same host
included: the broker at the other end has not been given the credentials.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = [
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "MAX_REDIRECTS",
    "RequestFailed",
    "TlsOptions",
    "new_client",
    "request",
]

EXIT_REFUSED = 1
EXIT_UNREACHABLE = 3
TIMEOUT_S = 30.0
MAX_REDIRECTS = 5
_METHOD_KEEPING_REDIRECTS = (307, 308)
# Sent with every request, as pulsar-admin does: the admin API reads and answers JSON.
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


class RequestFailed(Exception):
    """A request that did not go through: the message says why, ``exit_code`` is the CLI's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class TlsOptions:
    """pulsar-admin's TLS options: read for an ``https://`` admin URL only."""

    trust_cert_path: str | None = None
    allow_insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.trust_cert_path or None)
        if self.allow_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file and self.key_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def new_client(
    admin_url: str,
    authorization: str | None,
    tls: TlsOptions,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """The client of one invocation; ``transport`` stands in for the network in tests."""
    headers = dict(_JSON_HEADERS)
    if authorization is not None:
        headers["Authorization"] = authorization
    return httpx.Client(
        base_url=admin_url,
        headers=headers,
        verify=_verify(admin_url, tls),
        timeout=TIMEOUT_S,
        follow_redirects=True,
        max_redirects=MAX_REDIRECTS,
        event_hooks={"response": [_refuse_redirects_that_change_the_method]},
        transport=transport,
    )


def _verify(admin_url: str, tls: TlsOptions) -> ssl.SSLContext:
    # For an http:// URL the TLS options are not read (a missing CA file is no error there) and a
    # redirect to https:// is checked against the system's CAs.
    if admin_url.startswith("https://"):
        return tls.context()
    return ssl.create_default_context()


def _refuse_redirects_that_change_the_method(response: httpx.Response) -> None:
    """Ends the request at a 301/302/303, which httpx would follow as a GET (see above)."""
    if response.has_redirect_location and response.status_code not in _METHOD_KEEPING_REDIRECTS:
        response.read()
        response.raise_for_status()


def request(client: httpx.Client, method: str, path: str, body: Any = None) -> Any:
    """One request with ``body`` as JSON; the decoded answer (None for an empty one, the text
    for one that is not JSON). Raises ``RequestFailed``."""
    content = None if body is None else json.dumps(body).encode()
    try:
        response = client.request(method, path, content=content)
        response.raise_for_status()  # any status but 2xx, a 3xx left unfollowed included
    except httpx.HTTPStatusError as error:
        status = error.response.status_code
        message = f"{method} {path} failed: HTTP {status}: {_reason(error.response)}"
        raise RequestFailed(message, EXIT_REFUSED) from None
    except httpx.TooManyRedirects:
        message = f"{method} {path}: more than {MAX_REDIRECTS} redirects"
        raise RequestFailed(message, EXIT_REFUSED) from None
    except httpx.TransportError as error:
        message = f"cannot reach the broker at {error.request.url}: {error}"
        raise RequestFailed(message, EXIT_UNREACHABLE) from None
    return _decoded(response.content)


def _reason(response: httpx.Response) -> str:
    """Pulsar's ``{"reason": ...}``, else the body's text, else the status line's phrase."""
    try:
        reason = json.loads(response.content).get("reason")
    except (ValueError, AttributeError):
        reason = None
    if reason:
        return str(reason)
    return response.content.decode(errors="replace").strip() or response.reason_phrase


def _decoded(content: bytes) -> Any:
    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return content.decode(errors="replace")
