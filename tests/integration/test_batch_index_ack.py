"""PIP-54 batch-index acknowledgement with the official client (C++ core 4.2.0): B1-B5.

Pulsar's ``BatchMessageIndexAckTest`` / ``BatchMessageIndexAckDisableTest`` scenarios
(reference: reliability.md §1.7) against an in-process broker. Consumers opt in with
``batch_index_ack_enabled=True``; producers batch (``batching_max_messages``, 50 ms delay) so the
messages share entries. Messages carry their index as payload, so "which ones came back" is exact.

Sync points instead of sleeps: ``consumer.close()`` flushes the client's grouped acks before
CLOSE_CONSUMER and the broker handles a connection's frames in order, so once it returns the acks
are applied; elsewhere the broker's consumer counters (admin stats) are polled.

Ack receipts: pulsar-client 3.13 does not expose ``AckReceiptEnabled``, so every test here runs
with receipts off; ``test_batch_index_ack_receipts.py`` repeats B1-B4 with a raw-protocol
consumer that asks for a receipt on every ACK.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.helpers import BrokerThread, broker_config, topic_stats

pytestmark = [pytest.mark.integration, pytest.mark.compat]

Shared = pulsar.ConsumerType.Shared
Exclusive = pulsar.ConsumerType.Exclusive


# --------------------------------------------------------------------------- helpers


def new_topic() -> str:
    return f"persistent://public/default/bia-{uuid.uuid4().hex[:10]}"


def make_client(url: str) -> pulsar.Client:
    return pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )


def sub_stats(http: str, topic: str, sub: str = "sub") -> dict[str, Any]:
    result: dict[str, Any] = topic_stats(http, topic)["subscriptions"][sub]
    return result


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def batching_producer(client: pulsar.Client, topic: str, batch: int = 100) -> pulsar.Producer:
    return client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=batch,
        batching_max_publish_delay_ms=50,
    )


def publish(producer: pulsar.Producer, values: range) -> list[pulsar.MessageId]:
    """Send ``values`` asynchronously so they batch; return their ids in send order."""
    ids: dict[int, pulsar.MessageId] = {}

    def remember(value: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            assert result == pulsar.Result.Ok
            ids[value] = message_id

        return done

    for value in values:
        producer.send_async(str(value).encode(), remember(value))
    producer.flush()
    assert len(ids) == len(values)
    return [ids[v] for v in values]


def value_of(message: pulsar.Message) -> int:
    return int(message.data())


def receive_values(consumer: pulsar.Consumer, count: int) -> list[pulsar.Message]:
    return [consumer.receive(10_000) for _ in range(count)]


def drain(consumer: pulsar.Consumer, quiet_ms: int = 700) -> list[pulsar.Message]:
    """Everything that arrives until nothing has for ``quiet_ms``."""
    messages = []
    while True:
        try:
            messages.append(consumer.receive(quiet_ms))
        except pulsar.Timeout:
            return messages


def entry_of(message_id: pulsar.MessageId) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def position_text(message_id: pulsar.MessageId) -> str:
    return f"{message_id.ledger_id()}:{message_id.entry_id()}"


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = make_client(broker.url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def flag_off_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    running = BrokerThread(
        broker_config(tmp_path / "data", acknowledgment_at_batch_index_level_enabled=False)
    ).start()
    try:
        yield running
    finally:
        running.stop()


# --------------------------------------------------------------------------- B1


@pytest.mark.parametrize("sub_type", [Shared, Exclusive], ids=["shared", "exclusive"])
def test_b1_only_the_negatively_acked_half_comes_back(
    broker: BrokerThread, client: pulsar.Client, sub_type: pulsar.ConsumerType
) -> None:
    """Ack the even messages, nack the odd ones: exactly the 50 odd ones come back; once they
    are acked nothing more arrives, the mark-delete reaches the last entry, new messages flow."""
    topic = new_topic()
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=sub_type,
        receiver_queue_size=100,
        batch_index_ack_enabled=True,
        # Far beyond the client's 100 ms ack grouping: the acks reach the broker first.
        negative_ack_redelivery_delay_ms=1000,
    )
    producer = batching_producer(client, topic)
    ids = publish(producer, range(100))
    first = receive_values(consumer, 100)
    assert [value_of(m) for m in first] == list(range(100))
    for message in first:
        if value_of(message) % 2 == 0:
            consumer.acknowledge(message)
        else:
            consumer.negative_acknowledge(message)

    again = receive_values(consumer, 50)
    assert sorted(value_of(m) for m in again) == list(range(1, 100, 2))
    for message in again:
        consumer.acknowledge(message)
    assert drain(consumer) == []

    wait_for(lambda: sub_stats(broker.http, topic)["msgBacklog"] == 0, "backlog 0")
    consumer.redeliver_unacknowledged_messages()
    assert drain(consumer, 1000) == []
    last_entry = max(ids, key=entry_of)
    assert sub_stats(broker.http, topic)["markDeletePosition"] == position_text(last_entry)

    publish(producer, range(100, 150))
    assert sorted(value_of(m) for m in receive_values(consumer, 50)) == list(range(100, 150))


# --------------------------------------------------------------------------- B2


@pytest.mark.parametrize("reopen_with_batch_index_ack", [True, False])
def test_b2_cumulative_ack_in_the_middle_of_a_batch(
    broker: BrokerThread, client: pulsar.Client, reopen_with_batch_index_ack: bool
) -> None:
    """Exclusive: cumulative ack at index 49; after reopening exactly 50..99 come, then
    nothing; new messages still flow. (Java reopens without batch-index ack: the broker's
    ack_set is honoured by the client either way.)"""
    topic = new_topic()
    consumer = client.subscribe(
        topic, "sub", consumer_type=Exclusive, receiver_queue_size=100, batch_index_ack_enabled=True
    )
    producer = batching_producer(client, topic)
    publish(producer, range(100))
    messages = receive_values(consumer, 100)
    consumer.acknowledge_cumulative(messages[49])
    consumer.close()

    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=Exclusive,
        receiver_queue_size=100,
        batch_index_ack_enabled=reopen_with_batch_index_ack,
    )
    assert [value_of(m) for m in drain(consumer)] == list(range(50, 100))
    publish(producer, range(100, 150))
    assert [value_of(m) for m in receive_values(consumer, 50)] == list(range(100, 150))


# --------------------------------------------------------------------------- B3


def test_b3_cumulative_ack_of_every_message(broker: BrokerThread, client: pulsar.Client) -> None:
    """testDoNotRecycleAckSetMultipleTimes: a cumulative ack per message, in batches of 10."""
    topic = new_topic()
    consumer = client.subscribe(topic, "sub", consumer_type=Exclusive, batch_index_ack_enabled=True)
    producer = batching_producer(client, topic, batch=10)
    ids = publish(producer, range(100))
    for _ in range(100):
        consumer.acknowledge_cumulative(consumer.receive(10_000))
    last_entry = position_text(max(ids, key=entry_of))
    wait_for(
        lambda: sub_stats(broker.http, topic)["markDeletePosition"] == last_entry,
        "mark-delete at the last entry",
    )
    assert sub_stats(broker.http, topic)["msgBacklog"] == 0


# --------------------------------------------------------------------------- B4


@pytest.mark.parametrize("remaining", [3, 1])
@pytest.mark.parametrize("sub_type", [Shared, Exclusive], ids=["shared", "exclusive"])
def test_b4_partial_batch_redelivery_keeps_permits_balanced(
    broker: BrokerThread, client: pulsar.Client, sub_type: pulsar.ConsumerType, remaining: int
) -> None:
    """testPartialBatchRedeliveryKeepsSharedPermitBalance: a batch of 10, 10-remaining acked,
    the consumer closes; the replacement (queue of 1) receives exactly the remaining ones; the
    broker then shows permits=1, unacked=0, and the next message is delivered."""
    topic = new_topic()

    def subscribe() -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "sub",
            consumer_type=sub_type,
            receiver_queue_size=1,
            batch_index_ack_enabled=True,
        )

    first = subscribe()
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=3_600_000,
    )
    publish(producer, range(10))
    delivered = receive_values(first, 10)
    acked = 10 - remaining
    for message in delivered[:acked]:
        first.acknowledge(message)
    first.close()

    replacement = subscribe()
    redelivered = receive_values(replacement, remaining)
    assert sorted(value_of(m) for m in redelivered) == list(range(acked, 10))
    assert drain(replacement, 1000) == []

    def counters() -> list[tuple[int, int]]:
        consumers = sub_stats(broker.http, topic)["consumers"]
        return [(c["availablePermits"], c["unackedMessages"]) for c in consumers]

    # Skipped indexes neither leak nor inflate permits; unacked counts messages, not entries.
    wait_for(lambda: counters() == [(1, remaining)], f"permits=1, unacked={remaining}")
    for message in redelivered:
        replacement.acknowledge(message)
    wait_for(lambda: counters() == [(1, 0)], "permits=1, unacked=0")
    publish(producer, range(10, 11))
    assert value_of(replacement.receive(10_000)) == 10


# --------------------------------------------------------------------------- B5 (flag off)


@pytest.mark.parametrize("client_opt_in", [True, False])
def test_b5_flag_off_shared_redelivers_whole_batches(
    flag_off_broker: BrokerThread, client_opt_in: bool
) -> None:
    """acknowledgmentAtBatchIndexLevelEnabled=false: acking only the even messages acks no
    entry, so after the consumer leaves all 100 come back."""
    client = make_client(flag_off_broker.url)
    try:
        topic = new_topic()
        consumer = client.subscribe(
            topic,
            "sub",
            consumer_type=Shared,
            receiver_queue_size=100,
            batch_index_ack_enabled=client_opt_in,
        )
        publish(batching_producer(client, topic), range(100))
        for message in receive_values(consumer, 100):
            if value_of(message) % 2 == 0:
                consumer.acknowledge(message)
        consumer.close()
        consumer = client.subscribe(
            topic, "sub", consumer_type=Shared, batch_index_ack_enabled=client_opt_in
        )
        assert sorted(value_of(m) for m in drain(consumer)) == list(range(100))
    finally:
        client.close()


def test_b5_flag_off_exclusive_cumulative_inside_a_batch_redelivers_it_whole(
    flag_off_broker: BrokerThread,
) -> None:
    """Cumulative ack at index 49 acks only the entries before its batch: that batch comes back
    whole (all 100 when they share one entry, as in Java's test)."""
    client = make_client(flag_off_broker.url)
    try:
        topic = new_topic()
        consumer = client.subscribe(
            topic, "sub", consumer_type=Exclusive, batch_index_ack_enabled=True
        )
        ids = publish(batching_producer(client, topic), range(100))
        messages = receive_values(consumer, 100)
        consumer.acknowledge_cumulative(messages[49])
        consumer.close()
        consumer = client.subscribe(
            topic, "sub", consumer_type=Exclusive, batch_index_ack_enabled=True
        )
        batch_of_49 = entry_of(ids[49])
        expected = [v for v in range(100) if entry_of(ids[v]) >= batch_of_49]
        assert 49 in expected
        assert len(expected) > 50
        assert [value_of(m) for m in drain(consumer)] == expected
    finally:
        client.close()
