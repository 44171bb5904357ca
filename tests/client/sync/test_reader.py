"""The blocking ``Reader`` (and ``Consumer.get_last_message_id``): readers read through the
consumer facade's fast path."""

from __future__ import annotations

import pytest

from client import Client, MessageId
from tests.client.sync.helpers import new_topic
from tests.helpers import BrokerThread, topic_stats

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_last_message_id_proves_acks_arrived_and_readers_read_through_the_fast_path(
    running: BrokerThread,
) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub", receiver_queue_size=4)
        reader = client.create_reader(topic, MessageId.earliest, receiver_queue_size=4)
        assert consumer.get_last_message_id().entry_id() == -1  # empty topic
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [producer.send(str(i).encode()) for i in range(12)]
        assert consumer.get_last_message_id() == sent[-1]
        assert reader.get_last_message_id() == sent[-1]
        # A reader reads through the consumer facade's fast path: a 4-message queue, 12
        # messages, in order (a permit not returned would stall it at the 5th).
        assert [reader.read_next(5_000).message_id() for _ in range(12)] == sent
        assert not reader.has_message_available()
        for _ in range(12):
            consumer.acknowledge(consumer.receive(5_000))
        # The acknowledgements are fire-and-forget; the answer comes after them.
        consumer.get_last_message_id()
        stats = topic_stats(running.http, topic)
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 0
