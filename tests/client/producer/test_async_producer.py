"""Our producer against a real Magnetar broker, read back with the official ``pulsar`` client.

Payloads, properties, keys, event times, producer names and message ids must be what the
official consumer sees; sequence ids are what the broker's dedup remembers (a later producer
of the same name resumes after them, a resend of one is answered ``-1:-1``). Access modes
(PIP-68) behave as with the official producer.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pulsar
import pytest

from client import AsyncClient, CompressionType, ProducerAccessMode
from client.errors import InvalidTopicName, MessageTooBig, ProducerBusy, ProducerFenced
from client.message_id import MessageId
from client.schema import JsonSchema, StringSchema
from tests.helpers import BrokerThread, read_all_messages

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def new_topic() -> str:
    return f"persistent://public/default/ours-{uuid.uuid4().hex[:10]}"


def same_id(ours: MessageId, theirs: pulsar.MessageId) -> bool:
    official_bytes: bytes = theirs.serialize()
    return ours.serialize() == official_bytes


async def test_official_consumer_reads_exactly_what_we_sent(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic, producer_name="interop")
        sent = []
        for i in range(20):
            message_id = await producer.send(
                f"payload-{i}".encode(),
                properties={"i": str(i), "kind": "test"},
                partition_key=f"key-{i % 3}",
                ordering_key=f"order-{i}",
                event_timestamp=1_700_000_000_000 + i,
                sequence_id=100 + i,
            )
            sent.append(message_id)
        empty = await producer.send(b"")
        assert producer.last_sequence_id() == 120
    received = await asyncio.to_thread(read_all_messages, official, topic)
    assert len(received) == 21
    for i, (message, message_id) in enumerate(zip(received, sent, strict=False)):
        assert message.data() == f"payload-{i}".encode()
        assert message.properties() == {"i": str(i), "kind": "test"}
        assert message.partition_key() == f"key-{i % 3}"
        assert message.ordering_key() == f"order-{i}"
        assert message.event_timestamp() == 1_700_000_000_000 + i
        assert message.producer_name() == "interop"
        assert same_id(message_id, message.message_id())
    assert received[20].data() == b""
    assert same_id(empty, received[20].message_id())


async def test_sequence_ids_are_what_dedup_remembers(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        first = await client.create_producer(topic, producer_name="numbered")
        assert first.last_sequence_id() == -1
        for _ in range(5):
            await first.send(b"x")  # automatic ids 0..4
        duplicate = await first.send(b"again", sequence_id=3)
        assert duplicate == MessageId(-1, -1, -1, -1)  # stored once: answered -1:-1
        await first.close()
        second = await client.create_producer(topic, producer_name="numbered")
        assert second.last_sequence_id() == 4  # resumes the application's numbering
        message_id = await second.send(b"y")
        assert message_id.entry_id() == 5
        await second.close()
    # The official client agrees on the ids our producer used.
    theirs = await asyncio.to_thread(official.create_producer, topic, producer_name="numbered")
    assert theirs.last_sequence_id() == 5
    theirs.close()
    assert len(await asyncio.to_thread(read_all_messages, official, topic)) == 6


async def test_a_generated_name_is_the_one_consumers_see(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        name = producer.producer_name()
    assert name
    (message,) = await asyncio.to_thread(read_all_messages, official, topic)
    assert message.producer_name() == name


async def test_exclusive_access_modes_as_pip68_says(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url, operation_timeout_seconds=5) as client:
        holder = await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
        with pytest.raises(ProducerFenced):
            await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
        with pytest.raises(ProducerBusy):
            await client.create_producer(topic)  # Shared while an exclusive one holds it
        waiting = asyncio.ensure_future(
            client.create_producer(topic, access_mode=ProducerAccessMode.WaitForExclusive)
        )
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await holder.send(b"from the holder")
        await holder.close()
        successor = await asyncio.wait_for(waiting, 10)
        assert (await successor.send(b"from the successor")).entry_id() >= 0
        fencer = await client.create_producer(
            topic, access_mode=ProducerAccessMode.ExclusiveWithFencing
        )
        await fencer.send(b"from the fencer")

        async def send_until_refused() -> None:
            for _ in range(50):  # its reconnection may still be under way
                await successor.send(b"too late")
                await asyncio.sleep(0.05)

        # The fenced producer learns it on its next attempt and stays fenced.
        with pytest.raises(ProducerFenced):
            await send_until_refused()
        with pytest.raises(ProducerFenced):
            await successor.send(b"still too late")


async def test_a_shared_producer_name_can_be_used_once_at_a_time(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        await client.create_producer(topic, producer_name="only-one")
        with pytest.raises(ProducerBusy):
            await client.create_producer(topic, producer_name="only-one")


async def test_bad_topic_names_are_refused_before_any_request(running: BrokerThread) -> None:
    async with AsyncClient(running.url) as client:
        with pytest.raises(InvalidTopicName):
            await client.create_producer("persistent://public/default/a/../b")
        assert client.connections == []


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
async def test_batches_and_codecs_are_read_by_the_official_client(
    running: BrokerThread, official: pulsar.Client, batching: bool, codec: CompressionType
) -> None:
    topic = new_topic()
    payloads = [os.urandom(50) + b"compressible " * (i % 7) for i in range(30)]
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(
            topic,
            producer_name="codec",
            compression_type=codec,
            batching_enabled=batching,
            batching_max_messages=8,
            batching_max_publish_delay_ms=50,
        )
        futures = [
            await producer.send_async(payload, properties={"n": str(n)})
            for n, payload in enumerate(payloads)
        ]
        ids = await asyncio.gather(*futures)
        assert producer.last_sequence_id() == 29
    received = await asyncio.to_thread(read_all_messages, official, topic)
    assert [message.data() for message in received] == payloads
    assert [message.properties()["n"] for message in received] == [str(n) for n in range(30)]
    assert all(same_id(ours, m.message_id()) for ours, m in zip(ids, received, strict=True))
    if batching:
        assert {message_id.batch_size() for message_id in ids} == {8, 6}
        assert len({message_id.entry_id() for message_id in ids}) == 4


async def test_a_chunked_message_is_reassembled_by_the_official_consumer(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    consumer = await asyncio.to_thread(official.subscribe, topic, "chunks")
    large = os.urandom(200 * 1024)  # the broker's maxMessageSize here is 64 KiB
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic, chunking_enabled=True)
        message_id = await producer.send(large)
        small_id = await producer.send(b"small")
    assert message_id.first_chunk() is not None
    assert message_id.first_chunk() < message_id.wire
    message = await asyncio.to_thread(consumer.receive, 10_000)
    assert message.data() == large
    assert message.message_id().serialize() == message_id.serialize()
    assert (await asyncio.to_thread(consumer.receive, 10_000)).data() == b"small"
    assert small_id.entry_id() == message_id.entry_id() + 1
    consumer.close()


async def test_a_message_over_the_limit_without_chunking_is_refused(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic)
        with pytest.raises(MessageTooBig):
            await producer.send(b"x" * (64 * 1024 + 1))
        assert (await producer.send(b"fits")).entry_id() == 0  # nothing was consumed
        assert producer.last_sequence_id() == 0


class Order(pulsar.schema.Record):  # type: ignore[misc]
    id = pulsar.schema.Integer()
    name = pulsar.schema.String()


async def test_schemas_are_registered_so_the_official_client_reads_values(
    running: BrokerThread, official: pulsar.Client
) -> None:
    json_topic, text_topic = new_topic(), new_topic()
    theirs_json = await asyncio.to_thread(
        official.subscribe, json_topic, "json", schema=pulsar.schema.JsonSchema(Order)
    )
    theirs_text = await asyncio.to_thread(
        official.subscribe, text_topic, "text", schema=pulsar.schema.StringSchema()
    )
    async with AsyncClient(running.url) as client:
        orders = await client.create_producer(json_topic, schema=JsonSchema(Order))
        await orders.send(Order(id=7, name="seven"))
        texts = await client.create_producer(text_topic, schema=StringSchema())
        await texts.send("héllo")
    order = (await asyncio.to_thread(theirs_json.receive, 10_000)).value()
    assert (order.id, order.name) == (7, "seven")
    assert (await asyncio.to_thread(theirs_text.receive, 10_000)).value() == "héllo"
    theirs_json.close()
    theirs_text.close()
