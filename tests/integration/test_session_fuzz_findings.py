"""What the session fuzzer (``test_session_fuzz.py``) found, each reduced to the frames that
show it, over real sockets against an in-process broker.

1. A PRODUCER asking for topic epoch 2**64 - 1 was granted it; the next fencing producer then
   needed epoch 2**64, which no PRODUCER_SUCCESS can carry: every later producer of the topic
   failed (UnknownError), also after a restart (the epoch is persisted).
2. A SEND with a sequence id >= 2**63 made every later PRODUCER of that name fail: the dedup
   mark did not fit PRODUCER_SUCCESS.last_sequence_id (an int64, Java's long).
3. Fenced producers stayed referenced by the topic's access state forever, and through them
   their whole connections.
4. A SUBSCRIBE whose new cursor was being written when the topic was unloaded attached a
   subscription to the closed topic and answered SUCCESS: a consumer that never gets anything.

The fifth finding (an exclusive holder leaving an unloaded topic promoted the waiting producer
into the closed ledger) is shown at the topic level, in ``tests/broker/topics/test_topic_close.py``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.connection.core import ServerConnection
from broker.service import BrokerService
from broker.storage.files import FileLayer
from protocol import commands, pb
from protocol.enums import ProducerAccessMode
from protocol.errors import ServerError
from protocol.ids import MessageId, from_u64
from protocol.metadata import encode_entry
from protocol.topic_name import TopicName
from tests.broker_watch import LoopWatch
from tests.helpers import BrokerThread, broker_config, wait_until
from tests.raw_client import RawSession

pytestmark = pytest.mark.integration
T = pb.BaseCommand.Type


def new_topic() -> str:
    return f"persistent://public/default/finding-{uuid.uuid4().hex[:8]}"


def service_of(broker: BrokerThread) -> BrokerService:
    assert broker.broker is not None
    assert broker.broker.service is not None
    return broker.broker.service


def open_connections(broker: BrokerThread) -> int:
    async def count() -> int:
        return len(service_of(broker).connections)

    return broker.call(count)


def test_topic_epoch_beyond_int64_is_fenced_and_the_topic_stays_usable(
    broker: BrokerThread,
) -> None:
    topic = new_topic()
    fencing = ProducerAccessMode.ExclusiveWithFencing
    with RawSession(broker.port) as session:
        # Java reads the uint64 as a long: -1, older than any epoch.
        reply = session.request(
            commands.producer(
                topic, 1, 1, producer_name="a", access_mode=fencing, topic_epoch=2**64 - 1
            ),
            1,
        )
        assert reply.type == T.ERROR
        assert reply.command.error.error == ServerError.ProducerFenced
        for request, name in ((2, "b"), (3, "c")):  # each fences the one before
            reply = session.request(
                commands.producer(topic, request, request, producer_name=name, access_mode=fencing),
                request,
            )
            assert reply.type == T.PRODUCER_SUCCESS, reply.command
            assert reply.command.producer_success.topic_epoch == request - 2


def test_sequence_id_beyond_int63_is_reported_back_to_the_next_producer(
    broker: BrokerThread,
) -> None:
    topic, sequence_id = new_topic(), 2**63 + 5
    metadata = pb.MessageMetadata(producer_name="big", sequence_id=sequence_id, publish_time=1)
    with LoopWatch(broker) as watch, RawSession(broker.port) as session:
        reply = session.request(commands.producer(topic, 1, 1, producer_name="big"), 1)
        assert reply.type == T.PRODUCER_SUCCESS
        session.send(commands.send(1, sequence_id, encode_entry(metadata, b"x")))
        receipt = session.take(lambda frame: frame.type in (T.SEND_RECEIPT, T.SEND_ERROR))
        assert receipt.type == T.SEND_RECEIPT
        assert session.request(commands.close_producer(1, 2), 2).type == T.SUCCESS

        reply = session.request(commands.producer(topic, 3, 3, producer_name="big"), 3)
        assert reply.type == T.PRODUCER_SUCCESS, reply.command
        # The same 64 bits, read as Java's long.
        assert reply.command.producer_success.last_sequence_id == from_u64(sequence_id)
        assert not watch.problems()


def test_fenced_producers_do_not_keep_their_connections_reachable(broker: BrokerThread) -> None:
    topic = new_topic()
    takeovers = 10
    for index in range(takeovers):
        with RawSession(broker.port) as holder, RawSession(broker.port) as fencer:
            mode = (
                ProducerAccessMode.Exclusive
                if index == 0
                else ProducerAccessMode.ExclusiveWithFencing
            )
            reply = holder.request(
                commands.producer(topic, 1, 1, producer_name=f"h{index}", access_mode=mode), 1
            )
            assert reply.type == T.PRODUCER_SUCCESS
            fencing = ProducerAccessMode.ExclusiveWithFencing
            reply = fencer.request(
                commands.producer(topic, 1, 1, producer_name=f"f{index}", access_mode=fencing), 1
            )
            assert reply.type == T.PRODUCER_SUCCESS
            holder.take(lambda frame: frame.type == T.CLOSE_PRODUCER)
    wait_until(lambda: open_connections(broker) == 0)

    async def reachable_connections() -> int:
        gc.collect()
        return sum(isinstance(o, ServerConnection) for o in gc.get_objects())

    # Nothing was published, so no group commit holds a producer either: none may be left.
    assert broker.call(reachable_connections) == 0


class GatedCursorWrites(FileLayer):
    """Holds the rename that makes one cursor file durable until ``release``."""

    def __init__(self, file_name: str) -> None:
        self.file_name = file_name
        self.entered = threading.Event()
        self._gate = threading.Event()

    def release(self) -> None:
        self._gate.set()

    def replace(self, src: Path, dst: Path) -> None:
        if dst.name == self.file_name:
            self.entered.set()
            self._gate.wait(30)
        super().replace(src, dst)


@pytest.fixture
def gated_broker(tmp_path: Path) -> Iterator[tuple[BrokerThread, GatedCursorWrites]]:
    layer = GatedCursorWrites("late-sub.cursor")
    running = BrokerThread(broker_config(tmp_path / "data"), file_layer=layer).start()
    try:
        yield running, layer
    finally:
        layer.release()
        running.stop()


def loaded_topic(broker: BrokerThread, name: str) -> Any:
    async def find() -> Any:
        return service_of(broker).topics.get(name)

    return broker.call(find)


def test_subscribe_racing_an_unload_is_refused_not_left_without_messages(
    gated_broker: tuple[BrokerThread, GatedCursorWrites],
) -> None:
    broker, layer = gated_broker
    topic = new_topic()
    with RawSession(broker.port) as producer, RawSession(broker.port) as consumer:
        assert producer.request(commands.producer(topic, 1, 1, producer_name="p"), 1).type == (
            T.PRODUCER_SUCCESS
        )
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
        producer.send(commands.send(1, 1, encode_entry(metadata, b"hello")))
        producer.take(lambda frame: frame.type == T.SEND_RECEIPT)
        old = loaded_topic(broker, topic)

        shared = pb.CommandSubscribe.Shared
        earliest = pb.CommandSubscribe.Earliest
        consumer.send(
            commands.subscribe(topic, "late-sub", 1, 1, shared, initial_position=earliest)
        )
        assert layer.entered.wait(10)  # the new cursor's file is being written
        assert broker.loop is not None
        unload = asyncio.run_coroutine_threadsafe(
            service_of(broker).unload_topic(TopicName.parse(topic)), broker.loop
        )
        wait_until(lambda: old.closed)  # closing; it waits for the cursor write to finish
        layer.release()
        unload.result(10)

        reply = consumer.reply_to(1)
        assert reply.type == T.ERROR, reply.command
        assert reply.command.error.error == ServerError.ServiceNotReady
        # The client's retry finds the reloaded topic and its message.
        reply = consumer.request(
            commands.subscribe(topic, "late-sub", 2, 2, shared, initial_position=earliest), 2
        )
        assert reply.type == T.SUCCESS
        consumer.send(commands.flow(2, 10))
        message = consumer.take(lambda frame: frame.type == T.MESSAGE)
        assert message.entry is not None
        assert message.entry.endswith(b"hello")


def producers_and_consumers_of(broker: BrokerThread, topic: str) -> tuple[int, int]:
    async def count() -> tuple[int, int]:
        loaded = service_of(broker).topics.get(topic)
        if loaded is None:
            return 0, 0
        consumers = sum(len(sub.consumers) for sub in loaded.subscriptions.values())
        return len(loaded.producers.producers), consumers

    return broker.call(count)


def test_a_reused_producer_id_in_flight_leaves_no_producer_behind(broker: BrokerThread) -> None:
    """Two PRODUCERs for one id, pipelined, for a topic still loading: Java refuses the second
    ("Producer is already present on the connection"); both used to be registered, and the
    connection's close removed only the one it still knew."""
    topic = new_topic()
    with RawSession(broker.port) as session:
        session.send(
            commands.producer(topic, 7, 1, producer_name="first")
            + commands.producer(topic, 7, 2, producer_name="second")
        )
        replies = {request: session.reply_to(request) for request in (1, 2)}
        assert replies[1].type == T.PRODUCER_SUCCESS
        assert replies[2].type == T.ERROR
        assert replies[2].command.error.error == ServerError.ServiceNotReady
    wait_until(lambda: open_connections(broker) == 0)
    assert producers_and_consumers_of(broker, topic) == (0, 0)


