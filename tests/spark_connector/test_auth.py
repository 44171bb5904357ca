"""authPluginClassName/authParams: Java plugin names and parameter forms onto our client's
authentication classes (pure; no connection)."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.auth import AuthenticationBasic, AuthenticationOauth2, AuthenticationTLS
from spark_connector.auth import parse_auth

JAVA = "org.apache.pulsar.client.impl.auth."


def test_token_forms(tmp_path: Path) -> None:
    for params in ("token:abc", "abc", '{"token": "abc"}'):
        spec = parse_auth(f"{JAVA}AuthenticationToken", params)
        assert spec is not None
        assert spec.build().auth_data() == b"abc"
    path = tmp_path / "token"
    path.write_text("first\n")
    built = parse_auth("token", f"file://{path}")
    assert built is not None
    auth = built.build()
    assert auth.auth_data() == b"first"
    path.write_text("rotated")  # read again each time, as the Java plugin does
    assert auth.auth_data() == b"rotated"


def test_basic_tls_oauth2() -> None:
    for params in (
        '{"userId": "u", "password": "p"}',
        "userId:u,password:p",
        '{"username": "u", "password": "p"}',
    ):
        spec = parse_auth(f"{JAVA}AuthenticationBasic", params)
        assert spec is not None
        basic = spec.build()
        assert isinstance(basic, AuthenticationBasic)
        assert basic.auth_data() == b"u:p"
    tls = parse_auth(f"{JAVA}AuthenticationTls", "tlsCertFile:/c.pem,tlsKeyFile:/k.pem")
    assert tls is not None
    built = tls.build()
    assert isinstance(built, AuthenticationTLS)
    assert (built.certificate_path, built.private_key_path) == ("/c.pem", "/k.pem")
    oauth = parse_auth(
        f"{JAVA}oauth2.AuthenticationOAuth2",
        '{"type": "client_credentials", "issuerUrl": "http://i", "privateKey": "/k.json", '
        '"audience": "a"}',
    )
    assert oauth is not None
    assert dict(oauth.params) == {
        "issuer_url": "http://i",
        "private_key": "/k.json",
        "audience": "a",
    }
    assert isinstance(oauth.build(), AuthenticationOauth2)
    assert parse_auth(None, None) is None


def test_credentials_never_in_repr() -> None:
    spec = parse_auth("basic", '{"userId": "u", "password": "secret"}')
    assert "secret" not in repr(spec)
    with pytest.raises(ValueError, match="is not supported"):
        parse_auth(f"{JAVA}AuthenticationKeyStoreTls", "{}")
