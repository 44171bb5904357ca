"""A local OAuth 2.0 issuer for tests: client credentials grant (RFC 6749 section 4.4).

``OAuth2Server`` serves, from its own thread and event loop (the official client is
blocking, so the issuer must answer while a test thread waits on it), on 127.0.0.1:0:

* ``GET /.well-known/openid-configuration``: ``issuer`` and ``token_endpoint``;
* ``POST /oauth/token``: a form with ``grant_type=client_credentials``, ``client_id`` and
  ``client_secret`` of a registered client answers ``access_token`` (a JWT whose ``sub`` is
  the client's role, signed with the secret the broker trusts, ``aud`` the requested
  audience) and ``expires_in``; anything else gets RFC 6749's error JSON.

Every token request's form is recorded in ``token_requests`` and every token handed out in
``issued``, so tests can check what a client sent. ``expires_in`` (advertised) and
``token_lifetime`` (the JWT's ``exp``) can be set apart, so a test can have the broker find a
token expired that the client still thinks fresh.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import jwt
from aiohttp import web

__all__ = ["OAuth2Server"]

TOKEN_PATH = "/oauth/token"


class OAuth2Server:
    def __init__(self, signing_secret: bytes, clients: dict[str, tuple[str, str]]) -> None:
        """``clients``: client id -> (client secret, role the token names)."""
        self.signing_secret = signing_secret
        self.clients = clients
        self.expires_in = 3600
        self.token_lifetime: float | None = None  # None: expires_in
        self.token_requests: list[dict[str, str]] = []
        self.issued: list[str] = []
        self.metadata_requests = 0
        self.port = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oauth2", daemon=True)

    @property
    def issuer_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def credentials_file(self, directory: Path, client_id: str, secret: str | None = None) -> Path:
        """A credentials file as issuers hand them out (``client_id``, ``client_secret``,
        ``issuer_url``)."""
        path = directory / f"{client_id}.json"
        path.write_text(json.dumps(self._credentials(client_id, secret)))
        return path

    def credentials_data_url(self, client_id: str, secret: str | None = None) -> str:
        document = json.dumps(self._credentials(client_id, secret)).encode()
        return "data:application/json;base64," + base64.b64encode(document).decode()

    def _credentials(self, client_id: str, secret: str | None) -> dict[str, str]:
        return {
            "type": "client_credentials",
            "client_id": client_id,
            "client_secret": self.clients[client_id][0] if secret is None else secret,
            "issuer_url": self.issuer_url,
        }

    def requests_count(self) -> int:
        with self._lock:
            return len(self.token_requests)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> OAuth2Server:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the OAuth2 server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    def __enter__(self) -> OAuth2Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._metadata)
        app.router.add_post(TOKEN_PATH, self._token)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await runner.cleanup()

    # --- endpoints -------------------------------------------------------------------------

    async def _metadata(self, _request: web.Request) -> web.Response:
        self.metadata_requests += 1
        return web.json_response(
            {"issuer": self.issuer_url, "token_endpoint": self.issuer_url + TOKEN_PATH}
        )

    async def _token(self, request: web.Request) -> web.Response:
        form = {key: str(value) for key, value in (await request.post()).items()}
        with self._lock:
            self.token_requests.append(form)
        if form.get("grant_type") != "client_credentials":
            return _error(400, "unsupported_grant_type")
        registered = self.clients.get(form.get("client_id", ""))
        if registered is None or registered[0] != form.get("client_secret"):
            return _error(401, "invalid_client", "unknown client or wrong secret")
        expires_in = self.expires_in
        claims: dict[str, Any] = {
            "sub": registered[1],
            # Rounded up so the token never expires before the client's own reckoning.
            "exp": math.ceil(time.time() + (self.token_lifetime or expires_in)),
        }
        if form.get("audience"):
            claims["aud"] = form["audience"]
        token = jwt.encode(claims, self.signing_secret, algorithm="HS256")
        with self._lock:
            self.issued.append(token)
        return web.json_response(
            {"access_token": token, "token_type": "Bearer", "expires_in": expires_in}
        )


def _error(status: int, error: str, description: str = "") -> web.Response:
    body = {"error": error}
    if description:
        body["error_description"] = description
    return web.json_response(body, status=status)