def test_a_reused_consumer_id_in_flight_leaves_no_consumer_behind(broker: BrokerThread) -> None:
    topic = new_topic()
    exclusive = pb.CommandSubscribe.Exclusive
    with RawSession(broker.port) as session:
        session.send(
            commands.subscribe(topic, "a", 7, 1, exclusive)
            + commands.subscribe(topic, "b", 7, 2, exclusive)
        )
        replies = {request: session.reply_to(request) for request in (1, 2)}
        assert replies[1].type == T.SUCCESS
        assert replies[2].type == T.ERROR
        assert replies[2].command.error.error == ServerError.ServiceNotReady
    wait_until(lambda: open_connections(broker) == 0)
    assert producers_and_consumers_of(broker, topic) == (0, 0)
    # The subscription is free again for a new exclusive consumer.
    with RawSession(broker.port) as session:
        assert session.request(commands.subscribe(topic, "a", 1, 3, exclusive), 3).type == T.SUCCESS


def test_unload_waits_for_a_cursor_write_whose_request_was_cancelled(
    gated_broker: tuple[BrokerThread, GatedCursorWrites],
) -> None:
    """A SUBSCRIBE writing its new cursor when its connection closes: the request is
    cancelled, but the disk thread goes on writing. The unload must wait for it, or the write
    lands after the ledger was closed, in a folder a reloaded instance is recovering (a reload
    failed on a cursor temp file vanishing under it)."""
    broker, layer = gated_broker
    topic = new_topic()
    with LoopWatch(broker) as watch:
        with RawSession(broker.port) as consumer:
            shared = pb.CommandSubscribe.Shared
            consumer.send(commands.subscribe(topic, "late-sub", 1, 1, shared))
            assert layer.entered.wait(10)
        wait_until(lambda: open_connections(broker) == 0)  # its request task is cancelled
        old = loaded_topic(broker, topic)
        assert broker.loop is not None
        unload = asyncio.run_coroutine_threadsafe(
            service_of(broker).unload_topic(TopicName.parse(topic)), broker.loop
        )
        wait_until(lambda: old.closed)
        with pytest.raises(TimeoutError):
            unload.result(1.0)  # held: the cursor file is still being written
        layer.release()
        unload.result(10)
        # The reload finds the subscription whose cursor was written before the close.
        with RawSession(broker.port) as consumer:
            reply = consumer.request(commands.subscribe(topic, "late-sub", 1, 2, shared), 2)
            assert reply.type == T.SUCCESS
        assert not watch.problems(), watch.problems()


