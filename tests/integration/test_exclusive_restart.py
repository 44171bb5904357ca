"""The PIP-68 topic epoch across broker restarts (SIGTERM and SIGKILL), with the official client.

The broker runs as a subprocess (``BrokerProcess``) and comes back on new ports, so each producer
reaches it through its own ``TcpProxy`` whose upstream is moved to the new port; a proxy can also
refuse connections to keep a producer away while another one takes the topic.

Promises checked:

* the epoch a producer was told is on disk before it was told, so it survives even SIGKILL right
  after the producer was created;
* after a restart the previous holder reclaims the topic with its epoch (X3 across a restart);
* once a newer producer took the topic, the previous holder's epoch is stale for good, across
  further restarts: its sends fail with ``ProducerFenced``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.helpers import BrokerProcess, access_stats, close_client
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]

EXCLUSIVE = pulsar.ProducerAccessMode.Exclusive
FENCING = pulsar.ProducerAccessMode.ExclusiveWithFencing


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        process.kill()


class Route:
    """One client behind its own proxy, which follows the broker to its new port."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.proxy = TcpProxy(("127.0.0.1", broker.port)).start()
        self.client = pulsar.Client(
            self.proxy.url,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )

    def follow(self) -> None:
        self.proxy.upstream = ("127.0.0.1", self.broker.port)

    def close(self) -> None:
        close_client(self.client)
        self.proxy.stop()


@pytest.fixture
def routes(broker: BrokerProcess) -> Iterator[list[Route]]:
    made: list[Route] = []
    try:
        yield made
    finally:
        for route in made:
            route.close()


def route(broker: BrokerProcess, made: list[Route]) -> Route:
    made.append(Route(broker))
    return made[-1]


def restart(broker: BrokerProcess, how: str, routes: list[Route]) -> None:
    if how == "sigkill":
        broker.kill()
    else:
        assert broker.terminate() == 0
    broker.restart()
    for r in routes:
        r.follow()


def read_all(broker: BrokerProcess, topic: str) -> list[bytes]:
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out: list[bytes] = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).data())
        return out
    finally:
        client.close()


def topic_name() -> str:
    return f"persistent://public/default/epoch-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_holder_reclaims_its_topic_after_a_restart(
    broker: BrokerProcess, routes: list[Route], how: str
) -> None:
    topic = topic_name()
    holder = route(broker, routes).client.create_producer(
        topic, producer_name="holder", access_mode=EXCLUSIVE
    )
    holder.send(b"before")
    restart(broker, how, routes)
    holder.send(b"after")  # reconnects with epoch 0 and keeps the topic
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "holder"
    assert stats["topicEpoch"] == 0
    assert stats["durableTopicEpoch"] == 0
    assert read_all(broker, topic) == [b"before", b"after"]


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_previous_holder_is_fenced_for_good_once_a_newer_one_took_the_topic(
    broker: BrokerProcess, routes: list[Route], how: str
) -> None:
    topic = topic_name()
    old_route, new_route = route(broker, routes), route(broker, routes)
    old = old_route.client.create_producer(topic, producer_name="old", access_mode=EXCLUSIVE)
    old.send(b"old")
    old_route.proxy.refuse(True)  # the old holder stays away while the broker is down
    restart(broker, how, routes)
    new = new_route.client.create_producer(topic, producer_name="new", access_mode=EXCLUSIVE)
    new.send(b"new-0")
    restart(broker, how, routes)
    old_route.proxy.refuse(False)
    with pytest.raises(pulsar.ProducerFenced):
        old.send(b"old-late")
    new.send(b"new-1")  # the newer holder reclaims with its epoch
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "new"
    assert stats["topicEpoch"] == 1
    assert stats["durableTopicEpoch"] == 1
    assert read_all(broker, topic) == [b"old", b"new-0", b"new-1"]


def test_epoch_told_to_a_producer_survives_sigkill_right_after(
    broker: BrokerProcess, routes: list[Route]
) -> None:
    topic = topic_name()
    producers = [
        route(broker, routes).client.create_producer(
            topic, producer_name=f"p{i}", access_mode=FENCING
        )
        for i in range(5)
    ]
    broker.kill()  # at once: the last producer has just been told epoch 4
    broker.restart()
    for r in routes:
        r.follow()
    assert access_stats(broker.http, topic)["topicEpoch"] == 4
    producers[-1].send(b"last")  # epoch 4 is the current one: reclaimed
    with pytest.raises(pulsar.ProducerFenced):
        producers[-2].send(b"previous")
    assert access_stats(broker.http, topic)["exclusiveHolder"] == "p4"
    assert read_all(broker, topic) == [b"last"]
