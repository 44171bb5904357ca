"""``send_rows``, the bulk path, against a real broker, read back with the official client.

Rows come back as the messages they describe (payload, key, properties, event time, sequence
id), in order; entries are cut by count and bytes and never exceed the broker's limit; a lost
receipt and a cut connection resend the same entries, which dedup stores once; a replay of the
same rows is all duplicates.
"""

from __future__ import annotations

import uuid

import pulsar
import pytest

from client import AsyncClient, CompressionType
from client.errors import InvalidMessage, MessageTooBig, OperationNotSupported
from client.message_id import MessageId
from client.producer import AsyncProducer
from client.producer.bulk import Rows, build_entries
from client.sync import Client
from protocol import decode_entry, pb
from tests.client.producer.conftest import MAX_MESSAGE_SIZE
from tests.helpers import BrokerThread, read_all_messages, wait_until
from tests.integration.test_partitioned_topics import create_partitioned
from tests.tcp_proxy import Direction, TcpProxy

pytestmark = [pytest.mark.integration]


def new_topic() -> str:
    return f"persistent://public/default/bulk-{uuid.uuid4().hex[:10]}"


def stored_ids(url: str, topic: str) -> list[int]:
    """The sequence ids stored on ``topic`` (our reader: the official one does not show them)."""
    with Client(url) as client:
        reader = client.create_reader(topic, MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).sequence_id())
        reader.close()
        return out


