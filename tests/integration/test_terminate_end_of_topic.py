"""Topic terminate with both clients: producers are refused, consumers read to the last message;
ours then gets REACHED_END_OF_TOPIC, the official one (C++-based, which has no handler for it) is
not sent it and so keeps its connection (no reconnect loop)."""

from __future__ import annotations

import json
import urllib.request

import pulsar
import pytest

from client.sync import Client
from protocol.enums import InitialPosition
from tests.helpers import BrokerThread, close_client, new_client, topic_stats, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def terminate(broker: BrokerThread, topic: str) -> dict[str, int]:
    url = f"{broker.http}/admin/v2/persistent/{topic.removeprefix('persistent://')}/terminate"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as reply:
        last: dict[str, int] = json.loads(reply.read())
    return last


def test_our_client_gets_reached_end_of_topic_after_the_last_message(broker: BrokerThread) -> None:
    topic = "persistent://public/default/terminate-ours"
    client = Client(broker.url)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"m{i}".encode())
        terminate(broker, topic)
        received = [consumer.receive(5000).data() for _ in range(3)]
        assert received == [b"m0", b"m1", b"m2"]
        wait_until(consumer.has_reached_end_of_topic)
    finally:
        client.close()


def test_not_before_the_last_message_is_delivered(broker: BrokerThread) -> None:
    topic = "persistent://public/default/terminate-late"
    client = Client(broker.url)
    try:
        producer = client.create_producer(topic)
        producer.send(b"only")
        terminate(broker, topic)
        consumer = client.subscribe(
            topic, "late", initial_position=InitialPosition.Earliest, receiver_queue_size=1
        )
        assert consumer.receive(5000).data() == b"only"
        wait_until(consumer.has_reached_end_of_topic)
    finally:
        client.close()


def test_official_client_reads_to_the_end_without_reconnecting(broker: BrokerThread) -> None:
    topic = "persistent://public/default/terminate-official"
    client = new_client(broker.url, operation_timeout=5)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"m{i}".encode())
        terminate(broker, topic)
        assert [consumer.receive(5000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        # Still the first connection: the broker sent it nothing it would take as invalid.
        consumers = topic_stats(broker.http, topic)["subscriptions"]["sub"]["consumers"]
        assert len(consumers) == 1
    finally:
        close_client(client)
