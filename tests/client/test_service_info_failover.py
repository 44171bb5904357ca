"""``AutoClusterFailover``: the failover rules (the C++ client's), and a client failing over
from a primary that stops answering to a secondary, and back when the primary returns.

The primary is reached through a real TCP proxy (``tests/tcp_proxy.py``): stopping the proxy
makes the primary refuse connections at once (no timeout to wait for), starting it again on the
same port makes it reachable.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client import AutoClusterFailover, Client, InitialPosition, ServiceInfo
from client.service_info.auto_failover import FailoverDecisions, tcp_reachable
from tests.client.sync.helpers import sockets_to
from tests.helpers import BrokerThread, broker_config, topic_stats, wait_until
from tests.tcp_proxy import TcpProxy

PRIMARY = ServiceInfo("pulsar://primary:6650")
FIRST = ServiceInfo("pulsar://first:6650")
SECOND = ServiceInfo("pulsar://second:6650")


class Network:
    """Which clusters answer probes, and which were probed (in order)."""

    def __init__(self, *up: ServiceInfo) -> None:
        self.up = set(up)
        self.probed: list[str] = []

    def reachable(self, info: ServiceInfo) -> bool:
        self.probed.append(info.service_url.split("//")[1].split(":")[0])
        return info in self.up


def decisions(failover_threshold: int = 1, switch_back_threshold: int = 1) -> FailoverDecisions:
    return FailoverDecisions(
        AutoClusterFailover(
            PRIMARY,
            [FIRST, SECOND],
            failover_threshold=failover_threshold,
            switch_back_threshold=switch_back_threshold,
        )
    )


def test_the_primary_is_left_after_threshold_failures_in_a_row() -> None:
    rules = decisions(failover_threshold=3)
    network = Network(FIRST, SECOND)
    assert rules.check(network.reachable) is None
    assert rules.check(network.reachable) is None
    network.up.add(PRIMARY)
    assert rules.check(network.reachable) is None  # a success resets the count
    network.up.discard(PRIMARY)
    assert [rules.check(network.reachable) for _ in range(3)] == [None, None, FIRST]
    assert rules.current is FIRST


def test_failover_takes_the_first_reachable_secondary_and_stays_when_none_is() -> None:
    rules = decisions()
    network = Network(SECOND)
    assert rules.check(network.reachable) is SECOND
    assert network.probed == ["primary", "first", "second"]
    rules = decisions()
    network = Network()
    assert rules.check(network.reachable) is None
    assert rules.current is PRIMARY


def test_switch_back_after_threshold_reachable_primaries_in_a_row() -> None:
    rules = decisions(switch_back_threshold=2)
    network = Network(FIRST)
    assert rules.check(network.reachable) is FIRST
    network.up.add(PRIMARY)
    assert rules.check(network.reachable) is None
    network.up.discard(PRIMARY)
    assert rules.check(network.reachable) is None  # an unreachable primary resets the count
    network.up.add(PRIMARY)
    assert [rules.check(network.reachable) for _ in range(2)] == [None, PRIMARY]
    assert rules.current is PRIMARY


def test_a_lost_secondary_goes_to_the_primary_at_once_else_to_another_secondary() -> None:
    rules = decisions(switch_back_threshold=5)
    network = Network(FIRST)
    assert rules.check(network.reachable) is FIRST
    network.up = {PRIMARY}  # FIRST is lost: the primary, without its switch-back count
    assert rules.check(network.reachable) is PRIMARY

    rules = decisions()
    network = Network(FIRST)
    assert rules.check(network.reachable) is FIRST
    network.up = {SECOND}
    network.probed.clear()
    assert rules.check(network.reachable) is SECOND
    assert network.probed == ["first", "primary", "second"]


def test_a_probe_is_a_tcp_connect_to_any_host_of_the_url() -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as listening,
        socket.create_server(("127.0.0.1", 0)) as closed,
    ):
        refused = f"127.0.0.1:{closed.getsockname()[1]}"
        closed.close()  # nothing listens there any more: connections are refused
        accepting = f"127.0.0.1:{listening.getsockname()[1]}"
        assert tcp_reachable(ServiceInfo(f"pulsar://{refused},{accepting}"), 5)
        assert not tcp_reachable(ServiceInfo(f"pulsar://{refused}"), 5)


# --- a client failing over between two real brokers ---------------------------------------


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerThread, ...]]:
    root: Path = tmp_path_factory.mktemp("failover")
    brokers = tuple(BrokerThread(broker_config(root / name)).start() for name in ("a", "b"))
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()


def stored(broker: BrokerThread, topic: str) -> int:
    stats: dict[str, Any] = topic_stats(broker.http, topic)
    return int(stats["msgInCounter"])


def backlog(broker: BrokerThread, topic: str) -> int:
    stats: dict[str, Any] = topic_stats(broker.http, topic)
    return int(stats["subscriptions"]["sub"]["msgBacklog"])


@pytest.mark.integration
def test_the_client_fails_over_when_the_primary_stops_and_returns_when_it_is_back(
    clusters: tuple[BrokerThread, BrokerThread],
) -> None:
    a, b = clusters
    topic = f"persistent://public/default/failover-{uuid.uuid4().hex[:10]}"
    proxy = TcpProxy(("127.0.0.1", a.port)).start()
    primary, secondary = ServiceInfo(proxy.url), ServiceInfo(b.url)
    failover = AutoClusterFailover(
        primary, [secondary], check_interval_ms=50, failover_threshold=2, switch_back_threshold=2
    )
    # A 30 s operation timeout: a lookup left retrying the stopped primary would outlast the
    # waits below, so the test shows that the switch moves lookups under way too.
    ours = Client(failover, operation_timeout_seconds=30)
    try:
        producer = ours.create_producer(topic, batching_enabled=False)
        consumer = ours.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
        producer.send(b"before")
        message = consumer.receive(10_000)
        assert message.data() == b"before"
        consumer.acknowledge(message)
        # Grouped acknowledgements leave within 100 ms; one still grouped when the client
        # switches clusters is dropped, and "before" would come again after the switch back.
        wait_until(lambda: backlog(a, topic) == 0, 10, lambda: "the ack did not reach A")

        proxy.stop()  # the primary refuses connections; the client's are cut
        wait_until(lambda: ours.get_service_info() is secondary, 10, lambda: "no failover to B")
        producer.send(b"during")
        message = consumer.receive(10_000)
        assert message.data() == b"during"
        consumer.acknowledge(message)
        assert stored(b, topic) == 1

        proxy = TcpProxy(("127.0.0.1", a.port), port=proxy.port).start()  # the primary is back
        wait_until(lambda: ours.get_service_info() is primary, 10, lambda: "no switch back")
        wait_until(lambda: sockets_to(b.port) == 0, 10, lambda: "B's connection stayed open")
        producer.send(b"after")
        message = consumer.receive(10_000)
        assert message.data() == b"after"
        consumer.acknowledge(message)
        assert stored(a, topic) == 2
        assert stored(b, topic) == 1
    finally:
        ours.close()
        proxy.stop()
