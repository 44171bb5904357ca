"""PIP-54 B1-B5 with ack receipts on: a raw-protocol consumer that puts a request id on every ACK.

pulsar-client 3.13 does not expose the C++ ``AckReceiptEnabled`` option, so ``RawConsumer``
speaks the binary protocol itself (``protocol.commands`` + ``FrameDecoder`` over a blocking
socket) and behaves like the C++ core with ``batch_index_ack_enabled``: it acks single messages
of a batch with the batch's current bitset (a fresh all-set bitset per delivery, as the client's
per-message acker is), skips indexes the broker's ``ack_set`` marks acknowledged, and waits for
the ACK_RESPONSE of every ACK. Messages are produced by the official client with batching on.

A receipt means the broker has applied the ack, so the broker's counters can be read right after
without polling.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from protocol import FrameDecoder, MessageId, commands, parse_entry_metadata, pb
from protocol.enums import AckType, SubType
from protocol.errors import ServerError
from protocol.framing import Frame
from tests.helpers import BrokerThread, broker_config
from tests.integration.test_batch_index_ack import (
    batching_producer,
    entry_of,
    make_client,
    position_text,
    publish,
    sub_stats,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat]

T = pb.BaseCommand.Type
_U64 = 1 << 64
Entry = tuple[int, int]


def words_for(size: int, unacked: set[int]) -> list[int]:
    """Java BitSet words (signed int64) with the ``unacked`` bits set."""
    words = [0] * ((size + 63) // 64)
    for index in unacked:
        words[index // 64] |= 1 << (index % 64)
    return [w - _U64 if w >= 1 << 63 else w for w in words]


@dataclass
class Delivery:
    entry: Entry
    batch_size: int
    indexes: set[int]
    ack_set: list[int]
    redelivery_count: int


class RawConsumer:
    """One consumer on its own connection; every request waits for its reply."""

    def __init__(self, port: int, topic: str, sub_type: SubType, name: str) -> None:
        self.topic = topic
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.decoder = FrameDecoder()
        self.inbox: list[Frame] = []
        self.next_request = 0
        self.consumer_id = 1
        self._send(commands.connect("raw-batch-index-ack", protocol_version=20))
        self._wait(lambda f: f.type == T.CONNECTED)
        request = self._request_id()
        self._send(
            commands.subscribe(
                topic,
                "sub",
                self.consumer_id,
                request,
                sub_type,
                consumer_name=name,
                initial_position=pb.CommandSubscribe.Earliest,
            )
        )
        reply = self._wait(lambda f: f.type in (T.SUCCESS, T.ERROR))
        assert reply.type == T.SUCCESS, reply.command

    def _request_id(self) -> int:
        self.next_request += 1
        return self.next_request

    def _send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_more(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return False
        assert data, "broker closed the connection"
        self.decoder.feed(data)
        for frame in self.decoder:
            if frame.type == T.PING:
                self._send(commands.pong())
            else:
                self.inbox.append(frame)
        return True

    def _wait(self, match: object, timeout: float = 10.0) -> Frame:
        found = self._poll(match, timeout)
        assert found is not None, "no reply from the broker"
        return found

    def _poll(self, match: object, timeout: float) -> Frame | None:
        assert callable(match)
        while True:
            for frame in self.inbox:
                if match(frame):
                    self.inbox.remove(frame)
                    return frame
            if not self._read_more(timeout):
                return None

    # -- consumer API -------------------------------------------------------------------

    def flow(self, permits: int) -> None:
        self._send(commands.flow(self.consumer_id, permits))

    def receive(self, timeout: float = 10.0) -> Delivery | None:
        frame = self._poll(lambda f: f.type == T.MESSAGE, timeout)
        if frame is None:
            return None
        message = frame.command.message
        assert frame.entry is not None
        size = parse_entry_metadata(frame.entry).num_messages
        ack_set = list(message.ack_set)
        indexes = {
            i
            for i in range(size)
            if not ack_set or (i // 64 < len(ack_set) and (ack_set[i // 64] >> (i % 64)) & 1)
        }
        return Delivery(
            (message.message_id.ledgerId, message.message_id.entryId),
            size,
            indexes,
            ack_set,
            message.redelivery_count,
        )

    def drain(self, quiet: float = 0.5) -> list[Delivery]:
        received = []
        while (delivery := self.receive(quiet)) is not None:
            received.append(delivery)
        return received

    def ack(
        self, entry: Entry, ack_set: list[int] | None = None, *, cumulative: bool = False
    ) -> tuple[int, str] | None:
        """ACK with a request id; returns the ACK_RESPONSE error (code, message), or None."""
        request = self._request_id()
        message_id = MessageId(entry[0], entry[1])
        item = message_id if ack_set is None else (message_id, ack_set)
        ack_type = AckType.Cumulative if cumulative else AckType.Individual
        self._send(commands.ack(self.consumer_id, [item], ack_type=ack_type, request_id=request))
        reply = self._wait(
            lambda f: f.type == T.ACK_RESPONSE and f.command.ackResponse.request_id == request
        )
        response = reply.command.ackResponse
        return (response.error, response.message) if response.HasField("error") else None

    def ack_indexes(self, delivery: Delivery, indexes: list[int]) -> None:
        """Ack ``indexes`` one by one with the delivery's running bitset, as the client does."""
        still = set(range(delivery.batch_size))
        for index in indexes:
            still.discard(index)
            words = None if not still else words_for(delivery.batch_size, still)
            assert self.ack(delivery.entry, words) is None

    def redeliver(self, entries: list[Entry] | None = None) -> None:
        ids = [MessageId(*e) for e in entries or []]
        self._send(commands.redeliver_unacknowledged_messages(self.consumer_id, ids))

    def close(self) -> None:
        request = self._request_id()
        self._send(commands.close_consumer(self.consumer_id, request))
        self._wait(lambda f: f.type == T.SUCCESS and f.command.success.request_id == request)
        self.sock.close()


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = make_client(broker.url)
    try:
        yield c
    finally:
        c.close()


