"""A bundle moving to another broker takes the topic's whole state along: a subscription's
position with its PIP-54 batch-index acknowledgements, and the idempotency-key window."""

from __future__ import annotations

import pulsar

from tests.cluster.conftest import Cluster, http_lookup_owner, move_bundle_with_cli
from tests.helpers import close_client
from tests.integration.test_batch_index_ack import (
    drain,
    make_client,
    publish,
    receive_values,
    value_of,
)

TOPIC = "persistent://public/default/moving-state"
KEY = "magnetar.idempotency-key"


def subscribe(client: pulsar.Client) -> pulsar.Consumer:
    return client.subscribe(
        TOPIC,
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        batch_index_ack_enabled=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )


def test_batch_index_acks_and_the_idempotency_window_move_with_the_bundle(
    cluster: Cluster,
) -> None:
    first = cluster.brokers[0]
    client = make_client(cluster.service_url)
    try:
        consumer = subscribe(client)
        batched = client.create_producer(
            TOPIC, batching_enabled=True, batching_max_publish_delay_ms=60_000
        )
        ids = publish(batched, range(10))
        assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == 1  # one batch entry
        keyed = client.create_producer(TOPIC, batching_enabled=False)
        original = keyed.send(b"order-1", properties={KEY: "order-1"})
        for message in receive_values(consumer, 11):
            if message.data() == b"order-1" or value_of(message) < 5:
                consumer.acknowledge(message)  # half of the batch, index by index
        consumer.close()  # sends the grouped acknowledgements
    finally:
        close_client(client)

    owner = cluster.by_url(http_lookup_owner(first.web_port, TOPIC))
    target = next(b for b in cluster.brokers if b is not owner)
    move_bundle_with_cli(first.web_port, TOPIC, 4, target)
    assert http_lookup_owner(first.web_port, TOPIC) == target.url

    client = make_client(cluster.service_url)
    try:
        consumer = subscribe(client)
        # Exactly the indexes not acknowledged before the move: the batch-index acks moved.
        assert sorted(value_of(m) for m in drain(consumer)) == [5, 6, 7, 8, 9]
        # The window moved too: a retry is answered with the first copy's id, nothing stored.
        retry = client.create_producer(TOPIC, batching_enabled=False)
        assert retry.send(b"order-1", properties={KEY: "order-1"}) == original
        assert drain(consumer) == []
    finally:
        close_client(client)
