"""The entry reader (``client.entry_reader``) against a real broker: the same records as a
reader's messages from every kind of start, inside batches too; flow control with a queue far
smaller than the messages read; seek, ``has_message_available``, compression, the blocking
facade."""

from __future__ import annotations

import uuid

import pytest

from client import AsyncClient, Client, CompressionType, MessageId
from client.entry_reader import AsyncEntryReader, create_entry_reader
from client.errors import InvalidConfiguration, Timeout
from client.raw_entry import RawEntry
from client.sync.entry_reader import create_entry_reader as create_blocking_entry_reader
from protocol.batch import split_batch
from tests.helpers import BrokerThread
from tests.integration.test_partitioned_topics import create_partitioned

pytestmark = [pytest.mark.integration]


def new_topic() -> str:
    return f"persistent://public/default/entries-{uuid.uuid4().hex[:10]}"


async def fill(
    client: AsyncClient,
    topic: str,
    batched: bool,
    count: int = 10,
    batch: int = 5,
    compression: CompressionType = CompressionType.NONE,
) -> list[MessageId]:
    producer = await client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=batch,
        batching_max_publish_delay_ms=60_000,
        compression_type=compression,
    )
    futures = [await producer.send_async(f"m{i}".encode()) for i in range(count)]
    await producer.flush()
    await producer.close()
    return [future.result() for future in futures]


def records(entries: list[RawEntry]) -> list[bytes]:
    """The payloads of the records the entries hand to the reader, in order."""
    out: list[bytes] = []
    for entry in entries:
        if entry.is_batch:
            split = split_batch(entry.payload, entry.count)
            out += [split[index][1] for index in entry.taken()]
        else:
            out.append(entry.payload)
    return out


async def read_all(reader: AsyncEntryReader) -> list[RawEntry]:
    entries: list[RawEntry] = []
    while await reader.has_message_available():
        entries += await reader.read_entries(3, 5000)
    return entries


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
async def test_same_records_as_a_reader(
    running: BrokerThread, batched: bool, inclusive: bool
) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        ids = await fill(client, topic, batched)
        starts = [MessageId.earliest, ids[0], ids[3], ids[4], ids[5], ids[9], MessageId.latest]
        for start in starts:
            plain = await client.create_reader(topic, start, start_message_id_inclusive=inclusive)
            expected = []
            while await plain.has_message_available():
                expected.append((await plain.read_next(5000)).data())
            await plain.close()
            reader = await create_entry_reader(
                client, topic, start, start_message_id_inclusive=inclusive
            )
            entries = await read_all(reader)
            assert records(entries) == expected, start
            if entries:  # the queue remembers the last record taken, as for a message
                assert reader.consumer.last_dequeued == ids[-1]
            await reader.close()


async def test_flow_control_with_a_queue_of_two_entries(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        await fill(client, topic, batched=True, count=600, batch=20)
        reader = await create_entry_reader(client, topic, MessageId.earliest, receiver_queue_size=2)
        got: list[RawEntry] = []
        while len(records(got)) < 600:
            got += await reader.read_entries(1, 5000)  # stalls (Timeout) if permits leak
            assert reader.consumer.queued <= 3  # bounded in entries: 2 + one in flight
        assert records(got) == [f"m{i}".encode() for i in range(600)]
        assert all(entry.count == 20 for entry in got)
        assert not await reader.has_message_available()
        with pytest.raises(Timeout):
            await reader.read_entries(10, 200)


async def test_seek_inside_batches_again_and_again(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        ids = await fill(client, topic, batched=True, count=200, batch=10)
        reader = await create_entry_reader(
            client,
            topic,
            MessageId.earliest,
            receiver_queue_size=4,
            start_message_id_inclusive=True,
        )
        for round_ in range(6):  # permits of the entries each seek drops must come back
            await reader.seek(ids[round_])
            await reader.read_entries(2, 5000)  # and some left queued
            target = 13 + round_ * 7
            await reader.seek(ids[target])
            assert records(await read_all(reader)) == [f"m{i}".encode() for i in range(target, 200)]


async def test_compressed_entries_come_decompressed(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        await fill(client, topic, batched=True, compression=CompressionType.LZ4)
        await fill(client, topic, batched=False, compression=CompressionType.ZLib)
        reader = await create_entry_reader(client, topic, MessageId.earliest)
        expected = [f"m{i}".encode() for i in range(10)]
        assert records(await read_all(reader)) == expected + expected


async def test_refuses_read_next_and_partitioned_topics(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        await fill(client, topic, batched=False, count=1)
        reader = await create_entry_reader(client, topic, MessageId.earliest)
        with pytest.raises(InvalidConfiguration):
            await reader.read_next(100)
        await reader.close()
        partitioned = create_partitioned(running.http, f"entries-{uuid.uuid4().hex[:10]}", 2)
        with pytest.raises(InvalidConfiguration, match="partitioned"):
            await create_entry_reader(client, partitioned, MessageId.earliest)
        one = await create_entry_reader(client, f"{partitioned}-partition-1", MessageId.earliest)
        await one.close()


def test_blocking_entry_reader(running: BrokerThread) -> None:
    topic = new_topic()
    client = Client(running.url)
    try:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4)
        for i in range(8):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        reader = create_blocking_entry_reader(client, topic, MessageId.earliest)
        entries: list[RawEntry] = []
        while reader.has_message_available():
            entries += reader.read_entries(10, 5000)
        assert records(entries) == [f"m{i}".encode() for i in range(8)]
        assert reader.get_last_message_id() == entries[-1].message_id()
        reader.close()
    finally:
        client.close()
