"""magnetar-admin's credentials: pulsar-admin's auth options into an ``Authorization`` header."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.admin_cli.credentials import AdminAuthError, authorization_header


def test_admin_credentials_options(tmp_path: Path) -> None:
    assert authorization_header(None, None, "abc") == "Bearer abc"
    assert authorization_header("token", "token:abc", None) == "Bearer abc"
    (tmp_path / "t").write_text("from-file\n")
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    assert authorization_header(plugin, f"file://{tmp_path / 't'}", None) == "Bearer from-file"
    basic = authorization_header("basic", '{"userId": "u", "password": "p"}', None)
    assert basic == "Basic dTpw"
    assert authorization_header(None, None, None) is None
    with pytest.raises(AdminAuthError):
        authorization_header("kerberos", "x", None)


def test_options_that_describe_no_credentials_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AdminAuthError, match="needs --auth-plugin"):
        authorization_header(None, "token:abc", None)
    with pytest.raises(AdminAuthError, match="needs --auth-params"):
        authorization_header("token", None, None)
    with pytest.raises(AdminAuthError, match="cannot read the token file"):
        authorization_header("token", f"file://{tmp_path / 'missing'}", None)
    with pytest.raises(AdminAuthError, match="userId:password"):
        authorization_header("basic", "no-colon", None)
    with pytest.raises(AdminAuthError, match="userId"):
        authorization_header("basic", '{"userId": "u"}', None)
    assert authorization_header("basic", "u:p", None) == "Basic dTpw"
