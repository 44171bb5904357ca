"""The basic provider: htpasswd files with bcrypt and APR1 hashes in every ``basicAuthConf``
form; wrong password, unknown user, unsupported hash, malformed and missing credentials."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from passlib.hash import apr_md5_crypt, bcrypt, sha256_crypt

from broker.auth.basic import BasicProvider
from broker.auth.identity import AuthenticationFailure
from broker.config import BrokerConfig, ConfigError

HTPASSWD = (
    "# users\n"
    f"ann:{bcrypt.using(rounds=4, ident='2y').hash('ann-pw')}\n"
    f"ben:{apr_md5_crypt.hash('ben-pw')}\n"
    "\n"
    "plain:plain-pw\n"
    f"sha:{sha256_crypt.hash('sha-pw')}\n"
)


@pytest.fixture
def provider(tmp_path: Path) -> BasicProvider:
    path = tmp_path / "htpasswd"
    path.write_text(HTPASSWD)
    return BasicProvider(BrokerConfig(basic_auth_conf=str(path)))


def test_every_conf_form(tmp_path: Path) -> None:
    path = tmp_path / "htpasswd"
    path.write_text(HTPASSWD)
    encoded = base64.b64encode(HTPASSWD.encode()).decode()
    for reference in (str(path), f"file://{path}", f"data:;base64,{encoded}", encoded):
        basic = BasicProvider(BrokerConfig(basic_auth_conf=reference))
        assert basic.authenticate(b"ann:ann-pw").role == "ann"


def test_bcrypt_and_apr1(provider: BasicProvider) -> None:
    assert provider.authenticate(b"ann:ann-pw").role == "ann"
    assert provider.authenticate(b"ben:ben-pw").role == "ben"
    assert provider.authenticate(BasicProvider.from_http_header(_b64("ben:ben-pw"))).role == "ben"


@pytest.mark.parametrize(
    "credentials",
    [
        b"ann:wrong",
        b"ben:wrong",
        b"ann:",
        b"nobody:ann-pw",
        b"plain:plain-pw",  # a plain-text line must never work
        b"sha:sha-pw",  # nor a hash Pulsar's provider does not take
        b"no-colon",
        b":ann-pw",
        b"",
        b"\xff:\xfe",
    ],
)
def test_refused(provider: BasicProvider, credentials: bytes) -> None:
    with pytest.raises(AuthenticationFailure):
        provider.authenticate(credentials)


def test_http_header_must_be_base64() -> None:
    with pytest.raises(AuthenticationFailure):
        BasicProvider.from_http_header("***")


def test_bad_configuration(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="basicAuthConf"):
        BasicProvider(BrokerConfig())
    bad = tmp_path / "bad"
    bad.write_text("no hash on this line\n")
    with pytest.raises(ConfigError, match="line 1"):
        BasicProvider(BrokerConfig(basic_auth_conf=str(bad)))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_bcrypt_reads_the_first_72_bytes_of_a_password_as_htpasswd_does() -> None:
    from broker.auth.basic import verify_password

    hashed = bcrypt.using(rounds=4, ident="2y").hash("x" * 72)
    assert verify_password("x" * 72 + "ignored", hashed)
    assert not verify_password("x" * 71, hashed)