def new_topic() -> str:
    return f"persistent://public/default/biar-{uuid.uuid4().hex[:10]}"


def locations(ids: list[pulsar.MessageId]) -> dict[tuple[Entry, int], int]:
    """(entry, batch index) -> the value sent there."""
    return {(entry_of(mid), mid.batch_index()): value for value, mid in enumerate(ids)}


def values_of(deliveries: list[Delivery], where: dict[tuple[Entry, int], int]) -> list[int]:
    return sorted(where[(d.entry, i)] for d in deliveries for i in d.indexes)


def consumer_counters(broker: BrokerThread, topic: str) -> list[tuple[int, int]]:
    consumers = sub_stats(broker.http, topic)["consumers"]
    return [(c["availablePermits"], c["unackedMessages"]) for c in consumers]


SUB_TYPES = [SubType.Shared, SubType.Exclusive]


@pytest.mark.parametrize("sub_type", SUB_TYPES, ids=["shared", "exclusive"])
def test_b1_with_receipts(broker: BrokerThread, client: pulsar.Client, sub_type: SubType) -> None:
    topic = new_topic()
    consumer = RawConsumer(broker.port, topic, sub_type, "b1")
    try:
        consumer.flow(1000)
        producer = batching_producer(client, topic)
        ids = publish(producer, range(100))
        where = locations(ids)
        first = consumer.drain()
        assert values_of(first, where) == list(range(100))
        for delivery in first:
            even = [i for i in sorted(delivery.indexes) if where[(delivery.entry, i)] % 2 == 0]
            consumer.ack_indexes(delivery, even)
        # Negative acks: by id on Shared; the client turns them into "redeliver all" otherwise.
        consumer.redeliver([d.entry for d in first] if sub_type == SubType.Shared else None)
        again = consumer.drain()
        assert values_of(again, where) == list(range(1, 100, 2))
        assert all(d.ack_set and d.redelivery_count == 1 for d in again)
        for delivery in again:
            consumer.ack_indexes(delivery, sorted(delivery.indexes))
        consumer.redeliver()
        assert consumer.drain() == []
        stats = sub_stats(broker.http, topic)
        assert stats["markDeletePosition"] == position_text(max(ids, key=entry_of))
        assert stats["msgBacklog"] == 0
        assert stats["unackedMessages"] == 0
        more = locations(publish(producer, range(100, 150)))
        assert len(values_of(consumer.drain(), {**where, **more})) == 50
    finally:
        consumer.close()


