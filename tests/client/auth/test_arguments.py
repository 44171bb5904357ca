"""The authentication classes take the official arguments, in the official order, and refuse
bad ones with the official exception and message (compared call by call with ``pulsar``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

import client
from client import OperationNotSupported

NAMES = [
    "Authentication",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
]


def _parameters(cls: type) -> list[tuple[str, Any, Any]]:
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    ]


@pytest.mark.parametrize("name", NAMES)
def test_same_parameters_as_the_official_classes(name: str) -> None:
    ours, theirs = getattr(client, name), getattr(pulsar, name)
    assert _parameters(ours) == _parameters(theirs)
    assert issubclass(ours, client.Authentication)


# Each call is made on both modules: ``make(module)`` builds one authentication.
CALLS: dict[str, Callable[[Any], object]] = {
    "token int": lambda m: m.AuthenticationToken(3),
    "token None": lambda m: m.AuthenticationToken(None),
    "tls int certificate": lambda m: m.AuthenticationTLS(3, "key"),
    "tls int key": lambda m: m.AuthenticationTLS("cert", b"key"),
    "basic no arguments": lambda m: m.AuthenticationBasic(),
    "basic int username": lambda m: m.AuthenticationBasic(1, "x"),
    "basic no password": lambda m: m.AuthenticationBasic("u"),
    "basic int method": lambda m: m.AuthenticationBasic("u", "p", 3),
    "basic bytes params": lambda m: m.AuthenticationBasic(auth_params_string=b"{}"),
    "basic params without username": lambda m: m.AuthenticationBasic(
        auth_params_string='{"password": "p"}'
    ),
    "basic params without password": lambda m: m.AuthenticationBasic(
        auth_params_string='{"username": "u"}'
    ),
    "basic empty params": lambda m: m.AuthenticationBasic(auth_params_string=""),
    "basic bad JSON": lambda m: m.AuthenticationBasic(auth_params_string="{bad"),
    "basic params not an object": lambda m: m.AuthenticationBasic(auth_params_string="[1]"),
    "basic params override arguments": lambda m: m.AuthenticationBasic(
        1, 2, 3, auth_params_string='{"username": "u", "password": "p"}'
    ),
    "basic numbers in params": lambda m: m.AuthenticationBasic(
        auth_params_string='{"username": 1, "password": 2}'
    ),
    "oauth2 int": lambda m: m.AuthenticationOauth2(3),
    "oauth2 bad JSON (fails on connect)": lambda m: m.AuthenticationOauth2("{bad"),
    "oauth2 empty (fails on connect)": lambda m: m.AuthenticationOauth2(""),
    "oauth2 unknown endpoint method": lambda m: m.AuthenticationOauth2(
        '{"tokenEndpointAuthMethod": "private_key_jwt"}'
    ),
    "athenz int": lambda m: m.AuthenticationAthenz(3),
    "plugin int path": lambda m: m.Authentication(1, "params"),
    "plugin int params": lambda m: m.Authentication("lib.so", None),
}


def _outcome(call: Callable[[Any], object], module: Any) -> tuple[str, str]:
    try:
        call(module)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", ""


@pytest.mark.parametrize("case", list(CALLS))
def test_same_argument_errors_as_the_official_classes(case: str) -> None:
    ours, theirs = _outcome(CALLS[case], client), _outcome(CALLS[case], pulsar)
    if case in WORDED_BY_THE_PARSER:
        assert ours[0] == theirs[0]
    else:
        assert ours == theirs


#: The JSON parser's own words differ (boost's against Python's): only the type is compared.
WORDED_BY_THE_PARSER = {"basic bad JSON"}


def test_unsupported_methods_say_so_at_construction() -> None:
    # The official client builds these and fails later (no Athenz, no plugin library here).
    with pytest.raises(OperationNotSupported, match="Athenz"):
        client.AuthenticationAthenz('{"tenantDomain": "t", "tenantService": "s"}')
    with pytest.raises(OperationNotSupported, match="shared libraries"):
        client.Authentication("/usr/lib/libauth.so", "token:abc")
    with pytest.raises(OperationNotSupported, match="tls_client_auth"):
        client.AuthenticationOauth2('{"tokenEndpointAuthMethod": "tls_client_auth"}')


def test_basic_accepts_the_java_key_user_id() -> None:
    # The Java client's AuthenticationBasic names the user "userId"; the official Python one
    # only reads "username" (and refuses "userId"); we accept both.
    auth = client.AuthenticationBasic(auth_params_string='{"userId": "u", "password": "p"}')
    assert (auth.method_name, auth.auth_data()) == ("basic", b"u:p")
    with pytest.raises(RuntimeError, match="No username"):
        pulsar.AuthenticationBasic(auth_params_string='{"userId": "u", "password": "p"}')


def test_credentials_stay_out_of_repr() -> None:
    for auth in (
        client.AuthenticationBasic("user", "hunter2"),
        client.AuthenticationToken("secret-token"),
        client.AuthenticationOauth2('{"private_key": "data:application/json;base64,e30="}'),
    ):
        assert repr(auth) == f"{type(auth).__name__}()"
