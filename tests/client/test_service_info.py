"""``ServiceInfo``, ``ServiceInfoProvider``, ``AutoClusterFailover`` and
``Client.get_service_info()`` (pulsar 3.13's cluster failover): arguments checked as the official
package checks them, and a provider's life with the client (initial info, updates, close).

Only official names are imported from ``client``, as a user porting from ``pulsar`` would. The
switch itself (connections moving between two brokers) is ``test_service_info_switch.py``; the
failover prober is ``test_service_info_failover.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pulsar
import pulsar.asyncio
import pytest

import client
import client.asyncio
from client import (
    AuthenticationToken,
    AutoClusterFailover,
    Client,
    ServiceInfo,
    ServiceInfoProvider,
)
from tests.helpers import BrokerThread, wait_until

URL = "pulsar://127.0.0.1:6650"
UNREACHABLE = "pulsar://192.0.2.1:6650"  # TEST-NET-1: nothing answers there


class StaticProvider(ServiceInfoProvider):
    """A provider the test drives by hand: it keeps the client's callback."""

    def __init__(self, initial: Any) -> None:
        self.initial = initial
        self.callback: Callable[[Any], None] | None = None
        self.closed = False

    def initial_service_info(self) -> Any:
        return self.initial

    def initialize(self, on_service_info_update: Callable[[Any], None]) -> None:
        self.callback = on_service_info_update

    def close(self) -> None:
        self.closed = True


def _both(make: Callable[[ModuleType], object]) -> tuple[BaseException, BaseException]:
    """What ``make`` raises with the official module and with ours (both must raise)."""
    with pytest.raises(Exception) as theirs:
        make(pulsar)
    with pytest.raises(Exception) as ours:
        make(client)
    return theirs.value, ours.value


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.ServiceInfo(None),
        lambda m: m.ServiceInfo(URL, authentication="test"),
        lambda m: m.ServiceInfo(URL, tls_trust_certs_file_path=5),
        lambda m: m.ServiceInfo("no-scheme"),
        lambda m: m.ServiceInfo("pulsar://"),
    ],
)
def test_service_info_refuses_what_the_official_refuses(make: Callable[[ModuleType], Any]) -> None:
    theirs, ours = _both(make)
    assert isinstance(theirs, ValueError)
    assert isinstance(ours, ValueError)


@pytest.mark.parametrize(
    "arguments",
    [
        (URL,),
        ("pulsar://h1:6650,h2:6651/",),
        ("pulsar+ssl://broker:6651", None, "/etc/ca.pem"),
        ("http://broker:8080",),
        ("https://broker:8443",),
    ],
)
def test_service_info_reads_as_the_official(arguments: tuple[Any, ...]) -> None:
    theirs, ours = pulsar.ServiceInfo(*arguments), ServiceInfo(*arguments)
    assert ours.service_url == theirs.service_url
    assert ours.use_tls == theirs.use_tls
    assert ours.tls_trust_certs_file_path == theirs.tls_trust_certs_file_path
    assert repr(ours) == repr(theirs)


def test_service_info_keeps_its_authentication() -> None:
    token = AuthenticationToken("secret")
    assert ServiceInfo(URL, token).authentication is token
    assert ServiceInfo(URL).authentication is None


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.AutoClusterFailover("test", [m.ServiceInfo(UNREACHABLE)]),
        lambda m: m.AutoClusterFailover(m.ServiceInfo(URL), "test"),
        lambda m: m.AutoClusterFailover(m.ServiceInfo(URL), []),
        lambda m: m.AutoClusterFailover(m.ServiceInfo(URL), ["test"]),
        lambda m: m.AutoClusterFailover(m.ServiceInfo(URL), [m.ServiceInfo(URL), None]),
        lambda m: m.AutoClusterFailover(
            m.ServiceInfo(URL), [m.ServiceInfo(UNREACHABLE)], check_interval_ms=0
        ),
        lambda m: m.AutoClusterFailover(
            m.ServiceInfo(URL), [m.ServiceInfo(UNREACHABLE)], failover_threshold=0
        ),
        lambda m: m.AutoClusterFailover(
            m.ServiceInfo(URL), [m.ServiceInfo(UNREACHABLE)], switch_back_threshold=-1
        ),
        lambda m: m.AutoClusterFailover(
            m.ServiceInfo(URL), [m.ServiceInfo(UNREACHABLE)], check_interval_ms="100"
        ),
    ],
)
def test_auto_cluster_failover_refuses_what_the_official_refuses(
    make: Callable[[ModuleType], Any],
) -> None:
    theirs, ours = _both(make)
    assert isinstance(theirs, ValueError)
    assert isinstance(ours, ValueError)