def test_b2_with_receipts(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = RawConsumer(broker.port, topic, SubType.Exclusive, "b2")
    consumer.flow(1000)
    ids = publish(batching_producer(client, topic), range(100))
    where = locations(ids)
    assert values_of(consumer.drain(), where) == list(range(100))
    through = ids[49].batch_index()
    size = max(mid.batch_index() for mid in ids if entry_of(mid) == entry_of(ids[49])) + 1
    words = None if through == size - 1 else words_for(size, set(range(through + 1, size)))
    assert consumer.ack(entry_of(ids[49]), words, cumulative=True) is None
    assert consumer_counters(broker, topic) == [(1000 - 100, 50)]
    consumer.close()
    consumer = RawConsumer(broker.port, topic, SubType.Exclusive, "b2-again")
    try:
        consumer.flow(1000)
        assert values_of(consumer.drain(), where) == list(range(50, 100))
    finally:
        consumer.close()


def test_b3_with_receipts(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = RawConsumer(broker.port, topic, SubType.Exclusive, "b3")
    try:
        consumer.flow(1000)
        ids = publish(batching_producer(client, topic, batch=10), range(100))
        consumer.drain()
        for mid in ids:
            size = sum(1 for other in ids if entry_of(other) == entry_of(mid))
            rest = set(range(mid.batch_index() + 1, size))
            words = words_for(size, rest) if rest else None
            assert consumer.ack(entry_of(mid), words, cumulative=True) is None
        stats = sub_stats(broker.http, topic)
        assert stats["markDeletePosition"] == position_text(max(ids, key=entry_of))
        assert stats["msgBacklog"] == 0
    finally:
        consumer.close()


@pytest.mark.parametrize("remaining", [3, 1])
@pytest.mark.parametrize("sub_type", SUB_TYPES, ids=["shared", "exclusive"])
def test_b4_with_receipts(
    broker: BrokerThread, client: pulsar.Client, sub_type: SubType, remaining: int
) -> None:
    topic = new_topic()
    first = RawConsumer(broker.port, topic, sub_type, "first")
    first.flow(1)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=10
    )
    publish(producer, range(10))
    delivery = first.receive()
    assert delivery is not None
    assert delivery.indexes == set(range(10))
    first.flow(10)  # the client gives back one permit per message it processed
    first.ack_indexes(delivery, list(range(10 - remaining)))
    first.close()

    replacement = RawConsumer(broker.port, topic, sub_type, "replacement")
    try:
        replacement.flow(1)
        again = replacement.receive()
        assert again is not None
        assert again.indexes == set(range(10 - remaining, 10))
        assert replacement.drain() == []
        # The C++ core gives back a permit for each skipped index as well as each delivered one.
        replacement.flow(10)
        replacement.ack_indexes(again, sorted(again.indexes))
        assert consumer_counters(broker, topic) == [(1, 0)]
        publish(producer, range(10, 11))
        following = replacement.receive()
        assert following is not None
        assert following.entry != again.entry
    finally:
        replacement.close()


def test_cumulative_ack_on_shared_gets_an_error_receipt(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = new_topic()
    consumer = RawConsumer(broker.port, topic, SubType.Shared, "shared")
    try:
        consumer.flow(10)
        ids = publish(batching_producer(client, topic), range(3))
        error = consumer.ack(entry_of(ids[0]), cumulative=True)
        assert error is not None
        assert error[0] == ServerError.NotAllowedError
    finally:
        consumer.close()


@pytest.fixture
def flag_off_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    running = BrokerThread(
        broker_config(tmp_path / "data", acknowledgment_at_batch_index_level_enabled=False)
    ).start()
    try:
        yield running
    finally:
        running.stop()


def test_b5_shared_with_receipts(flag_off_broker: BrokerThread) -> None:
    """Flag off: partial acks are answered (no error) but acknowledge nothing; the batch comes
    back whole, without an ack_set."""
    client = make_client(flag_off_broker.url)
    consumer = RawConsumer(flag_off_broker.port, new_topic(), SubType.Shared, "b5")
    try:
        consumer.flow(1000)
        ids = publish(batching_producer(client, consumer.topic), range(100))
        where = locations(ids)
        first = consumer.drain()
        for delivery in first:
            even = [i for i in sorted(delivery.indexes) if where[(delivery.entry, i)] % 2 == 0]
            consumer.ack_indexes(delivery, even)
        consumer.redeliver()
        again = consumer.drain()
        assert values_of(again, where) == list(range(100))
        assert all(not d.ack_set for d in again)
    finally:
        consumer.close()
        client.close()


def test_b5_exclusive_with_receipts(flag_off_broker: BrokerThread) -> None:
    client = make_client(flag_off_broker.url)
    topic = new_topic()
    consumer = RawConsumer(flag_off_broker.port, topic, SubType.Exclusive, "b5x")
    try:
        consumer.flow(1000)
        ids = publish(batching_producer(client, topic), range(100))
        where = locations(ids)
        consumer.drain()
        size = sum(1 for mid in ids if entry_of(mid) == entry_of(ids[49]))
        through = ids[49].batch_index()
        words = words_for(size, set(range(through + 1, size)))
        assert consumer.ack(entry_of(ids[49]), words, cumulative=True) is None
        consumer.close()
        consumer = RawConsumer(flag_off_broker.port, topic, SubType.Exclusive, "b5x-again")
        consumer.flow(1000)
        expected = [v for v in range(100) if entry_of(ids[v]) >= entry_of(ids[49])]
        assert values_of(consumer.drain(), where) == expected
    finally:
        consumer.close()
        client.close()
