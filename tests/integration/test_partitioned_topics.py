"""Partitioned topics with the official client: created through the admin API, routed by the
client across ``-partition-N`` (PARTITIONED_METADATA), consumed back whole; PIP-6 dedup per
partition; and a client whose service URL is ``http://`` (lookup and partition count over HTTP).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections import defaultdict
from typing import Any

import pulsar
import pytest

from tests.helpers import BrokerThread, close_client, new_client

pytestmark = [pytest.mark.integration, pytest.mark.compat]

PARTITIONS = 4


def admin(http: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        http + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        text = reply.read()
        return json.loads(text) if text else None


def create_partitioned(http: str, local_name: str, partitions: int = PARTITIONS) -> str:
    admin(http, "PUT", f"/admin/v2/persistent/public/default/{local_name}/partitions", partitions)
    return f"persistent://public/default/{local_name}"


def produce_and_consume_keyed(client: pulsar.Client, topic: str, count: int) -> None:
    """Send ``count`` keyed messages, receive them all; each key stays on one partition, in
    order, and the keys spread over more than one partition."""
    consumer = client.subscribe(
        topic, "sub", initial_position=pulsar.InitialPosition.Earliest, consumer_name="c"
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    keys = [f"key-{index % 13}" for index in range(count)]
    for index, key in enumerate(keys):
        producer.send_async(f"{key}/{index}".encode(), None, partition_key=key)
    producer.flush()

    partitions_of_key: dict[str, set[str]] = defaultdict(set)
    order_of_key: dict[str, list[int]] = defaultdict(list)
    for _ in range(count):
        message = consumer.receive(10_000)
        key, index = message.data().decode().split("/")
        assert message.partition_key() == key
        partitions_of_key[key].add(message.topic_name())
        order_of_key[key].append(int(index))
        consumer.acknowledge(message)
    assert sum(len(indexes) for indexes in order_of_key.values()) == count
    assert all(len(topics) == 1 for topics in partitions_of_key.values())  # Murmur3 routing
    assert all(indexes == sorted(indexes) for indexes in order_of_key.values())
    used = set().union(*partitions_of_key.values())
    assert len(used) > 1
    assert used <= {f"{topic}-partition-{i}" for i in range(PARTITIONS)}
    producer.close()
    consumer.close()


def test_official_client_routes_keys_across_partitions(broker: BrokerThread) -> None:
    topic = create_partitioned(broker.http, "orders")
    client = new_client(broker.url)
    try:
        produce_and_consume_keyed(client, topic, 400)
    finally:
        close_client(client)
    stats = admin(
        broker.http, "GET", "/admin/v2/persistent/public/default/orders/partitioned-stats"
    )
    assert stats["msgInCounter"] == 400
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 400
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 0


def test_http_service_url_produces_and_consumes(broker: BrokerThread) -> None:
    """The client looks topics up over HTTP (``/lookup/v2``, ``.../partitions``), then speaks the
    binary protocol to the broker URL the lookup answered."""
    topic = create_partitioned(broker.http, "over-http")
    client = new_client(broker.http)
    try:
        produce_and_consume_keyed(client, topic, 100)
        plain = "persistent://public/default/plain-over-http"
        consumer = client.subscribe(plain, "sub")
        producer = client.create_producer(plain)
        producer.send(b"hello")
        assert consumer.receive(10_000).data() == b"hello"
    finally:
        close_client(client)


def test_dedup_is_per_partition(broker: BrokerThread) -> None:
    """One producer name, the same sequence ids on two partitions: both stored (each partition
    keeps its own PIP-6 state); a resend to the same partition is dropped."""
    topic = create_partitioned(broker.http, "dedup")
    admin(broker.http, "POST", "/admin/v2/namespaces/public/default/deduplication", True)
    client = new_client(broker.url)
    try:
        producer = client.create_producer(
            topic,
            producer_name="writer",
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.CustomPartition,
            message_router=lambda message, partitions: int(message.partition_key()),
        )
        for partition in (0, 1):
            for seq in (1, 2, 3):
                producer.send(
                    b"p%d-s%d" % (partition, seq), partition_key=str(partition), sequence_id=seq
                )
        duplicate = producer.send(b"p0-s2-again", partition_key="0", sequence_id=2)
        assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)  # dropped as a duplicate
        producer.close()

        def stored(partition: int) -> list[bytes]:
            reader = client.create_reader(
                f"{topic}-partition-{partition}", pulsar.MessageId.earliest
            )
            out = []
            while reader.has_message_available():
                out.append(reader.read_next(5000).data())
            reader.close()
            return out

        assert stored(0) == [b"p0-s1", b"p0-s2", b"p0-s3"]
        assert stored(1) == [b"p1-s1", b"p1-s2", b"p1-s3"]
        assert stored(2) == stored(3) == []
    finally:
        close_client(client)
    for partition in (0, 1):
        path = f"/admin/v2/persistent/public/default/dedup-partition-{partition}/stats"
        stats = admin(broker.http, "GET", path)
        assert stats["deduplicationStatus"] == "Enabled"
        assert stats["deduplication"]["accepted"] == 3
    duplicates = admin(
        broker.http, "GET", "/admin/v2/persistent/public/default/dedup-partition-0/stats"
    )
    assert duplicates["deduplication"]["duplicatesDropped"] == 1


def test_exclusive_producer_is_per_partition(broker: BrokerThread) -> None:
    topic = create_partitioned(broker.http, "exclusive", partitions=2)
    client = new_client(broker.url)
    try:
        first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        # As on a non-partitioned topic (test_exclusive_producer X1): a second Exclusive
        # producer is fenced, a Shared one is busy; here on every partition.
        with pytest.raises(pulsar.ProducerFenced):
            client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Shared)
        first.send(b"x", partition_key="a")
        for partition in (0, 1):
            path = f"/admin/v2/persistent/public/default/exclusive-partition-{partition}/stats"
            [publisher] = admin(broker.http, "GET", path)["publishers"]
            assert publisher["accessMode"] == "Exclusive"
        first.close()
    finally:
        close_client(client)


def test_producer_to_a_missing_partition_is_refused(broker: BrokerThread) -> None:
    topic = create_partitioned(broker.http, "bounded", partitions=2)
    client = new_client(broker.url)
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(f"{topic}-partition-2")
    finally:
        close_client(client)


def test_http_service_url_regex_subscription_finds_partitioned_topics(broker: BrokerThread) -> None:
    """Over HTTP the client lists the namespace (``.../namespaces/{tenant}/{ns}/topics``),
    which names each partition, and subscribes to what matches."""
    create_partitioned(broker.http, "rx-parted", partitions=2)
    client = new_client(broker.http)
    try:
        client.create_producer("rx-plain").close()
        consumer = client.subscribe(
            re.compile("persistent://public/default/rx-.*"),
            "sub",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        plain = client.create_producer("rx-plain")
        parted = client.create_producer("rx-parted")
        plain.send(b"plain")
        for key in ("a", "b", "c", "d"):
            parted.send(key.encode(), partition_key=key)
        received = sorted(consumer.receive(10_000).data() for _ in range(5))
        assert received == [b"a", b"b", b"c", b"d", b"plain"]
    finally:
        close_client(client)
