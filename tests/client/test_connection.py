"""``client.connection``: handshake, requests, routing, keep-alive, coalescing, loss, close.

Driven against ``StubBroker`` (a real socket on the test's loop) so every byte is a real frame.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from client.config import ClientConfig
from client.connection import Connection
from client.errors import (
    AuthenticationError,
    Disconnected,
    ProducerBusy,
    Timeout,
    TopicNotFound,
)
from client.service_url import Address
from protocol import Frame, MessageId, ServerError, commands, pb
from tests.client.stub_broker import StubBroker, StubConnection

T = pb.BaseCommand
FAST = ClientConfig(operation_timeout=2, connection_timeout=2, keep_alive_interval=30)


async def open_connection(broker: StubBroker, config: ClientConfig = FAST) -> Connection:
    address = Address("127.0.0.1", broker.port)
    return await Connection.open(address, address, config)


class RecordingHandler:
    """Producer and consumer handler that records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        self.calls.append(("receipt", receipt.sequence_id))

    def on_send_error(self, error: pb.CommandSendError) -> None:
        self.calls.append(("send_error", error.error))

    def on_closed_by_broker(self, connection: Connection) -> None:
        self.calls.append(("closed_by_broker", connection))

    def on_connection_lost(self, connection: Connection) -> None:
        self.calls.append(("lost", connection.close_reason))

    def on_message(self, frame: Frame) -> None:
        self.calls.append(("message", frame.entry))

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.calls.append(("active", is_active))

    def on_reached_end_of_topic(self) -> None:
        self.calls.append(("end", None))


async def test_handshake_sends_connect_and_keeps_the_brokers_limits() -> None:
    async with StubBroker(max_message_size=1234) as broker:
        connection = await open_connection(broker)
        connect = broker.of_type(T.CONNECT)[0].command.connect
        assert connect.protocol_version == commands.PROTOCOL_VERSION
        assert connect.client_version.startswith("Magnetar-Python")
        assert not connect.HasField("proxy_to_broker_url")
        assert connection.max_message_size == 1234
        assert connection.protocol_version == commands.PROTOCOL_VERSION
        assert connection.server_version == "stub"
        assert connection.is_ready
        await connection.close()


async def test_without_max_message_size_the_default_applies() -> None:
    async with StubBroker(max_message_size=None) as broker:
        connection = await open_connection(broker)
        assert connection.max_message_size == commands.DEFAULT_MAX_MESSAGE_SIZE
        await connection.close()


async def test_a_proxied_connection_names_the_logical_broker() -> None:
    async with StubBroker() as broker:
        physical = Address("127.0.0.1", broker.port)
        connection = await Connection.open(Address("owner", 6651), physical, FAST)
        connect = broker.of_type(T.CONNECT)[0].command.connect
        assert connect.proxy_to_broker_url == "owner:6651"
        await connection.close()


async def test_an_error_instead_of_connected_is_raised_as_its_exception() -> None:
    async with StubBroker() as broker:
        broker.handlers[T.CONNECT] = lambda conn, _f: conn.write(
            commands.error(0, ServerError.AuthenticationError, "who are you")
        )
        with pytest.raises(AuthenticationError, match="who are you"):
            await open_connection(broker)


async def test_a_silent_broker_fails_the_handshake_in_time() -> None:
    async with StubBroker() as broker:
        broker.handlers[T.CONNECT] = lambda conn, frame: None
        config = ClientConfig(connection_timeout=0.2)
        with pytest.raises(Disconnected, match="no handshake"):
            await open_connection(broker, config)
        await broker.wait_for(lambda: not broker.live_connections)


async def test_an_unreachable_broker_is_a_retriable_disconnect() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = Address("127.0.0.1", port)
    with pytest.raises(Disconnected) as caught:
        await Connection.open(address, address, FAST)
    assert caught.value.retriable


async def test_a_frame_before_connected_ends_the_connection() -> None:
    async with StubBroker() as broker:
        broker.handlers[T.CONNECT] = lambda conn, _f: conn.write(commands.pong())
        with pytest.raises(Disconnected, match="before CONNECTED"):
            await open_connection(broker)


