"""What each authentication puts in CONNECT, ours against the official client's: both connect
to the same scripted broker, which records the frames (and, for OAuth2, both ask the same local
issuer, which records the token requests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator

import pulsar
import pytest

from client import (
    AsyncClient,
    Authentication,
    AuthenticationBasic,
    AuthenticationOauth2,
    AuthenticationToken,
)
from protocol import pb
from tests.client.stub_broker import StubBroker
from tests.oauth2_server import OAuth2Server

T = pb.BaseCommand


@pytest.fixture(scope="module")
def issuer() -> Iterator[OAuth2Server]:
    with OAuth2Server(b"k" * 32, {"app": ("secret", "app-role")}) as server:
        yield server


def _oauth2_params(issuer: OAuth2Server) -> str:
    key = issuer.credentials_data_url("app")
    params = {"issuer_url": issuer.issuer_url, "private_key": key, "audience": "a", "scope": "x y"}
    return json.dumps(params)


Case = Callable[[OAuth2Server], tuple[pulsar.Authentication, Authentication]]
CASES: dict[str, Case] = {
    "token": lambda _: (pulsar.AuthenticationToken("tok"), AuthenticationToken("tok")),
    "token supplier": lambda _: (
        pulsar.AuthenticationToken(lambda: "tok"),
        AuthenticationToken(lambda: "tok"),
    ),
    "basic": lambda _: (pulsar.AuthenticationBasic("u", "p"), AuthenticationBasic("u", "p")),
    "basic method": lambda _: (
        pulsar.AuthenticationBasic("u", "p", "oms3.0"),
        AuthenticationBasic("u", "p", "oms3.0"),
    ),
    "basic params": lambda _: (
        pulsar.AuthenticationBasic(auth_params_string='{"username": "u", "password": "p"}'),
        AuthenticationBasic(auth_params_string='{"username": "u", "password": "p"}'),
    ),
    "oauth2": lambda issuer: (
        pulsar.AuthenticationOauth2(_oauth2_params(issuer)),
        AuthenticationOauth2(_oauth2_params(issuer)),
    ),
}


def _connect_fields(stub: StubBroker) -> tuple[str, str]:
    connect = stub.of_type(T.CONNECT)[-1].command.connect
    return connect.auth_method_name, connect.auth_data.decode()


@pytest.mark.parametrize("name", list(CASES))
async def test_connect_carries_what_the_official_client_sends(
    name: str, issuer: OAuth2Server
) -> None:
    official_auth, our_auth = CASES[name](issuer)
    async with StubBroker() as stub:

        def official() -> None:
            client = pulsar.Client(stub.url, authentication=official_auth)
            try:
                client.create_producer("wire").close()
            finally:
                client.close()

        await asyncio.to_thread(official)
        theirs = _connect_fields(stub)
        async with AsyncClient(
            stub.url, operation_timeout_seconds=5, authentication=our_auth
        ) as client:
            await client.create_producer("wire")
        ours = _connect_fields(stub)
    if name != "oauth2":
        assert ours == theirs
        return
    # Each fetched its own access token from the issuer and sent it as method "token".
    assert ours[0] == theirs[0] == "token"
    assert issuer.issued[-2:] == [theirs[1], ours[1]]
    # And asked for it with the same form: grant type, id, secret, audience, scope.
    theirs_form, ours_form = issuer.token_requests[-2:]
    assert ours_form == theirs_form
    assert ours_form == {
        "grant_type": "client_credentials",
        "client_id": "app",
        "client_secret": "secret",
        "audience": "a",
        "scope": "x y",
    }
