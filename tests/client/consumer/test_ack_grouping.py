"""``AsyncConsumer`` acknowledgement grouping, seen on the wire of a scripted broker.

Like the C++ client (``ackGroupingTimeMs`` 100, ``ackGroupingMaxSize`` 1000): individual
acknowledgements travel together in one ACK command, sent 100 ms after the first one or as soon
as 1000 are pending; closing the consumer sends what is pending at once.
"""

from __future__ import annotations

import time
from collections import deque

from client import AsyncClient, Message, MessageId
from protocol import Frame, commands, encode_entry, pb
from protocol.ids import MessageId as WireMessageId
from tests.client.stub_broker import StubBroker, StubConnection

T = pb.BaseCommand


def _serve_subscriptions(broker: StubBroker, entries: int) -> None:
    """SUBSCRIBE answers SUCCESS; the first FLOW gets ``entries`` single-message entries."""
    delivered: set[int] = set()

    def on_flow(conn: StubConnection, frame: Frame) -> None:
        consumer_id = frame.command.flow.consumer_id
        if consumer_id in delivered:
            return
        delivered.add(consumer_id)
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        for entry_id in range(entries):
            metadata.sequence_id = entry_id
            conn.write(
                commands.message(
                    consumer_id, WireMessageId(3, entry_id), encode_entry(metadata, b"m")
                )
            )

    broker.handlers[T.SUBSCRIBE] = lambda conn, frame: conn.write(
        commands.success(frame.command.subscribe.request_id)
    )
    broker.handlers[T.FLOW] = on_flow
    broker.handlers[T.ACK] = lambda _conn, _frame: None
    broker.handlers[T.CLOSE_CONSUMER] = lambda conn, frame: conn.write(
        commands.success(frame.command.close_consumer.request_id)
    )


def _acked_entries(broker: StubBroker) -> list[list[int]]:
    return [
        [message_id.entryId for message_id in frame.command.ack.message_id]
        for frame in broker.of_type(T.ACK)
    ]


async def test_acks_made_together_travel_in_one_command_after_the_grouping_time() -> None:
    async with StubBroker() as broker:
        _serve_subscriptions(broker, 3)
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe("t", "sub", receiver_queue_size=10)
            started = time.monotonic()
            for _ in range(3):
                consumer.acknowledge(await consumer.receive(5_000))
            await broker.wait_for(lambda: bool(broker.of_type(T.ACK)))
            waited = time.monotonic() - started
            assert _acked_entries(broker) == [[0, 1, 2]]
            assert waited >= 0.09  # held for the grouping time, not sent per ack


async def test_a_thousand_pending_acks_are_sent_without_waiting_for_the_timer() -> None:
    async with StubBroker() as broker:
        _serve_subscriptions(broker, 1000)
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe("t", "sub", receiver_queue_size=1000)
            messages = [await consumer.receive(5_000) for _ in range(1000)]
            for message in messages[:999]:
                consumer.acknowledge(message)
            assert broker.of_type(T.ACK) == []  # nothing can have left yet: same loop turn
            consumer.acknowledge(messages[999])
            await broker.wait_for(lambda: bool(broker.of_type(T.ACK)), within=0.08)
            assert _acked_entries(broker) == [list(range(1000))]


async def test_close_sends_the_pending_acks_at_once() -> None:
    async with StubBroker() as broker:
        _serve_subscriptions(broker, 2)
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe("t", "sub", receiver_queue_size=10)
            for _ in range(2):
                consumer.acknowledge(await consumer.receive(5_000))
            await consumer.close()
            await broker.wait_for(lambda: bool(broker.of_type(T.CLOSE_CONSUMER)))
            assert _acked_entries(broker) == [[0, 1]]


async def test_a_window_of_acks_is_grouped_in_order_and_split_at_the_limit() -> None:
    """The blocking facade's window (``acknowledge_queued``): whole entries go to the grouper
    together, an id among them keeps its place, and a group is sent at 1000 as one by one."""
    async with StubBroker() as broker:
        _serve_subscriptions(broker, 1500)
        async with AsyncClient(broker.url) as client:
            consumer = await client.subscribe("t", "sub", receiver_queue_size=1500)
            messages = [await consumer.receive(5_000) for _ in range(1500)]
            window: deque[Message | MessageId] = deque(messages)
            window[700] = messages[700].message_id()
            consumer.acknowledge_queued(window)
            assert not window
            await broker.wait_for(lambda: bool(broker.of_type(T.ACK)), within=0.08)
            assert _acked_entries(broker) == [list(range(1000))]  # at the limit, not the timer
            await consumer.close()
            await broker.wait_for(lambda: len(broker.of_type(T.ACK)) == 2)
            assert _acked_entries(broker) == [list(range(1000)), list(range(1000, 1500))]
