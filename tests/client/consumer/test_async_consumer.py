"""Our consumer against a real Magnetar broker, fed by the official producer and by ours.

What the official producer sent (batched or not, every codec, chunked, JSON schema) must come
out of our consumer with the same payloads, keys, properties, event times and ids. Acks are
subscription state (they survive a broker restart); negative acks, the unacked timeout and
redeliver-all bring messages back; batch-index acks (PIP-54) keep half a batch acknowledged.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pulsar
import pytest
from pulsar.schema import Integer, Record, String
from pulsar.schema import JsonSchema as OfficialJsonSchema

from client import AsyncClient, CompressionType, InitialPosition
from client.consumer import ConsumerType
from client.errors import AlreadyClosed, CumulativeAcknowledgementNotAllowedError, Timeout
from client.schema import JsonSchema
from tests.helpers import BrokerThread, broker_config

pytestmark = [pytest.mark.integration, pytest.mark.compat]

EARLIEST = InitialPosition.Earliest


def new_topic() -> str:
    return f"persistent://public/default/consume-{uuid.uuid4().hex[:10]}"


CODECS = {
    CompressionType.NONE: pulsar.CompressionType.NONE,
    CompressionType.LZ4: pulsar.CompressionType.LZ4,
    CompressionType.ZLIB: pulsar.CompressionType.ZLib,
    CompressionType.ZSTD: pulsar.CompressionType.ZSTD,
    CompressionType.SNAPPY: pulsar.CompressionType.SNAPPY,
}


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", list(CODECS), ids=[c.name for c in CODECS])
async def test_official_producer_to_our_consumer(
    running: BrokerThread, official: pulsar.Client, batched: bool, codec: CompressionType
) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
        producer = official.create_producer(
            topic,
            producer_name="theirs",
            batching_enabled=batched,
            batching_max_publish_delay_ms=50,
            compression_type=CODECS[codec],
        )
        sent_ids: list[pulsar.MessageId] = []
        for i in range(30):
            producer.send_async(
                f"payload-{i}".encode() * 20,
                lambda _res, mid: sent_ids.append(mid),
                properties={"i": str(i)},
                partition_key=f"key-{i % 4}",
                event_timestamp=1_700_000_000_000 + i,
            )
        producer.flush()
        producer.close()
        for i in range(30):
            message = await consumer.receive(5000)
            assert message.data() == f"payload-{i}".encode() * 20
            assert message.properties() == {"i": str(i)}
            assert message.partition_key() == f"key-{i % 4}"
            assert message.event_timestamp() == 1_700_000_000_000 + i
            assert message.producer_name() == "theirs"
            assert message.sequence_id() == i
            assert str(message.message_id()) == str(sent_ids[i])
            assert (message.message_id().batch_index() >= 0) == batched
            consumer.acknowledge(message)
        with pytest.raises(Timeout):
            await consumer.receive(100)


async def test_chunked_message_of_12_mib(running: BrokerThread, official: pulsar.Client) -> None:
    topic = new_topic()
    payload = bytes(range(256)) * (12 * 4096)
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
        producer = official.create_producer(topic, batching_enabled=False, chunking_enabled=True)
        producer.send(payload, properties={"big": "yes"})
        producer.send(b"after")
        producer.close()
        message = await consumer.receive(10_000)
        assert message.data() == payload
        assert message.properties() == {"big": "yes"}
        assert message.message_id().first_chunk() is not None
        consumer.acknowledge(message)
        assert (await consumer.receive(5000)).data() == b"after"


class Point(Record):  # type: ignore[misc]
    name = String()
    x = Integer()


async def test_json_schema_from_official_producer(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(
            topic, "sub", initial_position=EARLIEST, schema=JsonSchema(Point)
        )
        producer = official.create_producer(topic, schema=OfficialJsonSchema(Point))
        producer.send(Point(name="a", x=7))
        producer.close()
        value = (await consumer.receive(5000)).value()
        assert (value.name, value.x) == ("a", 7)


async def test_our_producer_to_our_consumer_with_async_for(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(topic, "sub", receiver_queue_size=10)
        producer = await client.create_producer(topic, batching_enabled=True)
        sent = [await producer.send_async(f"m{i}".encode(), ordering_key="k") for i in range(100)]
        await producer.flush()
        got: list[bytes] = []
        async for message in consumer:
            assert message.ordering_key() == "k"
            assert message.message_id() == sent[len(got)].result()
            got.append(message.data())
            consumer.acknowledge(message)
            if len(got) == 100:
                break
        assert got == [f"m{i}".encode() for i in range(100)]


def restart(broker: BrokerThread) -> BrokerThread:
    broker.stop()
    return BrokerThread(broker.config).start()


async def test_acks_persist_across_a_broker_restart(tmp_path: Path) -> None:
    topic = new_topic()
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
            producer = await client.create_producer(topic)
            for i in range(10):
                await producer.send(f"m{i}".encode())
            for _ in range(6):
                consumer.acknowledge(await consumer.receive(5000))
        broker = restart(broker)
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe(topic, "sub")
            got = [(await consumer.receive(5000)).data() for _ in range(4)]
            assert got == [f"m{i}".encode() for i in range(6, 10)]
            with pytest.raises(Timeout):
                await consumer.receive(200)
    finally:
        broker.stop()


@pytest.mark.parametrize("index_acks", [True, False], ids=["batch-index-ack", "entry-ack"])
async def test_batch_index_ack_survives_a_restart(tmp_path: Path, index_acks: bool) -> None:
    topic = new_topic()
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe(
                topic, "sub", initial_position=EARLIEST, batch_index_ack_enabled=index_acks
            )
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_publish_delay_ms=1000
            )
            for i in range(10):
                await producer.send_async(f"m{i}".encode())
            await producer.flush()
            for i in range(10):
                message = await consumer.receive(5000)
                assert message.message_id().batch_size() == 10
                if i % 2 == 0:
                    consumer.acknowledge(message)
        broker = restart(broker)
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe(topic, "sub", batch_index_ack_enabled=index_acks)
            expected = range(1, 10, 2) if index_acks else range(10)
            got = [(await consumer.receive(5000)).data() for _ in expected]
            assert got == [f"m{i}".encode() for i in expected]
            with pytest.raises(Timeout):
                await consumer.receive(200)
    finally:
        broker.stop()


async def test_negative_ack_redelivers_after_the_delay(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(
            topic, "sub", ConsumerType.Shared, negative_ack_redelivery_delay_ms=200
        )
        producer = await client.create_producer(topic)
        await producer.send(b"a")
        await producer.send(b"b")
        first = await consumer.receive(5000)
        consumer.negative_acknowledge(first)
        second = await consumer.receive(5000)
        assert (first.data(), second.data()) == (b"a", b"b")
        consumer.acknowledge(second)
        again = await consumer.receive(5000)
        assert again.data() == b"a"
        assert again.message_id() == first.message_id()
        assert again.redelivery_count() == 1
        consumer.acknowledge(again)
        with pytest.raises(Timeout):
            await consumer.receive(400)


@pytest.mark.parametrize("kind", [ConsumerType.Exclusive, ConsumerType.Shared])
async def test_unacked_timeout_redelivers(running: BrokerThread, kind: ConsumerType) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(topic, "sub", kind, unacked_messages_timeout_ms=300)
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        first = await consumer.receive(5000)
        again = await consumer.receive(5000)
        assert again.data() == b"x"
        assert again.message_id() == first.message_id()
        consumer.acknowledge(again)
        with pytest.raises(Timeout):
            await consumer.receive(600)


async def test_cumulative_ack_and_seek(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(topic, "sub")
        producer = await client.create_producer(topic)
        ids = [await producer.send(f"m{i}".encode()) for i in range(10)]
        received = [await consumer.receive(5000) for _ in range(10)]
        consumer.acknowledge_cumulative(received[4])
        await consumer.seek(ids[7])  # excluded, as by the official consumer
        assert (await consumer.receive(5000)).data() == b"m8"
        await consumer.seek(0)  # publish time 0: back to the first message
        assert (await consumer.receive(5000)).data() == b"m0"
        shared = await client.subscribe(topic, "shared", ConsumerType.Shared)
        with pytest.raises(CumulativeAcknowledgementNotAllowedError):
            shared.acknowledge_cumulative(received[0])


async def test_unsubscribe_and_hygiene_after_close(running: BrokerThread) -> None:
    topic = new_topic()
    client = AsyncClient(running.url)
    consumer = await client.subscribe(topic, "sub")
    waiting = asyncio.ensure_future(consumer.receive())
    await asyncio.sleep(0)
    await consumer.unsubscribe()
    with pytest.raises(AlreadyClosed):
        await waiting
    other = await client.subscribe(topic, "sub2")
    await client.close()
    with pytest.raises(AlreadyClosed):
        await other.receive(10)
    assert client.connections == []
    assert asyncio.all_tasks() == {asyncio.current_task()}
