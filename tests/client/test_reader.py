"""Our reader against a real Magnetar broker: start at earliest, latest or an id (inclusive or
exclusive, inside batches too), ``has_message_available``, seek, and the blocking facade."""

from __future__ import annotations

import uuid

import pytest

from client import AsyncClient, Client, MessageId
from client.errors import Timeout
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration]


def new_topic() -> str:
    return f"persistent://public/default/read-{uuid.uuid4().hex[:10]}"


async def fill(client: AsyncClient, topic: str, batched: bool) -> list[MessageId]:
    producer = await client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=5
    )
    futures = [await producer.send_async(f"m{i}".encode()) for i in range(10)]
    await producer.flush()
    await producer.close()
    return [future.result() for future in futures]


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
async def test_reader_start_positions(
    running: BrokerThread, batched: bool, inclusive: bool
) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        ids = await fill(client, topic, batched)
        assert (ids[3].batch_index() >= 0) == batched
        cases = {
            MessageId.earliest: 0,
            ids[3]: 3 if inclusive else 4,
            ids[9]: 9 if inclusive else 10,
        }
        for start, first in cases.items():
            reader = await client.create_reader(topic, start, start_message_id_inclusive=inclusive)
            got = []
            while await reader.has_message_available():
                got.append((await reader.read_next(5000)).data())
            assert got == [f"m{i}".encode() for i in range(first, 10)]
            await reader.close()


async def test_reader_from_latest_sees_only_new_messages(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        await fill(client, topic, batched=False)
        reader = await client.create_reader(topic, MessageId.latest)
        assert not await reader.has_message_available()
        with pytest.raises(Timeout):
            await reader.read_next(200)
        producer = await client.create_producer(topic)
        await producer.send(b"new")
        assert await reader.has_message_available()
        assert (await reader.read_next(5000)).data() == b"new"
        assert not await reader.has_message_available()


async def test_reader_seek_and_async_for(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        ids = await fill(client, topic, batched=False)
        reader = await client.create_reader(topic, MessageId.earliest)
        await reader.seek(ids[6])
        got = []
        async for message in reader:
            got.append(message.data())
            if len(got) == 3:
                break
        assert got == [b"m7", b"m8", b"m9"]  # exclusive reader: seek filters the start


def test_blocking_consumer_and_reader(running: BrokerThread) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        sent = producer.send(b"hello")
        message = consumer.receive(5000)
        assert message.data() == b"hello"
        assert message.message_id() == sent
        consumer.acknowledge(message)
        with pytest.raises(Timeout):
            consumer.receive(100)
        reader = client.create_reader(topic, MessageId.earliest, start_message_id_inclusive=True)
        assert reader.has_message_available()
        assert reader.read_next(5000).data() == b"hello"
        assert not reader.has_message_available()
        reader.close()
        consumer.close()