def test_auto_cluster_failover_keeps_its_settings_as_the_official() -> None:
    def make(m: ModuleType) -> Any:
        return m.AutoClusterFailover(
            m.ServiceInfo(URL),
            [m.ServiceInfo(UNREACHABLE), m.ServiceInfo("pulsar://127.0.0.1:1")],
            check_interval_ms=250,
            failover_threshold=3,
            switch_back_threshold=4,
        )

    theirs, ours = make(pulsar), make(client)
    assert repr(ours) == repr(theirs)
    assert (ours.check_interval_ms, ours.failover_threshold, ours.switch_back_threshold) == (
        250,
        3,
        4,
    )
    defaults = AutoClusterFailover(ServiceInfo(URL), [ServiceInfo(UNREACHABLE)])
    official = pulsar.AutoClusterFailover(
        pulsar.ServiceInfo(URL), [pulsar.ServiceInfo(UNREACHABLE)]
    )
    assert repr(defaults) == repr(official)


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.Client(None),
        lambda m: m.Client(3),
        lambda m: m.Client(
            m.AutoClusterFailover(m.ServiceInfo(URL), [m.ServiceInfo(UNREACHABLE)]),
            authentication=m.AuthenticationToken("token"),
        ),
        lambda m: m.Client(
            m.AutoClusterFailover(m.ServiceInfo(URL), [m.ServiceInfo(UNREACHABLE)]),
            tls_trust_certs_file_path="/etc/ca.pem",
        ),
        lambda m: m.Client(
            _provider_of(m)(m.ServiceInfo(URL)), authentication=m.AuthenticationToken("token")
        ),
        lambda m: m.Client(
            _provider_of(m)(m.ServiceInfo(URL)), tls_trust_certs_file_path="/etc/ca.pem"
        ),
        lambda m: m.Client(_provider_of(m)("not a ServiceInfo")),
    ],
)
def test_the_client_refuses_what_the_official_refuses(make: Callable[[ModuleType], Any]) -> None:
    theirs, ours = _both(make)
    assert isinstance(theirs, ValueError)
    assert isinstance(ours, ValueError)


def _provider_of(module: ModuleType) -> type:
    """``StaticProvider`` made of ``module``'s ``ServiceInfoProvider``."""
    members = {
        k: v for k, v in vars(StaticProvider).items() if k not in ("__dict__", "__weakref__")
    }
    return type("Provider", (module.ServiceInfoProvider,), members)


def test_the_asyncio_client_refuses_a_provider_with_credentials() -> None:
    provider = StaticProvider(ServiceInfo(URL))
    with pytest.raises(ValueError):
        client.asyncio.Client(provider, authentication=AuthenticationToken("token"))
    with pytest.raises(ValueError):
        client.asyncio.Client(StaticProvider("not a ServiceInfo"))


def test_a_plain_client_reports_its_url_authentication_and_trust_store() -> None:
    token = AuthenticationToken("secret")
    ours = Client(URL, token, tls_trust_certs_file_path="/etc/ca.pem")
    try:
        info = ours.get_service_info()
        assert isinstance(info, ServiceInfo)
        assert (info.service_url, info.use_tls, info.tls_trust_certs_file_path) == (
            URL,
            False,
            "/etc/ca.pem",
        )
        assert info.authentication is token
    finally:
        ours.close()


def test_a_provider_is_initialized_followed_and_closed_with_the_client() -> None:
    primary, secondary = ServiceInfo(URL), ServiceInfo(UNREACHABLE)
    provider = StaticProvider(primary)
    ours = Client(provider)
    assert provider.callback is not None  # initialize() was called
    assert ours.get_service_info() is primary
    provider.callback(secondary)  # from this thread, as the official test does
    assert ours.get_service_info() is secondary
    with pytest.raises(RuntimeError):
        provider.callback("pulsar://127.0.0.1:6650")  # not a ServiceInfo: refused, as the official
    assert ours.get_service_info() is secondary
    assert not provider.closed
    ours.close()
    assert provider.closed
    provider.callback(primary)  # after close: ignored (the official logs an error)
    assert ours.get_service_info() is secondary


def test_shutdown_closes_the_provider_too() -> None:
    provider = StaticProvider(ServiceInfo(URL))
    ours = Client(provider)
    ours.shutdown()
    assert provider.closed


async def test_the_asyncio_client_takes_a_provider_as_the_official() -> None:
    provider = StaticProvider(ServiceInfo(URL))
    ours = client.asyncio.Client(provider, operation_timeout_seconds=5)
    assert provider.callback is not None
    provider.callback(ServiceInfo(UNREACHABLE))  # on the loop's thread: switched at once
    await ours.close()
    assert provider.closed
    # pulsar.asyncio has no failover names of its own and no get_service_info: nor has ours.
    for name in ("ServiceInfo", "ServiceInfoProvider", "AutoClusterFailover"):
        assert hasattr(pulsar.asyncio, name) == hasattr(client.asyncio, name)
    assert hasattr(pulsar.asyncio.Client, "get_service_info") == hasattr(
        client.asyncio.Client, "get_service_info"
    )


def test_an_auto_cluster_failover_client_starts_on_the_primary(running: BrokerThread) -> None:
    primary = ServiceInfo(running.url)
    failover = AutoClusterFailover(primary, [ServiceInfo(UNREACHABLE)], check_interval_ms=50)
    before = set(threading.enumerate())
    ours = Client(failover)
    probes = [t for t in threading.enumerate() if t not in before and "failover" in t.name]
    assert len(probes) == 1
    assert probes[0].is_alive()
    assert ours.get_service_info().service_url == running.url
    producer = ours.create_producer("failover-starts-on-primary")
    producer.send(b"x")
    assert ours.get_service_info().service_url == running.url  # the primary answers probes
    ours.close()
    wait_until(lambda: not probes[0].is_alive(), 5, lambda: "the prober outlived the client")


def test_shutting_down_an_unused_asyncio_client_closes_its_provider() -> None:
    provider = StaticProvider(ServiceInfo(URL))
    ours = client.asyncio.Client(provider)
    ours.shutdown()
    assert provider.closed