async def test_answers_are_matched_by_request_id_whatever_their_order() -> None:
    async with StubBroker() as broker:
        held: list[tuple[StubConnection, Frame]] = []
        broker.handlers[T.PARTITIONED_METADATA] = lambda conn, frame: held.append((conn, frame))
        connection = await open_connection(broker)
        first = asyncio.ensure_future(
            connection.request(lambda rid: commands.partitioned_metadata("a", rid))
        )
        second = asyncio.ensure_future(
            connection.request(lambda rid: commands.partitioned_metadata("b", rid))
        )
        await broker.wait_for(lambda: len(held) == 2)
        for conn, frame in reversed(held):  # answer the second request first
            request = frame.command.partitionMetadata
            partitions = 1 if request.topic == "a" else 2
            conn.write(commands.partitioned_metadata_response(request.request_id, partitions))
        assert (await first).partitionMetadataResponse.partitions == 1
        assert (await second).partitionMetadataResponse.partitions == 2
        await connection.close()


async def test_error_answers_raise_the_mapped_exception() -> None:
    async with StubBroker() as broker:
        broker.handlers[T.PRODUCER] = lambda conn, frame: conn.write(
            commands.error(frame.command.producer.request_id, ServerError.ProducerBusy, "taken")
        )
        broker.handlers[T.LOOKUP] = lambda conn, frame: conn.write(
            commands.lookup_response(
                frame.command.lookupTopic.request_id, error=ServerError.TopicNotFound, message="no"
            )
        )
        connection = await open_connection(broker)
        with pytest.raises(ProducerBusy, match="taken"):
            await connection.request(lambda rid: commands.producer("t", 0, rid))
        with pytest.raises(TopicNotFound, match="no"):
            await connection.request(lambda rid: commands.lookup("t", rid))
        assert connection.is_ready  # an error answer does not end the connection
        await connection.close()


async def test_an_unanswered_request_times_out_and_a_late_answer_is_ignored() -> None:
    async with StubBroker() as broker:
        held: list[tuple[StubConnection, Frame]] = []
        broker.handlers[T.LOOKUP] = lambda conn, frame: held.append((conn, frame))
        connection = await open_connection(broker)
        with pytest.raises(Timeout):
            await connection.request(lambda rid: commands.lookup("t", rid), time_limit=0.1)
        conn, frame = held[0]
        conn.write(commands.lookup_response(frame.command.lookupTopic.request_id, broker.url))
        # The connection stays usable after the stray answer.
        answer = await connection.request(lambda rid: commands.partitioned_metadata("t", rid))
        assert answer.type == T.PARTITIONED_METADATA_RESPONSE
        await connection.close()


async def test_a_queued_exclusive_producer_waits_past_the_time_limit() -> None:
    async with StubBroker() as broker:
        held: list[tuple[StubConnection, Frame]] = []

        def queue_it(conn: StubConnection, frame: Frame) -> None:
            held.append((conn, frame))
            conn.write(
                commands.producer_success(
                    frame.command.producer.request_id, "p", producer_ready=False
                )
            )

        broker.handlers[T.PRODUCER] = queue_it
        connection = await open_connection(broker)
        waiting = asyncio.Event()
        request = asyncio.ensure_future(
            connection.request(
                lambda rid: commands.producer("t", 0, rid), time_limit=0.1, on_waiting=waiting.set
            )
        )
        await asyncio.wait_for(waiting.wait(), 2)
        await asyncio.sleep(0.3)  # three time limits: the clock is stopped while queued
        assert not request.done()
        conn, frame = held[0]
        conn.write(commands.producer_success(frame.command.producer.request_id, "p", topic_epoch=3))
        answer = await request
        assert answer.producer_success.producer_ready
        assert answer.producer_success.topic_epoch == 3
        await connection.close()


async def test_producer_frames_reach_the_registered_handler() -> None:
    async with StubBroker() as broker:
        connection = await open_connection(broker)
        handler, other = RecordingHandler(), RecordingHandler()
        connection.register_producer(5, handler)
        connection.register_producer(6, other)
        conn = broker.connections[0]
        conn.write(commands.send_receipt(5, 11, MessageId(1, 2)))
        conn.write(commands.send_error(5, 12, ServerError.ChecksumError, "bad"))
        conn.write(commands.send_receipt(99, 1, MessageId(1, 3)))  # nobody: dropped
        conn.write(commands.close_producer(5))
        await broker.wait_for(lambda: len(handler.calls) == 3)
        assert handler.calls[:2] == [("receipt", 11), ("send_error", ServerError.ChecksumError)]
        assert handler.calls[2] == ("closed_by_broker", connection)
        # Unregistered by the broker's close: later frames for id 5 go nowhere.
        conn.write(commands.send_receipt(5, 13, MessageId(1, 4)))
        conn.write(commands.send_receipt(6, 1, MessageId(1, 5)))
        await broker.wait_for(lambda: other.calls == [("receipt", 1)])
        assert len(handler.calls) == 3
        await connection.close()


