"""Load balancing (docs/CLUSTER.md §11): placement by reported load, hot bundle split and shed
to another broker with clients (official and ours) producing and consuming throughout, and a
cluster without split metadata keeping its ranges and owners."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.cluster.bundles import FULL_UPPER_BOUND, bundle_of, topic_hash
from client.sync import Client as OurClient
from protocol.topic_name import TopicName
from tests.cluster.conftest import Cluster, Etcd, http_lookup_owner
from tests.helpers import BrokerProcess, close_client, new_client, wait_until

#: Reports and rounds within a fraction of a second, so that the tests take seconds.
FAST = (
    "loadBalancerReportUpdateMinIntervalMillis=200",
    "loadBalancerSheddingIntervalMinutes=0.01",
)
NO_MOVES = ("loadBalancerAutoBundleSplitEnabled=false", "loadBalancerSheddingEnabled=false")


@pytest.fixture
def pair(etcd: Etcd, tmp_path: Path) -> Iterator[Cluster]:
    """An empty cluster; each test adds its two brokers with its settings."""
    running = Cluster(etcd, tmp_path / "data", f"lb-{uuid.uuid4().hex[:8]}")
    try:
        yield running
    finally:
        running.stop()


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


def load_report(broker: BrokerProcess) -> dict[str, object]:
    """The broker's last published load report; {} before its first."""
    try:
        report = get_json(f"{broker.http}/admin/v2/broker-stats/load-report")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise
    assert isinstance(report, dict)
    return report


def boundaries(web_port: int) -> list[str]:
    url = f"http://127.0.0.1:{web_port}/admin/v2/namespaces/public/default/bundles"
    found = get_json(url)
    assert isinstance(found, dict)
    return list(found["boundaries"])


def topic_in_each_bundle(prefix: str, count: int) -> list[str]:
    """One topic name per bundle of ``public/default`` cut in ``count`` equal ranges."""
    found: dict[int, str] = {}
    index = 0
    while len(found) < count:
        name = f"persistent://public/default/{prefix}-{index}"
        found.setdefault(bundle_of(TopicName.parse(name), count).lower, name)
        index += 1
    return [found[lower] for lower in sorted(found)]


def http_lookup(web_port: int, topic: str, *, authoritative: bool) -> str:
    path = topic.removeprefix("persistent://")
    flag = "?authoritative=true" if authoritative else ""
    found = get_json(f"http://127.0.0.1:{web_port}/lookup/v2/topic/persistent/{path}{flag}")
    assert isinstance(found, dict)
    return str(found["brokerUrl"])


def test_an_unowned_bundle_goes_to_the_least_loaded_broker_not_the_one_with_fewest(
    pair: Cluster,
) -> None:
    busy = pair.add_broker(*FAST, *NO_MOVES)
    idle = pair.add_broker(*FAST, *NO_MOVES)
    loaded, second, third, fourth = topic_in_each_bundle("placed", 4)
    # The busy broker owns one bundle, the idle one two: by bundle counts, the fourth bundle
    # would go to the busy broker.
    assert http_lookup(busy.web_port, loaded, authoritative=True) == busy.url
    assert http_lookup(idle.web_port, second, authoritative=True) == idle.url
    assert http_lookup(idle.web_port, third, authoritative=True) == idle.url
    client = new_client(busy.url)
    try:
        producer = client.create_producer(loaded, batching_enabled=False)
        for index in range(300):
            producer.send(f"{index}".encode())

        def reported_busy() -> bool:
            return float(str(load_report(busy).get("msgRateIn", 0))) > 1.0

        wait_until(reported_busy, 10)
        assert http_lookup_owner(busy.web_port, fourth) == idle.url
        assert http_lookup_owner(idle.web_port, fourth) == idle.url
    finally:
        close_client(client)


