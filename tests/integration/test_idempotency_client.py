"""Issue #16 end to end with our client: ``send(..., idempotency_key=...)`` on the blocking
producer, the asyncio producer and the partitioned producer; partly duplicate batches hidden
from our consumers and readers, with and without batch-index acks; PIP-6 and keys together."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import client as magnetar
from client import AsyncClient, ConsumerType, InitialPosition, MessageId
from client.producer import IDEMPOTENCY_KEY_PROPERTY
from tests.helpers import BrokerThread, topic_stats

pytestmark = [pytest.mark.integration]


def new_topic() -> str:
    return f"persistent://public/default/idem-ours-{uuid.uuid4().hex[:10]}"


def entry_of(message_id: Any) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def receive_all(consumer: Any, *, ack: bool = True) -> list[bytes]:
    out: list[bytes] = []
    while True:
        try:
            message = consumer.receive(300)
        except magnetar.Timeout:
            return out
        out.append(message.data())
        if ack:
            consumer.acknowledge(message)


def test_blocking_send_with_key_returns_the_original_id(broker: BrokerThread) -> None:
    topic = new_topic()
    client = magnetar.Client(broker.url)
    try:
        producer = client.create_producer(topic)
        first = producer.send(b"one", idempotency_key="req-1")
        other_name = client.create_producer(topic)
        again = other_name.send(b"one, retried", idempotency_key="req-1")
        assert entry_of(again) == entry_of(first)
        reader = client.create_reader(topic, MessageId.earliest)
        message = reader.read_next(5000)
        assert message.data() == b"one"
        assert message.properties()[IDEMPOTENCY_KEY_PROPERTY] == "req-1"
        assert not reader.has_message_available()
        assert topic_stats(broker.http, topic)["msgInCounter"] == 1
    finally:
        client.close()


@pytest.mark.parametrize("batch_index_ack", [True, False])
def test_partly_duplicate_batch_hidden_from_our_consumers_and_readers(
    broker: BrokerThread, batch_index_ack: bool
) -> None:
    topic = new_topic()
    client = magnetar.Client(broker.url)
    try:
        client.create_producer(topic).send(b"first k1", idempotency_key="k1")
        batching = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=60_000
        )
        futures = [
            batching.send_async(payload, None, idempotency_key=key)
            for payload, key in ((b"k0", "k0"), (b"dup k1", "k1"), (b"k2", "k2"))
        ]
        batching.flush()
        ids = [f.result(10) for f in futures if f is not None]
        assert len({entry_of(i) for i in ids}) == 1
        expected = [b"first k1", b"k0", b"k2"]
        for sub_type in (ConsumerType.Shared, ConsumerType.Exclusive, ConsumerType.Key_Shared):
            consumer = client.subscribe(
                topic,
                f"sub-{sub_type}",
                consumer_type=sub_type,
                initial_position=InitialPosition.Earliest,
                batch_index_ack_enabled=batch_index_ack,
            )
            assert receive_all(consumer) == expected
            consumer.close()
        reader = client.create_reader(topic, MessageId.earliest)
        read = []
        while reader.has_message_available():
            read.append(reader.read_next(5000).data())
        assert read == expected
    finally:
        client.close()


def test_async_and_partitioned_producers_send_keys(broker: BrokerThread) -> None:
    async def scenario() -> None:
        topic = new_topic()
        await broker_admin_partitions(broker, topic, 2)
        async with AsyncClient(broker.url) as client:
            partitioned = await client.create_producer(topic)
            # Keys are per partition: the retry is routed like its first copy (same partition
            # key) and acknowledged with the original's id.
            first = [
                await partitioned.send(b"m", idempotency_key=f"key-{i}", partition_key=f"pk-{i}")
                for i in range(6)
            ]
            again = [
                await partitioned.send(b"r", idempotency_key=f"key-{i}", partition_key=f"pk-{i}")
                for i in range(6)
            ]
            assert [str(m) for m in again] == [str(m) for m in first]
            assert len({m.partition() for m in first}) == 2
            single = await client.create_producer(new_topic())
            one = await single.send(b"x", idempotency_key="same")
            two = await single.send(b"y", idempotency_key="same")
            assert entry_of(one) == entry_of(two)
        stats = [topic_stats(broker.http, f"{topic}-partition-{p}") for p in (0, 1)]
        assert sum(s["msgInCounter"] for s in stats) == 6

    asyncio.run(scenario())


async def broker_admin_partitions(broker: BrokerThread, topic: str, partitions: int) -> None:
    import urllib.request

    path = topic.removeprefix("persistent://")
    request = urllib.request.Request(
        f"{broker.http}/admin/v2/persistent/{path}/partitions",
        data=str(partitions).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    await asyncio.to_thread(urllib.request.urlopen, request, timeout=10)


def test_pip6_and_keys_together(broker: BrokerThread) -> None:
    """A resend with the same producer name and sequence id is PIP-6's duplicate (-1:-1 would
    be Pulsar's answer; the key names the original); a new sequence id with an old key is the
    key's duplicate; a new key with an old sequence id is PIP-6's duplicate: nothing stored."""
    topic = new_topic()
    client = magnetar.Client(broker.url)
    try:
        producer = client.create_producer(topic, producer_name="pip6-and-keys")
        first = producer.send(b"a", sequence_id=10, idempotency_key="a")
        key_dup = producer.send(b"a again", sequence_id=11, idempotency_key="a")
        assert entry_of(key_dup) == entry_of(first)
        producer.send(b"b", sequence_id=12, idempotency_key="b")
        producer.send(b"old seq", sequence_id=5, idempotency_key="c")  # PIP-6: duplicate
        stats = topic_stats(broker.http, topic)
        assert stats["msgInCounter"] == 2
        assert stats["deduplication"]["duplicatesDropped"] == 1
        assert stats["idempotency"]["duplicatesDropped"] == 1
        # "c" was not stored, so it is not in the window: sent anew it is stored.
        producer.send(b"c", sequence_id=13, idempotency_key="c")
        assert topic_stats(broker.http, topic)["msgInCounter"] == 3
    finally:
        client.close()
