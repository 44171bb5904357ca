"""The token provider: HS256 secrets and RS256/ES256 public keys in Pulsar's ``file:``,
``data:`` and base64 forms; valid, expired, wrong signature, wrong key type, malformed and
missing tokens; ``tokenAuthClaim`` and ``tokenAudience``."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from broker.auth.identity import AuthenticationFailure
from broker.auth.token import TokenProvider, create_key_pair, create_secret_key, create_token
from broker.config import BrokerConfig, ConfigError


def _data_url(raw: bytes) -> str:
    return "data:;base64," + base64.b64encode(raw).decode()


def _provider(**settings: object) -> TokenProvider:
    return TokenProvider(BrokerConfig(**settings))  # type: ignore[arg-type]


def test_secret_key_in_every_form(tmp_path: Path) -> None:
    secret = create_secret_key()
    (tmp_path / "secret.key").write_bytes(secret)
    token = create_token(secret, "alice").encode()
    for reference in (
        f"file://{tmp_path / 'secret.key'}",
        _data_url(secret),
        base64.b64encode(secret).decode(),
    ):
        identity = _provider(token_secret_key=reference).authenticate(token)
        assert identity.role == "alice"
        assert identity.expires_at is None


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_public_keys_der_and_pem(tmp_path: Path, algorithm: str) -> None:
    private, public = create_key_pair(algorithm)
    token = create_token(private, "bob", private=True, expires_in=60).encode()
    pem = serialization.load_der_public_key(public).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "public.key").write_bytes(public)
    for reference in (f"file://{tmp_path / 'public.key'}", _data_url(pem)):
        identity = _provider(token_public_key=reference).authenticate(token)
        assert identity.role == "bob"
        assert identity.expires_at is not None
        assert identity.expires_at > time.time()
        assert jwt.get_unverified_header(token.decode())["alg"] == algorithm


def test_expired_token() -> None:
    secret = create_secret_key()
    provider = _provider(token_secret_key=_data_url(secret))
    with pytest.raises(AuthenticationFailure, match="expired"):
        provider.authenticate(create_token(secret, "alice", expires_in=-1).encode())


def test_wrong_signature() -> None:
    provider = _provider(token_secret_key=_data_url(create_secret_key()))
    with pytest.raises(AuthenticationFailure, match="Signature"):
        provider.authenticate(create_token(create_secret_key(), "alice").encode())
    rsa_private, _ = create_key_pair("RS256")
    _, other_public = create_key_pair("RS256")
    rsa = _provider(token_public_key=_data_url(other_public))
    with pytest.raises(AuthenticationFailure):
        rsa.authenticate(create_token(rsa_private, "alice", private=True).encode())


def test_wrong_key_type() -> None:
    _, rsa_public = create_key_pair("RS256")
    ec_private, _ = create_key_pair("ES256")
    rsa = _provider(token_public_key=_data_url(rsa_public))
    with pytest.raises(AuthenticationFailure, match="alg"):
        rsa.authenticate(create_token(ec_private, "alice", private=True).encode())
    # The classic confusion: an HS256 token keyed with the (public) RSA key's bytes.
    forged = jwt.encode({"sub": "mallory"}, "x" * 32, algorithm="HS256")
    with pytest.raises(AuthenticationFailure):
        rsa.authenticate(forged.encode())
    unsigned = jwt.encode({"sub": "mallory"}, None, algorithm="none")
    with pytest.raises(AuthenticationFailure):
        rsa.authenticate(unsigned.encode())


@pytest.mark.parametrize("data", [b"", b"   ", b"not.a.jwt", b"\xff\xfe", b"Bearer "])
def test_malformed_or_missing(data: bytes) -> None:
    provider = _provider(token_secret_key=_data_url(create_secret_key()))
    with pytest.raises(AuthenticationFailure):
        provider.authenticate(data)


def test_auth_claim_and_bearer_prefix() -> None:
    secret = create_secret_key()
    provider = _provider(token_secret_key=_data_url(secret), token_auth_claim="role")
    token = create_token(secret, "carol", claim="role")
    assert provider.authenticate(f"Bearer {token}".encode()).role == "carol"
    with pytest.raises(AuthenticationFailure, match="role"):
        provider.authenticate(create_token(secret, "carol").encode())  # only "sub"


def test_audience() -> None:
    secret = create_secret_key()
    provider = _provider(token_secret_key=_data_url(secret), token_audience="magnetar")
    good = jwt.encode({"sub": "dave", "aud": ["magnetar", "x"]}, secret, algorithm="HS256")
    assert provider.authenticate(good.encode()).role == "dave"
    with pytest.raises(AuthenticationFailure, match="audience"):
        provider.authenticate(create_token(secret, "dave").encode())


def test_bad_key_configuration(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tokenSecretKey or tokenPublicKey"):
        _provider()
    with pytest.raises(ConfigError, match="cannot read"):
        _provider(token_secret_key=f"file://{tmp_path / 'missing'}")
    with pytest.raises(ConfigError, match="public key"):
        _provider(token_public_key=_data_url(b"not a key"))
    with pytest.raises(ConfigError, match="base64"):
        _provider(token_secret_key="not base64!")


def test_inline_secrets_are_redacted_in_the_logged_configuration(tmp_path: Path) -> None:
    secret = base64.b64encode(create_secret_key()).decode()
    described = BrokerConfig(token_secret_key=secret, basic_auth_conf="data:,u:h").describe()
    assert secret not in described
    assert "u:h" not in described
    assert 'tokenSecretKey = "<redacted>"' in described
    by_file = BrokerConfig(token_secret_key=f"file://{tmp_path}/k").describe()
    assert f'tokenSecretKey = "file://{tmp_path}/k"' in by_file


def test_base64_secrets_that_look_like_paths_are_redacted(tmp_path: Path) -> None:
    """Base64 text may start with "/": only a file reference (or, for basicAuthConf, a bare
    path naming a file, as ``read_key_material`` reads it) is shown."""
    secret = "/3VaYlO6zsKxeGqaZNnY0npeWCSOh4shTtBhjdxvdhU="
    described = BrokerConfig(token_secret_key=secret, basic_auth_conf=secret).describe()
    assert secret not in described
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("u:h\n")
    shown = BrokerConfig(basic_auth_conf=str(htpasswd)).describe()
    assert f'basicAuthConf = "{htpasswd}"' in shown


@pytest.mark.parametrize("exp_offset", [3600, -10])
def test_numeric_string_exp_is_the_same_expiry_at_connect_and_on_refresh(exp_offset: int) -> None:
    # jjwt reads a numeric string as a number: checked at CONNECT, and kept for the re-check.
    secret = create_secret_key()
    provider = _provider(token_secret_key=_data_url(secret))
    exp = int(time.time()) + exp_offset
    token = jwt.encode({"sub": "carol", "exp": str(exp)}, secret, algorithm="HS256").encode()
    if exp_offset < 0:
        with pytest.raises(AuthenticationFailure, match="expired"):
            provider.authenticate(token)
        return
    identity = provider.authenticate(token)
    assert identity.expires_at == float(exp)
    assert identity.expired(now=exp + 1)  # what the live connection's re-check asks


@pytest.mark.parametrize("exp", ["tomorrow", True, None, [1], {"at": 1}])
def test_non_numeric_exp_is_refused_as_jjwt_refuses_it(exp: object) -> None:
    secret = create_secret_key()
    provider = _provider(token_secret_key=_data_url(secret))
    token = jwt.encode({"sub": "carol", "exp": exp}, secret, algorithm="HS256").encode()
    with pytest.raises(AuthenticationFailure):
        provider.authenticate(token)