def test_cumulative_ack_of_an_entry_the_ledger_does_not_have_is_ignored(
    broker: BrokerThread,
) -> None:
    """A seek to 0:0 on an empty topic (whose first ledger is 1) moved the mark-delete below
    the ledger; a cumulative ACK of 0:0 then reached the cursor, whose refusal escaped
    data_received ("Fatal error on transport") and killed the connection. Java ignores an ack
    it cannot apply."""
    topic = new_topic()
    exclusive = pb.CommandSubscribe.Exclusive
    with LoopWatch(broker) as watch, RawSession(broker.port) as consumer:
        assert consumer.request(commands.subscribe(topic, "s", 1, 1, exclusive), 1).type == (
            T.SUCCESS
        )
        reply = consumer.request(commands.seek(1, 2, message_id=MessageId(0, 0)), 2)
        assert reply.type == T.SUCCESS
        consumer.take(lambda frame: frame.type == T.CLOSE_CONSUMER)  # the seek's disconnect
        assert consumer.request(commands.subscribe(topic, "s", 1, 3, exclusive), 3).type == (
            T.SUCCESS
        )
        cumulative = pb.CommandAck.Cumulative
        reply = consumer.request(
            commands.ack(1, [MessageId(0, 0)], ack_type=cumulative, request_id=4), 4
        )
        assert reply.type == T.ACK_RESPONSE
        assert consumer.is_usable()
        assert not watch.problems(), watch.problems()