class Stream:
    """A producer sending numbered messages while a consumer of the same topic receives."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.received: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()


def official_stream(url: str, topic: str, stream: Stream) -> threading.Thread:
    def run() -> None:
        client = new_client(url, operation_timeout=60, io_threads=1)
        try:
            consumer = client.subscribe(topic, "lb", consumer_name="official")
            producer = client.create_producer(
                topic, producer_name="official", send_timeout_millis=0, batching_enabled=False
            )
            seq = 0
            while not stream.stop.is_set():
                seq += 1
                producer.send(f"{seq}".encode())
                stream.acked.append(seq)
                while True:  # drain what arrived, barely waiting
                    try:
                        message = consumer.receive(1)
                    except pulsar.Timeout:
                        break
                    stream.received.append(int(message.data()))
                    consumer.acknowledge(message)
            while len(stream.received) < len(stream.acked):
                message = consumer.receive(30_000)
                stream.received.append(int(message.data()))
                consumer.acknowledge(message)
        except Exception as exc:  # reported by the test
            stream.errors.append(repr(exc))
        finally:
            close_client(client)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def our_stream(url: str, topic: str, stream: Stream) -> threading.Thread:
    def run() -> None:
        try:
            with OurClient(url) as client:
                consumer = client.subscribe(topic, "lb", consumer_name="ours")
                producer = client.create_producer(topic, producer_name="ours")
                seq = 0
                while not stream.stop.is_set():
                    seq += 1
                    producer.send(f"{seq}".encode())
                    stream.acked.append(seq)
                while len(stream.received) < len(stream.acked):
                    message = consumer.receive(30_000)
                    stream.received.append(int(message.data()))
                    consumer.acknowledge(message)
        except Exception as exc:  # reported by the test
            stream.errors.append(repr(exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def topics_on_both_halves() -> tuple[str, str]:
    """Two topics of one bundle (the namespace has one) on either side of its middle."""
    middle = FULL_UPPER_BOUND // 2
    low = high = ""
    index = 0
    while not (low and high):
        name = f"persistent://public/default/hot-{index}"
        if topic_hash(TopicName.parse(name)) < middle:
            low = low or name
        else:
            high = high or name
        index += 1
    return low, high


def test_a_hot_bundle_is_split_and_its_halves_served_by_both_brokers(pair: Cluster) -> None:
    # One bundle for the namespace, and a split threshold of 200 msg/s (Pulsar's 30 000 would
    # need more traffic than a test should make); the algorithm is Pulsar's default.
    settings = (
        *FAST,
        "defaultNumberOfNamespaceBundles=1",
        "loadBalancerNamespaceBundleMaxMsgRate=200",
    )
    first = pair.add_broker(*settings)
    pair.add_broker(*settings)
    official_topic, our_topic = topics_on_both_halves()
    # Both topics start on one broker: the only bundle.
    assert http_lookup_owner(first.web_port, official_topic) == http_lookup_owner(
        first.web_port, our_topic
    )
    official, ours = Stream(), Stream()
    threads = [
        official_stream(pair.service_url, official_topic, official),
        our_stream(pair.service_url, our_topic, ours),
    ]
    try:

        def spread() -> bool:
            assert official.errors == []
            assert ours.errors == []
            owners = {http_lookup_owner(first.web_port, t) for t in (official_topic, our_topic)}
            return len(boundaries(first.web_port)) >= 3 and len(owners) == 2

        wait_until(spread, 60)
        # Both keep going on their new owners.
        for stream in (official, ours):
            sent = len(stream.acked)
            wait_until(lambda: len(stream.acked) > sent + 50, 30)  # noqa: B023 - used at once
    finally:
        official.stop.set()
        ours.stop.set()
        for thread in threads:
            thread.join(90)
    for stream in (official, ours):
        assert stream.errors == []
        assert stream.acked, "nothing was sent"
        # Every acknowledged message arrives (a message unacknowledged when its topic moved
        # is delivered again, as Pulsar redelivers it).
        assert sorted(set(stream.received)) == stream.acked


def test_an_overloaded_broker_hands_a_bundle_to_an_idle_one(pair: Cluster) -> None:
    settings = (*FAST, "loadBalancerAutoBundleSplitEnabled=false")
    busy = pair.add_broker(*settings)
    idle = pair.add_broker(*settings)
    first, second, *_ = topic_in_each_bundle("shed", 4)
    for topic in (first, second):
        assert http_lookup(busy.web_port, topic, authoritative=True) == busy.url
    streams = [Stream(), Stream()]
    threads = [
        official_stream(pair.service_url, topic, stream)
        for topic, stream in zip((first, second), streams, strict=True)
    ]
    try:

        def moved() -> bool:
            owners = {http_lookup_owner(idle.web_port, t) for t in (first, second)}
            return owners == {busy.url, idle.url}

        wait_until(moved, 60)
    finally:
        for stream in streams:
            stream.stop.set()
        for thread in threads:
            thread.join(90)
    for stream in streams:
        assert stream.errors == []
        assert sorted(set(stream.received)) == stream.acked


def test_a_cluster_without_split_metadata_keeps_its_ranges_and_owners(pair: Cluster) -> None:
    """What a previous build leaves in etcd: owners of the default ranges, no ``bundles/``
    key. A new broker joining reads the same ranges and the same owners, and an idle cluster
    writes no split metadata."""
    old = pair.add_broker(*FAST)
    topics = topic_in_each_bundle("kept", 4)
    owners = {t: http_lookup(old.web_port, t, authoritative=True) for t in topics}
    assert set(owners.values()) == {old.url}
    new = pair.add_broker(*FAST)
    expected = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
    for broker in (old, new):
        assert boundaries(broker.web_port) == expected
        for topic, owner in owners.items():
            assert http_lookup_owner(broker.web_port, topic) == owner
    # Balancing rounds (every 0.6 s) later, nothing has moved (no load: nothing to shed or
    # split): wait for reports 2 s younger than the first.
    wait_until(lambda: bool(load_report(old)) and bool(load_report(new)), 10)
    start = max(int(str(load_report(b)["lastUpdate"])) for b in (old, new))
    wait_until(
        lambda: min(int(str(load_report(b)["lastUpdate"])) for b in (old, new)) > start + 2000,
        15,
    )
    for topic, owner in owners.items():
        assert http_lookup_owner(new.web_port, topic) == owner
    assert boundaries(new.web_port) == expected