async def test_consumer_frames_reach_the_registered_handler() -> None:
    async with StubBroker() as broker:
        connection = await open_connection(broker)
        handler = RecordingHandler()
        connection.register_consumer(3, handler)
        conn = broker.connections[0]
        entry = b"\x00\x00\x00\x00payload"
        conn.write(commands.message(3, MessageId(1, 0), entry))
        conn.write(commands.active_consumer_change(3, True))
        conn.write(commands.reached_end_of_topic(3))
        conn.write(commands.close_consumer(3))
        await broker.wait_for(lambda: len(handler.calls) == 4)
        assert handler.calls[:3] == [("message", entry), ("active", True), ("end", None)]
        assert handler.calls[3][0] == "closed_by_broker"
        await connection.close()


async def test_a_broker_ping_is_answered_with_pong() -> None:
    async with StubBroker() as broker:
        connection = await open_connection(broker)
        broker.connections[0].write(commands.ping())
        await broker.wait_for(lambda: bool(broker.of_type(T.PONG)))
        await connection.close()


async def test_keep_alive_pings_and_survives_while_the_broker_answers() -> None:
    async with StubBroker() as broker:
        config = ClientConfig(keep_alive_interval=0.05)
        connection = await open_connection(broker, config)
        await broker.wait_for(lambda: len(broker.of_type(T.PING)) >= 4)
        assert connection.is_ready
        await connection.close()


async def test_keep_alive_drops_a_silent_broker_and_tells_everyone() -> None:
    async with StubBroker() as broker:
        broker.handlers[T.PING] = lambda conn, frame: None  # a broker that went quiet
        config = ClientConfig(keep_alive_interval=0.05)
        connection = await open_connection(broker, config)
        handler = RecordingHandler()
        connection.register_producer(1, handler)
        listener_calls: list[Connection] = []
        connection.add_close_listener(listener_calls.append)
        await broker.wait_for(lambda: bool(handler.calls), within=2)
        assert handler.calls == [("lost", connection.close_reason)]
        assert isinstance(connection.close_reason, Disconnected)
        assert "nothing from" in str(connection.close_reason)
        assert listener_calls == [connection]
        assert not connection.is_ready


async def test_loss_fails_pending_requests_and_notifies_handlers_once() -> None:
    async with StubBroker() as broker:
        broker.handlers[T.LOOKUP] = lambda conn, frame: conn.abort()
        connection = await open_connection(broker)
        producer, consumer = RecordingHandler(), RecordingHandler()
        connection.register_producer(1, producer)
        connection.register_consumer(1, consumer)
        with pytest.raises(Disconnected):
            await connection.request(lambda rid: commands.lookup("t", rid))
        assert [call[0] for call in producer.calls] == ["lost"]
        assert [call[0] for call in consumer.calls] == ["lost"]
        with pytest.raises(Disconnected):  # a closed connection refuses new requests
            await connection.request(lambda rid: commands.lookup("t", rid))
        connection.write(b"ignored")  # and writes are dropped, not raised
        await connection.close()
        assert len(producer.calls) == 1


async def test_garbage_from_the_broker_closes_the_connection() -> None:
    async with StubBroker() as broker:
        connection = await open_connection(broker)
        handler = RecordingHandler()
        connection.register_producer(1, handler)
        broker.connections[0].write(b"\x00\x00\x00\x05\x00\x00\x00\x01\xff")
        await broker.wait_for(lambda: bool(handler.calls))
        assert "bad bytes" in str(connection.close_reason)


async def test_frames_written_in_one_loop_turn_leave_in_one_socket_write() -> None:
    async with StubBroker() as broker:
        connection = await open_connection(broker)
        transport = connection._transport
        assert transport is not None
        writes: list[bytes] = []
        original = transport.write

        def counting_write(data: bytes | bytearray | memoryview) -> None:
            writes.append(bytes(data))
            original(data)

        transport.write = counting_write  # type: ignore[method-assign]
        for _ in range(100):
            connection.write(commands.ping())
        await broker.wait_for(lambda: len(broker.of_type(T.PING)) == 100)
        assert writes == [commands.ping() * 100]
        await connection.close()


async def test_close_flushes_and_leaves_no_task_or_transport() -> None:
    async with StubBroker() as broker:
        connection = await open_connection(broker)
        transport = connection._transport
        assert transport is not None
        connection.write(commands.ping())
        await connection.close()
        assert transport.is_closing()
        assert not connection.is_ready
        await broker.wait_for(lambda: bool(broker.of_type(T.PING)))  # the queued frame left
        await broker.wait_for(lambda: not broker.serving)  # the broker saw the socket close
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await connection.close()  # idempotent
