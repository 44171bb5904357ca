"""``client.asyncio`` readers against a real broker, and interoperation with the official
client: our asyncio producer read by the official consumer, the official producer read by our
asyncio consumer (batched, keyed, with properties)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from client import InitialPosition, MessageId
from client.asyncio import Client
from tests.helpers import BrokerThread, close_client, new_client, topic_stats

pytestmark = [pytest.mark.integration]


def fresh(prefix: str) -> str:
    return f"asyncio-{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def pulsar_client(running: BrokerThread) -> AsyncIterator[Client]:
    made = Client(running.url, operation_timeout_seconds=10)
    yield made
    await made.close()


async def test_a_reader_reads_then_waits_and_disconnects_on_close(pulsar_client: Client) -> None:
    topic = fresh("reader")
    reader = await pulsar_client.create_reader(topic, MessageId.earliest)
    assert reader.is_connected()
    assert reader.topic() == f"persistent://public/default/{topic}"
    producer = await pulsar_client.create_producer(topic)
    await producer.send(b"hello")
    assert (await asyncio.wait_for(reader.read_next(), 10)).data() == b"hello"
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(reader.read_next(), 0.3)
    await reader.close()
    assert not reader.is_connected()


async def test_a_reader_from_latest_reads_only_what_follows(pulsar_client: Client) -> None:
    topic = fresh("latest")
    producer = await pulsar_client.create_producer(topic)
    for i in range(3):
        await producer.send(f"old-{i}".encode())
    reader = await pulsar_client.create_reader(topic, MessageId.latest)
    for i in range(3):
        await producer.send(f"new-{i}".encode())
    got = [(await asyncio.wait_for(reader.read_next(), 10)).data() for _ in range(3)]
    assert got == [f"new-{i}".encode() for i in range(3)]
    await reader.close()


async def test_a_reader_from_a_message_id_starts_after_it(pulsar_client: Client) -> None:
    topic = fresh("from-id")
    producer = await pulsar_client.create_producer(topic)
    ids = [await producer.send(f"m-{i}".encode()) for i in range(6)]
    reader = await pulsar_client.create_reader(topic, ids[2])
    got = [(await asyncio.wait_for(reader.read_next(), 10)).data() for _ in range(3)]
    assert got == [b"m-3", b"m-4", b"m-5"]
    inclusive = await pulsar_client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert (await asyncio.wait_for(inclusive.read_next(), 10)).data() == b"m-2"


async def test_has_message_available_tracks_what_is_left(pulsar_client: Client) -> None:
    topic = fresh("available")
    producer = await pulsar_client.create_producer(topic)
    reader = await pulsar_client.create_reader(topic, MessageId.latest)
    assert not await reader.has_message_available()
    for i in range(4):
        await producer.send(f"m-{i}".encode())
    for _ in range(4):
        assert await reader.has_message_available()
        await asyncio.wait_for(reader.read_next(), 10)
    assert not await reader.has_message_available()


@pytest.mark.parametrize(("inclusive", "first"), [(False, b"m-3"), (True, b"m-2")])
async def test_reader_seek(pulsar_client: Client, inclusive: bool, first: bytes) -> None:
    topic = fresh("reader-seek")
    producer = await pulsar_client.create_producer(topic)
    ids = [await producer.send(f"m-{i}".encode()) for i in range(6)]
    reader = await pulsar_client.create_reader(
        topic, MessageId.latest, start_message_id_inclusive=inclusive
    )
    await reader.seek(ids[2])
    assert (await asyncio.wait_for(reader.read_next(), 10)).data() == first
    with pytest.raises(ValueError):
        await reader.seek(2.5)  # type: ignore[arg-type]


async def test_our_asyncio_producer_to_the_official_consumer(
    running: BrokerThread, pulsar_client: Client
) -> None:
    topic = fresh("to-official")
    official = new_client(running.url)
    try:
        consumer = official.subscribe(topic, "sub")
        producer = await pulsar_client.create_producer(topic)  # batching on by default
        sends = [
            producer.send(f"m-{i}".encode(), partition_key=f"k{i}", properties={"i": str(i)})
            for i in range(10)
        ]
        ids = await asyncio.gather(*sends)
        assert len({(i.ledger_id(), i.entry_id()) for i in ids}) < 10  # some were batched

        def receive_all() -> list[tuple[bytes, str, dict[str, str]]]:
            out = []
            for _ in range(10):
                message = consumer.receive(10_000)
                out.append((message.data(), message.partition_key(), message.properties()))
                consumer.acknowledge(message)
            return out

        got = await asyncio.to_thread(receive_all)
        assert got == [(f"m-{i}".encode(), f"k{i}", {"i": str(i)}) for i in range(10)]
    finally:
        close_client(official)


async def test_the_official_producer_to_our_asyncio_consumer(
    running: BrokerThread, pulsar_client: Client
) -> None:
    topic = fresh("from-official")
    consumer = await pulsar_client.subscribe(
        topic, "sub", initial_position=InitialPosition.Earliest
    )
    official = new_client(running.url)
    try:
        producer = official.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=5
        )
        for i in range(10):
            producer.send_async(f"m-{i}".encode(), None, partition_key=f"k{i}")
        await asyncio.to_thread(producer.flush)
        received = [await asyncio.wait_for(consumer.receive(), 10) for _ in range(10)]
        assert [(m.data(), m.partition_key()) for m in received] == [
            (f"m-{i}".encode(), f"k{i}") for i in range(10)
        ]
        for message in received:
            await consumer.acknowledge(message)
        await consumer.get_last_message_id()  # answered after the acknowledgements arrived
        stats = await asyncio.to_thread(topic_stats, running.http, consumer.topic())
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 0
    finally:
        close_client(official)
