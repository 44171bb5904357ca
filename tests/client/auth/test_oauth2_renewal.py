"""When AuthenticationOauth2 asks the issuer for a token: once for connections opened
together, not again while the token is fresh, again once most of its lifetime is gone (before
it expires) and whenever the broker has challenged it. Against the local issuer only."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from client import AuthenticationOauth2
from tests.helpers import wait_until_async
from tests.oauth2_server import OAuth2Server


@pytest.fixture
def issuer() -> Iterator[OAuth2Server]:
    with OAuth2Server(b"k" * 32, {"app": ("secret", "role")}) as server:
        yield server


def _auth(issuer: OAuth2Server) -> AuthenticationOauth2:
    key = issuer.credentials_data_url("app")
    return AuthenticationOauth2(json.dumps({"issuer_url": issuer.issuer_url, "private_key": key}))


async def test_connections_opened_together_share_one_request(issuer: OAuth2Server) -> None:
    auth = _auth(issuer)
    await asyncio.gather(*(auth.prepare() for _ in range(5)))
    await auth.prepare()  # fresh: reused
    assert issuer.requests_count() == 1
    assert issuer.metadata_requests == 1
    assert auth.auth_data().decode() == issuer.issued[-1]
    assert auth.http_authorization() == f"Bearer {issuer.issued[-1]}"


async def test_renewed_before_it_expires(issuer: OAuth2Server) -> None:
    issuer.expires_in = 2
    auth = _auth(issuer)
    started = time.monotonic()
    await auth.prepare()
    # Nine tenths of the lifetime: past the renewal point (four fifths), short of the expiry.
    renewal_due = started + 0.9 * issuer.expires_in
    await wait_until_async(lambda: time.monotonic() > renewal_due, 5)
    await auth.prepare()  # before the 2 s are up: a new token already
    assert issuer.requests_count() == 2
    assert issuer.metadata_requests == 1  # the token endpoint is looked up once


async def test_a_challenge_renews_even_a_fresh_token(issuer: OAuth2Server) -> None:
    auth = _auth(issuer)
    await auth.prepare()
    await auth.prepare(renew=True)
    assert issuer.requests_count() == 2
