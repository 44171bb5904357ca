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


def test_a_malformed_hash_is_an_authentication_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = bcrypt.using(rounds=4, ident="2y").hash("ok-pw")
    path = tmp_path / "htpasswd"
    path.write_text(
        f"ok:{good}\ncut:{good[:-5]}\nsalt:$2y$04$!!!{good[10:]}\napr:$apr1$salt$short\n"
    )
    with caplog.at_level("WARNING", logger="broker.auth.basic"):
        provider = BasicProvider(BrokerConfig(basic_auth_conf=str(path)))
    assert sum("malformed hash" in r.getMessage() for r in caplog.records) == 3
    for user in ("cut", "salt", "apr"):
        with pytest.raises(AuthenticationFailure):
            provider.authenticate(f"{user}:ok-pw".encode())
    assert provider.authenticate(b"ok:ok-pw").role == "ok"


def test_a_hash_the_library_rejects_at_check_time_is_a_failure_too(provider: BasicProvider) -> None:
    provider._users["ann"] = "$2y$04$" + "x" * 53  # well-formed to the eye, bad salt inside
    with pytest.raises(AuthenticationFailure):
        provider.authenticate(b"ann:ann-pw")


@pytest.mark.parametrize(
    ("costs", "expected"),
    [([5, 5, 4], "$2b$05$"), ([4, 6], "$2b$06$"), ([], "$2b$10$"), ([12], "$2b$12$")],
)
def test_unknown_users_cost_what_the_files_entries_cost(costs: list[int], expected: str) -> None:
    from broker.auth.basic import dummy_hash_for

    hashes = [bcrypt.using(rounds=c, ident="2y").hash("pw") for c in costs]
    assert dummy_hash_for(hashes).startswith(expected)


def test_an_apr1_file_gets_an_apr1_dummy() -> None:
    from broker.auth.basic import dummy_hash_for

    hashes = [apr_md5_crypt.hash("a"), apr_md5_crypt.hash("b"), "plain-text"]
    assert dummy_hash_for(hashes).startswith("$apr1$")


def test_the_provider_checks_unknown_users_against_its_own_cost(tmp_path: Path) -> None:
    path = tmp_path / "htpasswd"
    path.write_text(f"a:{bcrypt.using(rounds=6, ident='2y').hash('pw')}\nplain:pw\n")
    provider = BasicProvider(BrokerConfig(basic_auth_conf=str(path)))
    assert provider._dummy.startswith("$2b$06$")
    assert provider.blocking  # bcrypt: the authentication service runs it on its pool
