"""``magnetar tokens ...`` (keys and tokens as ``pulsar tokens`` makes them, accepted by the
broker's token provider) and magnetar-admin's credentials and permission verbs."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.admin_cli import main as admin_main
from broker.auth.token import TokenProvider
from broker.cli import main
from broker.config import BrokerConfig
from tests.integration.security_setup import (
    SUPERUSER,
    TENANT_ADMIN,
    SecureBroker,
    set_up_acme,
    start_secure_broker,
)


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, ["tokens", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def test_secret_key_and_token(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    _run("create-secret-key", "--output", str(key))
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(key.read_bytes()) == 32
    token = _run("create", "--secret-key", f"file://{key}", "--subject", "svc", "-e", "1h")
    provider = TokenProvider(BrokerConfig(token_secret_key=f"file://{key}"))
    identity = provider.authenticate(token.encode())
    assert identity.role == "svc"
    assert identity.expires_at is not None
    shown = json.loads(_run("show", token))
    assert shown["claims"]["sub"] == "svc"
    assert shown["header"]["alg"] == "HS256"
    printed = _run("create-secret-key")  # base64 on stdout: usable as tokenSecretKey as is
    TokenProvider(BrokerConfig(token_secret_key=printed))


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_and_token(tmp_path: Path, algorithm: str) -> None:
    private, public = tmp_path / "private.der", tmp_path / "public.der"
    _run(
        "create-key-pair",
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
        "-a",
        algorithm,
    )
    token = _run("create", "--private-key", f"file://{private}", "--subject", "svc")
    provider = TokenProvider(BrokerConfig(token_public_key=f"file://{public}"))
    assert provider.authenticate(token.encode()).role == "svc"


def test_create_needs_exactly_one_key() -> None:
    result = CliRunner().invoke(main, ["tokens", "create", "--subject", "x"])
    assert result.exit_code == 2
    assert "exactly one" in result.output


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureBroker]:
    running = start_secure_broker(tmp_path)
    try:
        set_up_acme(running)
        yield running
    finally:
        running.broker.stop()


def _admin(secure: SecureBroker, role: str | None, *args: str) -> tuple[int, str]:
    options = ["--admin-url", secure.broker.http]
    if role is not None:
        options += ["--auth-token", secure.token(role)]
    result = CliRunner().invoke(admin_main, [*options, *args])
    return result.exit_code, result.output


def test_admin_cli_permissions_and_tenants(secure: SecureBroker) -> None:
    code, _ = _admin(
        secure, TENANT_ADMIN, "namespaces", "grant-permission", "acme/ns", "--role", "etl",
        "--actions", "produce,consume",
    )  # fmt: skip
    assert code == 0
    code, output = _admin(secure, TENANT_ADMIN, "--json", "namespaces", "permissions", "acme/ns")
    assert code == 0
    assert json.loads(output)["etl"] == ["consume", "produce"]
    assert (
        _admin(secure, TENANT_ADMIN, "namespaces", "revoke-permission", "acme/ns", "--role", "etl")[
            0
        ]
        == 0
    )
    code, output = _admin(secure, TENANT_ADMIN, "--json", "namespaces", "permissions", "acme/ns")
    assert "etl" not in json.loads(output)
    # Tenants are the superuser's: the tenant admin is refused (exit 1, HTTP 403).
    code, output = _admin(secure, TENANT_ADMIN, "tenants", "create", "t2", "-r", "ops")
    assert code == 1
    assert "403" in output
    assert _admin(secure, SUPERUSER, "tenants", "create", "t2", "-r", "ops,dev")[0] == 0
    code, output = _admin(secure, SUPERUSER, "--json", "tenants", "get", "t2")
    assert json.loads(output)["adminRoles"] == ["dev", "ops"]
    code, output = _admin(secure, None, "tenants", "list")
    assert code == 1
    assert "403" in output


def test_admin_cli_over_https_with_the_tls_options(secure: SecureBroker) -> None:
    """The CA checks the broker; a client certificate authenticates (CN=admin: superuser)."""
    admin_cert = secure.clients[SUPERUSER]
    https = ["--admin-url", secure.https, "--auth-token", secure.token(SUPERUSER)]
    trusted = [*https, "--tls-trust-cert-path", str(secure.pki.ca_file)]
    listed = CliRunner().invoke(admin_main, [*trusted, "--json", "tenants", "list"])
    assert listed.exit_code == 0, listed.output
    assert "acme" in json.loads(listed.output)
    untrusted = CliRunner().invoke(admin_main, [*https, "tenants", "list"])
    assert untrusted.exit_code == 3
    assert f"cannot reach the broker at {secure.https}" in untrusted.output
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.output
    insecure = CliRunner().invoke(admin_main, [*https, "--tls-allow-insecure", "tenants", "list"])
    assert insecure.exit_code == 0, insecure.output
    by_certificate = [
        "--admin-url", secure.https, "--tls-trust-cert-path", str(secure.pki.ca_file),
        "--tls-cert-file", str(admin_cert.cert), "--tls-key-file", str(admin_cert.key),
    ]  # fmt: skip
    created = CliRunner().invoke(admin_main, [*by_certificate, "tenants", "create", "t-tls"])
    assert created.exit_code == 0, created.output
    assert "Created tenant t-tls" in created.output


def test_standalone_stops_on_unusable_security_settings(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "standalone",
            "--set", f"dataDir={tmp_path / 'data'}",
            "--set", "brokerServicePort=0",
            "--set", "webServicePort=0",
            "--set", "authenticationEnabled=true",
            "--set", "authenticationProviders=token",
        ],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "tokenSecretKey or tokenPublicKey" in result.output