def test_rows_come_back_as_their_messages_in_entries_of_max_messages(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    count = 2500
    payloads = [None if i == 7 else b"v%d" % i for i in range(count)]
    keys = [None if i % 3 else f"k{i}" for i in range(count)]
    properties = [{"n": str(i)} if i % 2 else None for i in range(count)]
    events = [1_700_000_000_000 + i if i % 5 else None for i in range(count)]
    with Client(running.url) as client:
        producer = client.create_producer(topic, producer_name="bulk-a")
        future = producer.send_rows(
            payloads,
            1000,
            keys=keys,
            properties=properties,
            event_times=events,
            max_messages=1000,
        )
        assert future is not None
        receipt = future.result(30)
        assert receipt.rows == (1000, 1000, 500)
        assert receipt.stored_rows == count
        assert receipt.duplicate_rows == 0
        assert [m.entry_id() for m in receipt.message_ids] == [0, 1, 2]
        assert producer.last_sequence_id() == 1000 + count - 1
        producer.close()
    got = read_all_messages(official, topic)
    assert [m.data() for m in got] == [p or b"" for p in payloads]
    assert stored_ids(running.url, topic) == list(range(1000, 1000 + count))
    assert [m.partition_key() or None for m in got] == keys
    assert [m.properties() or None for m in got] == properties
    assert [m.event_timestamp() or None for m in got] == events
    assert {m.producer_name() for m in got} == {"bulk-a"}


def test_a_replay_of_the_same_rows_is_all_duplicates(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    payloads = [b"x%d" % i for i in range(300)]
    with Client(running.url) as client:
        for attempt in range(2):
            producer = client.create_producer(topic, producer_name="bulk-replay")
            future = producer.send_rows(payloads, 5 << 32, max_messages=128)
            assert future is not None
            receipt = future.result(30)
            assert receipt.rows == (128, 128, 44)
            assert receipt.duplicate_rows == (300 if attempt else 0)
            assert producer.last_sequence_id() == (5 << 32) + 299
            producer.close()
    assert [m.data() for m in read_all_messages(official, topic)] == payloads


def test_lost_receipts_and_a_cut_connection_resend_the_same_entries(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    payloads = [b"row-%04d" % i for i in range(1000)]
    with TcpProxy(("127.0.0.1", running.port)) as proxy, Client(proxy.url) as client:
        producer = client.create_producer(topic, producer_name="bulk-cut")

        def lose_receipts(direction: Direction, frame: object) -> bool:
            command = frame.command  # type: ignore[attr-defined]
            return bool(
                direction is Direction.TO_CLIENT and command.type == pb.BaseCommand.SEND_RECEIPT
            )

        proxy.drop_frames(lose_receipts)
        future = producer.send_rows(payloads, 0, max_messages=100)
        assert future is not None
        # Every entry stored, every receipt lost: the producer cannot know what was stored.
        wait_until(lambda: len(proxy.dropped_of(pb.BaseCommand.SEND_RECEIPT)) == 10)
        proxy.drop_frames(None)
        assert proxy.cut() >= 1
        receipt = future.result(30)  # resent on a new connection: each entry a duplicate
        assert receipt.rows == (100,) * 10
        assert receipt.duplicate_rows == 1000
        assert all(m == MessageId(-1, -1, -1) for m in receipt.message_ids)
        assert producer.last_sequence_id() == 999
        producer.close()
    got = read_all_messages(official, topic)
    assert [m.data() for m in got] == payloads
    assert stored_ids(running.url, topic) == list(range(1000))


def test_rows_follow_what_send_async_queued_in_order(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=60_000
        )
        producer.send_async(b"a", None)  # held in the batch container
        future = producer.send_rows([b"b", b"c"], 10)
        assert future is not None
        future.result(30)
        last = producer.send_async(b"d", None)  # automatic id: after the rows'
        producer.flush()
        assert last is not None
        assert producer.last_sequence_id() == 12
        producer.close()
    got = read_all_messages(official, topic)
    assert [m.data() for m in got] == [b"a", b"b", b"c", b"d"]
    assert stored_ids(running.url, topic) == [0, 10, 11, 12]


def test_entries_are_compressed_and_never_over_the_brokers_limit(
    running: BrokerThread, official: pulsar.Client
) -> None:
    topic = new_topic()
    payloads = [bytes([i % 256]) * 100 for i in range(3000)]
    with Client(running.url) as client:
        producer = client.create_producer(topic, compression_type=CompressionType.LZ4)
        context = producer.async_producer.entry_context()  # type: ignore[union-attr]
        entries = build_entries(
            context, Rows(payloads), max_messages=10_000, max_bytes=1 << 20, publish_time=1
        )
        assert len(entries) > 1
        assert sum(e.num_messages for e in entries) == 3000
        for built in entries:
            assert len(built.entry) - 4 <= MAX_MESSAGE_SIZE
            metadata, _ = decode_entry(built.entry)
            assert metadata.compression == pb.LZ4
            assert metadata.num_messages_in_batch == built.num_messages
            assert metadata.highest_sequence_id == built.highest_sequence_id
        future = producer.send_rows(payloads, 0, max_messages=10_000, max_bytes=1 << 20)
        assert future is not None
        assert future.result(30).rows == tuple(e.num_messages for e in entries)
        producer.close()
    assert [m.data() for m in read_all_messages(official, topic)] == payloads


def test_a_row_over_the_limit_sends_nothing(running: BrokerThread, official: pulsar.Client) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        producer = client.create_producer(topic)
        with pytest.raises(MessageTooBig):
            producer.send_rows([b"small", bytes(MAX_MESSAGE_SIZE + 1)], 0)
        assert producer.last_sequence_id() == -1
        future = producer.send_rows([b"after"], 0)
        assert future is not None
        future.result(30)
        producer.close()
    assert [m.data() for m in read_all_messages(official, topic)] == [b"after"]


def test_the_frames_carry_the_entries_ids(running: BrokerThread) -> None:
    topic = new_topic()
    seen: list[pb.CommandSend] = []

    def watch(direction: Direction, frame: object) -> bool:
        command = frame.command  # type: ignore[attr-defined]
        if direction is Direction.TO_BROKER and command.type == pb.BaseCommand.SEND:
            seen.append(command.send)
        return False

    with TcpProxy(("127.0.0.1", running.port)) as proxy, Client(proxy.url) as client:
        proxy.drop_frames(watch)
        producer = client.create_producer(topic)
        future = producer.send_rows([b"r"] * 5, 0, sequence_ids=[3, 4, 9, 20, 21], max_messages=3)
        assert future is not None
        future.result(30)
        producer.close()
    assert [(s.sequence_id, s.highest_sequence_id, s.num_messages) for s in seen] == [
        (3, 9, 3),
        (20, 21, 2),
    ]


async def test_the_asyncio_producer_sends_rows(running: BrokerThread) -> None:
    client = AsyncClient(running.url)
    try:
        producer = await client.create_producer(new_topic(), producer_name="bulk-async")
        assert isinstance(producer, AsyncProducer)
        future = await producer.send_rows([b"a", b"b", b"c"], 7, max_messages=2)
        receipt = await future
        assert receipt.rows == (2, 1)
        assert producer.last_sequence_id() == 9
        with pytest.raises(ValueError, match="first_sequence_id"):
            await producer.send_rows([b"a"], -1)
        assert (await (await producer.send_rows([], 0))).rows == ()
    finally:
        await client.close()


def test_a_partitioned_producer_refuses(running: BrokerThread) -> None:
    topic = create_partitioned(running.http, f"bulk-parts-{uuid.uuid4().hex[:10]}", 2)
    with Client(running.url) as client:
        producer = client.create_producer(topic)
        with pytest.raises(OperationNotSupported):
            producer.send_rows([b"x"], 0)
        producer.close()


def test_without_ids_rows_take_the_producers_next(running: BrokerThread) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        producer = client.create_producer(topic, batching_enabled=True)
        producer.send_async(b"a", None)
        first = producer.send_rows([b"b", b"c"], max_messages=1)
        producer.send_async(b"d", None)
        second = producer.send_rows([b"e"])
        assert first is not None
        assert second is not None
        assert first.result(30).rows == (1, 1)
        assert second.result(30).rows == (1,)
        producer.flush()
        assert producer.last_sequence_id() == 4
        bad = producer.send_rows([b"f", "not bytes"])  # type: ignore[list-item]
        assert bad is not None
        with pytest.raises(InvalidMessage, match="payload must be bytes"):
            bad.result(30)
        producer.close()
    assert stored_ids(running.url, topic) == [0, 1, 2, 3, 4]
