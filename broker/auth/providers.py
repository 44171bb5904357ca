"""``authenticationProviders``: which providers run, under their method names or Pulsar's
class names, and how a method name or an HTTP request finds its provider.

As Pulsar's ``ServerCnx.handleConnect``: CONNECT names a method (``auth_method_name``); a
method no provider serves (``none`` included) gets ``anonymousUserRole`` when it is set and is
refused otherwise. Over HTTP, ``Authorization: Bearer`` goes to the token provider,
``Authorization: Basic`` to the basic provider, and a request with neither to the TLS provider
when the client presented a verified certificate; then the anonymous role, else 401.

A provider whose check costs CPU (``blocking``: the basic provider's bcrypt) is run on the
bounded check pool (``broker/auth/check_pool.py``) by ``authenticate_async`` and
``authenticate_http``, never on the event loop; the others answer inline.

Every outcome is counted (``pulsar_authentication_success_total`` /
``pulsar_authentication_failures_total`` by method, as Pulsar's metrics name them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from broker.auth.check_pool import CheckQueue
from broker.auth.identity import AuthenticationFailure, Identity
from broker.config import BrokerConfig, ConfigError

__all__ = ["PROVIDER_ALIASES", "AuthenticationService", "Provider"]


class Provider(Protocol):
    method: str
    #: True when a check costs CPU (bcrypt): it must run on the check pool, off the loop.
    blocking: bool

    def authenticate(self, data: bytes, peer_cert: dict[str, Any] | None = None) -> Identity: ...


# The providers' modules are imported when configured: their libraries (PyJWT and
# cryptography, passlib) cost a broker without authentication ~20 MiB of RSS and 0.2 s of start.
def _token(config: BrokerConfig) -> Provider:
    from broker.auth.token import TokenProvider

    return TokenProvider(config)


def _basic(config: BrokerConfig) -> Provider:
    from broker.auth.basic import BasicProvider

    return BasicProvider(config)


def _tls(config: BrokerConfig) -> Provider:
    from broker.auth.tls import TlsProvider

    return TlsProvider(config)


_PULSAR = "org.apache.pulsar.broker.authentication."
#: Accepted ``authenticationProviders`` entries -> provider factory.
PROVIDER_ALIASES: dict[str, Callable[[BrokerConfig], Provider]] = {
    "token": _token,
    _PULSAR + "AuthenticationProviderToken": _token,
    "basic": _basic,
    _PULSAR + "AuthenticationProviderBasic": _basic,
    "tls": _tls,
    _PULSAR + "AuthenticationProviderTls": _tls,
}


def _providers_from(config: BrokerConfig) -> dict[str, Provider]:
    providers: dict[str, Provider] = {}
    for entry in (part.strip() for part in config.authentication_providers.split(",")):
        if not entry:
            continue
        factory = PROVIDER_ALIASES.get(entry)
        if factory is None:
            known = ", ".join(sorted(k for k in PROVIDER_ALIASES if "." not in k))
            raise ConfigError(
                f"authenticationProviders: unknown provider {entry!r} (known: {known} and "
                "Pulsar's AuthenticationProvider{Token,Basic,Tls} class names)",
                key="authenticationProviders",
            )
        provider = factory(config)
        providers[provider.method] = provider
    return providers


class AuthenticationService:
    """The configured providers; ``enabled`` is ``authenticationEnabled``."""

    def __init__(self, config: BrokerConfig) -> None:
        self.enabled = config.authentication_enabled
        self.providers = _providers_from(config) if self.enabled else {}
        self.anonymous_role = config.anonymous_user_role or None
        self.failure_delay = config.authentication_failure_delay_ms / 1000
        self.refresh_check_seconds = float(config.authentication_refresh_check_seconds)
        self.successes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.checks = CheckQueue()  # this broker's share of the password-check pool

    def provider_for(self, method: str) -> Provider | None:
        return self.providers.get(method)

    def is_blocking(self, method: str) -> bool:
        """Whether checking credentials of ``method`` must go to the check pool."""
        provider = self.providers.get(method)
        return provider is not None and provider.blocking

    def authenticate(
        self, method: str, data: bytes, peer_cert: dict[str, Any] | None = None
    ) -> Identity | None:
        """The identity for CONNECT/AUTH_RESPONSE data; None: anonymous without a role. Inline:
        for a ``blocking`` method, call ``authenticate_async`` instead.

        Raises:
            AuthenticationFailure: the provider refused, or no provider and no anonymous role.
        """
        provider = self.providers.get(method)
        if provider is None:
            return self._anonymous(method)
        return self._count(provider, data, peer_cert)

    async def authenticate_async(
        self, method: str, data: bytes, peer_cert: dict[str, Any] | None = None
    ) -> Identity | None:
        """As ``authenticate``, with a ``blocking`` provider's check on the check pool.

        Raises:
            AuthenticationFailure: as ``authenticate``; ``CheckQueueFull`` when the pool's
                queue is full.
        """
        provider = self.providers.get(method)
        if provider is None:
            return self._anonymous(method)
        if not provider.blocking:
            return self._count(provider, data, peer_cert)
        try:
            identity = await self.checks.run(provider.authenticate, data, peer_cert)
        except AuthenticationFailure:
            self.failures[provider.method] += 1
            raise
        self.successes[provider.method] += 1
        return identity

    def _anonymous(self, method: str) -> Identity:
        if self.anonymous_role is not None:
            return Identity(self.anonymous_role, "none")
        self.failures["none"] += 1
        raise AuthenticationFailure(
            f"No anonymous role, and no authentication provider for method {method!r}"
        )

    async def authenticate_http(
        self, authorization: str | None, peer_cert: dict[str, Any] | None
    ) -> Identity:
        """The identity of an HTTP request (see the module docstring)."""
        scheme, _, value = (authorization or "").partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and "token" in self.providers:
            return self._count(self.providers["token"], value.encode())
        if scheme == "basic" and "basic" in self.providers:
            from broker.auth.basic import BasicProvider  # configured, hence imported already

            try:
                credentials = BasicProvider.from_http_header(value)
            except AuthenticationFailure:
                self.failures["basic"] += 1
                raise
            identity = await self.authenticate_async("basic", credentials)
            assert identity is not None  # the basic provider always names a role
            return identity
        if authorization:
            self.failures["none"] += 1
            raise AuthenticationFailure(f"unsupported Authorization scheme {scheme!r}")
        if peer_cert and "tls" in self.providers:
            return self._count(self.providers["tls"], b"", peer_cert)
        if self.anonymous_role is not None:
            return Identity(self.anonymous_role, "none")
        self.failures["none"] += 1
        raise AuthenticationFailure("no credentials")

    def _count(
        self, provider: Provider, data: bytes, peer_cert: dict[str, Any] | None = None
    ) -> Identity:
        try:
            identity = provider.authenticate(data, peer_cert)
        except AuthenticationFailure:
            self.failures[provider.method] += 1
            raise
        self.successes[provider.method] += 1
        return identity