class GatedMetadataWrites(FileLayer):
    """Once armed, holds the next rename of ``ledger.meta`` until ``release``."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self._gate = threading.Event()

    def release(self) -> None:
        self._gate.set()

    def replace(self, src: Path, dst: Path) -> None:
        if self.armed and dst.name == "ledger.meta":
            self.armed = False
            self.entered.set()
            self._gate.wait(30)
        super().replace(src, dst)


def test_unload_waits_for_an_epoch_write_whose_grant_was_cancelled(tmp_path: Path) -> None:
    """An exclusive grant writing the topic epoch when its connection closes: the grant is
    cancelled, the write goes on. The unload must wait for it, or it lands in the folder while
    the reloaded topic recovers it (a reload failed on a vanished ``ledger.meta`` temp file)."""
    layer = GatedMetadataWrites()
    broker = BrokerThread(broker_config(tmp_path / "data"), file_layer=layer).start()
    topic = new_topic()
    try:
        with LoopWatch(broker) as watch:
            with RawSession(broker.port) as first:  # loads the topic (its own metadata writes)
                reply = first.request(commands.producer(topic, 1, 1, producer_name="s"), 1)
                assert reply.type == T.PRODUCER_SUCCESS
            old = loaded_topic(broker, topic)
            layer.armed = True
            with RawSession(broker.port) as holder:
                exclusive = ProducerAccessMode.Exclusive
                holder.send(
                    commands.producer(topic, 1, 1, producer_name="x", access_mode=exclusive)
                )
                assert layer.entered.wait(10)  # the epoch is being written
            wait_until(lambda: open_connections(broker) == 0)  # the grant is cancelled
            assert broker.loop is not None
            unload = asyncio.run_coroutine_threadsafe(
                service_of(broker).unload_topic(TopicName.parse(topic)), broker.loop
            )
            wait_until(lambda: old.closed)
            with pytest.raises(TimeoutError):
                unload.result(1.0)  # held: the epoch write is still running
            layer.release()
            unload.result(10)
            with RawSession(broker.port) as again:  # the reload finds a consistent folder
                reply = again.request(commands.producer(topic, 1, 2, producer_name="y"), 2)
                assert reply.type == T.PRODUCER_SUCCESS
            assert not watch.problems(), watch.problems()
    finally:
        layer.release()
        broker.stop()
