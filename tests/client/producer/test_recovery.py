"""``AsyncProducer`` against a scripted broker: every way a send can go wrong, and recovery.

The stub decides what the broker answers, so each case of the effectively-once recipe is shown
on the wire: what is resent, with which sequence ids and bytes, under which producer name and
topic epoch, and what the application sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from client import AsyncClient
from client.errors import (
    AlreadyClosed,
    ChecksumError,
    ProducerBusy,
    ProducerFenced,
    ProducerQueueIsFull,
    Timeout,
)
from client.message_id import MessageId
from protocol import Frame, ServerError, commands, pb
from protocol import MessageId as WireMessageId
from tests.client.stub_broker import StubBroker, StubConnection

T = pb.BaseCommand


@pytest.fixture
async def broker() -> AsyncIterator[StubBroker]:
    async with StubBroker() as stub:
        yield stub


def client_for(broker: StubBroker, operation_timeout_seconds: float = 2) -> AsyncClient:
    return AsyncClient(
        broker.url,
        operation_timeout_seconds=operation_timeout_seconds,
        initial_backoff_interval_ms=10,
        max_backoff_interval_ms=50,
    )


def sequence_ids(frames: list[Frame]) -> list[int]:
    return [frame.command.send.sequence_id for frame in frames]


async def test_a_persistence_error_is_retried_on_a_new_connection_and_never_surfaced(
    broker: StubBroker,
) -> None:
    refused: list[int] = []

    def refuse_first(conn: StubConnection, frame: Frame) -> None:
        send = frame.command.send
        if not refused:
            refused.append(send.sequence_id)
            conn.write(
                commands.send_error(
                    send.producer_id, send.sequence_id, ServerError.PersistenceError, "unknown"
                )
            )
        elif conn.number > 0:
            broker.receipt(conn, frame)

    broker.handlers[T.SEND] = refuse_first
    async with client_for(broker) as client:
        producer = await client.create_producer("t", producer_name="p")
        futures = [await producer.send_async(b"m%d" % i) for i in range(3)]
        ids = await asyncio.gather(*futures)
        assert [message_id.entry_id() for message_id in ids] == [0, 1, 2]
        first, second = broker.connections[0], broker.connections[1]
        assert sequence_ids(first.sends) == [0, 1, 2]
        assert sequence_ids(second.sends) == [0, 1, 2]  # all resent, in order, same ids
        assert [f.entry for f in second.sends] == [f.entry for f in first.sends]  # same bytes
        assert len(second.of_type(T.LOOKUP)) == 1  # looked up again
        recreate = second.of_type(T.PRODUCER)[0].command.producer
        assert (recreate.producer_name, recreate.epoch) == ("p", 1)
        assert producer.last_sequence_id() == 2


async def test_a_receipt_for_a_later_message_makes_the_producer_resend(
    broker: StubBroker,
) -> None:
    def skip_first(conn: StubConnection, frame: Frame) -> None:
        send = frame.command.send
        if conn.number == 0:
            if send.sequence_id == 1:  # answer 1 as if 0 were lost: cannot be trusted
                conn.write(commands.send_receipt(send.producer_id, 1, WireMessageId(7, 0)))
            return
        broker.receipt(conn, frame)

    broker.handlers[T.SEND] = skip_first
    async with client_for(broker) as client:
        producer = await client.create_producer("t")
        futures = [await producer.send_async(b"m%d" % i) for i in range(2)]
        await asyncio.gather(*futures)
        assert sequence_ids(broker.connections[1].sends) == [0, 1]


async def test_a_checksum_error_fails_just_that_message(broker: StubBroker) -> None:
    def corrupt_second(conn: StubConnection, frame: Frame) -> None:
        send = frame.command.send
        if send.sequence_id == 1:
            conn.write(
                commands.send_error(send.producer_id, 1, ServerError.ChecksumError, "bad crc")
            )
        else:
            broker.receipt(conn, frame)

    broker.handlers[T.SEND] = corrupt_second
    async with client_for(broker) as client:
        producer = await client.create_producer("t")
        futures = [await producer.send_async(b"m%d" % i) for i in range(3)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert isinstance(results[1], ChecksumError)
        assert isinstance(results[0], MessageId)
        assert isinstance(results[2], MessageId)
        assert len(broker.connections) == 1  # no reconnection for a checksum error
        assert producer.is_connected()


async def test_a_broker_close_recreates_with_the_same_name_and_topic_epoch(
    broker: StubBroker,
) -> None:
    broker.topic_epoch = 5
    held: list[tuple[StubConnection, Frame]] = []
    broker.handlers[T.SEND] = lambda conn, frame: held.append((conn, frame))
    async with client_for(broker) as client:
        producer = await client.create_producer(
            "t", access_mode=pb.ProducerAccessMode.Value("Exclusive")
        )
        assert producer.producer_name() == "stub-producer"  # assigned by the broker
        first_create = broker.of_type(T.PRODUCER)[0].command.producer
        assert not first_create.HasField("topic_epoch")
        future = await producer.send_async(b"x")
        await broker.wait_for(lambda: len(held) == 1)
        broker.handlers[T.SEND] = broker.on_send
        held[0][0].write(commands.close_producer(held[0][1].command.send.producer_id))
        message_id = await future
        assert message_id.entry_id() == 0
        creates = [f.command.producer for f in broker.of_type(T.PRODUCER)]
        assert len(creates) == 2
        again = creates[1]
        assert again.producer_name == "stub-producer"  # the generated name, kept
        assert again.topic_epoch == 5
        assert again.epoch == 1
        assert len(broker.connections) == 1  # same socket: only the producer was closed


async def test_fenced_on_recreation_is_terminal_for_pending_and_later_sends(
    broker: StubBroker,
) -> None:
    broker.handlers[T.SEND] = lambda conn, frame: None
    async with client_for(broker) as client:
        producer = await client.create_producer("t", producer_name="p")
        futures = [await producer.send_async(b"m%d" % i) for i in range(3)]
        await broker.wait_for(lambda: len(broker.of_type(T.SEND)) == 3)
        broker.handlers[T.PRODUCER] = lambda conn, frame: conn.write(
            commands.error(
                frame.command.producer.request_id, ServerError.ProducerFenced, "epoch moved"
            )
        )
        broker.connections[0].abort()
        for future in futures:
            with pytest.raises(ProducerFenced):
                await future
        with pytest.raises(ProducerFenced):
            await producer.send(b"later")
        with pytest.raises(ProducerFenced):
            await producer.flush()
        assert not producer.is_connected()


async def test_wait_for_exclusive_creation_waits_for_the_second_success(
    broker: StubBroker,
) -> None:
    queued: list[tuple[StubConnection, int]] = []

    def queue_it(conn: StubConnection, frame: Frame) -> None:
        request_id = frame.command.producer.request_id
        queued.append((conn, request_id))
        conn.write(commands.producer_success(request_id, "w", producer_ready=False))

    broker.handlers[T.PRODUCER] = queue_it
    async with client_for(broker, operation_timeout_seconds=0.2) as client:
        creation = asyncio.ensure_future(
            client.create_producer("t", access_mode=pb.ProducerAccessMode.Value("WaitForExclusive"))
        )
        await broker.wait_for(lambda: bool(queued))
        await asyncio.sleep(0.5)  # longer than the operation timeout
        assert not creation.done()
        conn, request_id = queued[0]
        conn.write(commands.producer_success(request_id, "w", topic_epoch=1))
        producer = await creation
        assert producer.producer_name() == "w"
        assert (await producer.send(b"x")).entry_id() == 0


async def test_the_first_creation_retries_retriable_errors_then_times_out(
    broker: StubBroker,
) -> None:
    broker.handlers[T.PRODUCER] = lambda conn, frame: conn.write(
        commands.error(frame.command.producer.request_id, ServerError.ServiceNotReady, "loading")
    )
    async with client_for(broker, operation_timeout_seconds=0.3) as client:
        with pytest.raises(Timeout, match="loading"):
            await client.create_producer("t")
        assert len(broker.of_type(T.PRODUCER)) > 1  # it did retry
        assert not client._producers


async def test_a_fatal_creation_error_is_raised_at_once(broker: StubBroker) -> None:
    broker.handlers[T.PRODUCER] = lambda conn, frame: conn.write(
        commands.error(frame.command.producer.request_id, ServerError.ProducerBusy, "taken")
    )
    async with client_for(broker) as client:
        with pytest.raises(ProducerBusy, match="taken"):
            await client.create_producer("t", producer_name="p")
        assert len(broker.of_type(T.PRODUCER)) == 1


async def test_send_timeout_fails_every_pending_send(broker: StubBroker) -> None:
    broker.handlers[T.SEND] = lambda conn, frame: None
    async with client_for(broker) as client:
        producer = await client.create_producer("t", send_timeout_millis=100)
        futures = [await producer.send_async(b"m%d" % i) for i in range(3)]
        for future in futures:
            with pytest.raises(Timeout):
                await future
        broker.handlers[T.SEND] = broker.on_send
        # The producer goes on; a late receipt for a timed-out message is ignored.
        assert (await producer.send(b"after")).entry_id() == 0
        assert producer.last_sequence_id() == 3


async def test_send_timeout_zero_never_gives_up(broker: StubBroker) -> None:
    held: list[tuple[StubConnection, Frame]] = []
    broker.handlers[T.SEND] = lambda conn, frame: held.append((conn, frame))
    async with client_for(broker) as client:
        producer = await client.create_producer("t", send_timeout_millis=0)
        future = await producer.send_async(b"x")
        await asyncio.sleep(0.3)
        assert not future.done()
        broker.receipt(*held[0])
        assert (await future).entry_id() == 0


async def test_a_full_queue_refuses_or_blocks(broker: StubBroker) -> None:
    held: list[tuple[StubConnection, Frame]] = []
    broker.handlers[T.SEND] = lambda conn, frame: held.append((conn, frame))
    async with client_for(broker) as client:
        refusing = await client.create_producer("t", max_pending_messages=2)
        await refusing.send_async(b"1")
        await refusing.send_async(b"2")
        with pytest.raises(ProducerQueueIsFull):
            await refusing.send_async(b"3")
        blocking = await client.create_producer(
            "u", max_pending_messages=1, block_if_queue_full=True
        )
        first = await blocking.send_async(b"a")
        second = asyncio.ensure_future(blocking.send_async(b"b"))
        await asyncio.sleep(0.05)
        assert not second.done()  # waiting for room
        await broker.wait_for(lambda: len(held) == 3)
        broker.handlers[T.SEND] = broker.on_send
        broker.receipt(*held[2])  # "a" acknowledged: room for "b"
        await first
        assert (await (await second)).entry_id() == 1
        for item in held[:2]:
            broker.receipt(*item)


async def test_cancelling_a_blocked_send_uses_no_sequence_id(broker: StubBroker) -> None:
    held: list[tuple[StubConnection, Frame]] = []
    broker.handlers[T.SEND] = lambda conn, frame: held.append((conn, frame))
    async with client_for(broker) as client:
        producer = await client.create_producer(
            "t", max_pending_messages=1, block_if_queue_full=True
        )
        first = await producer.send_async(b"a")
        blocked = asyncio.ensure_future(producer.send(b"never"))
        await asyncio.sleep(0.05)
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        broker.handlers[T.SEND] = broker.on_send
        broker.receipt(*held[0])
        await first
        await producer.send(b"b")
        await producer.flush()
        assert sequence_ids(broker.of_type(T.SEND)) == [0, 1]  # no gap, nothing extra
        assert producer.last_sequence_id() == 1


async def test_cancelling_an_in_flight_send_still_delivers_it_in_order(
    broker: StubBroker,
) -> None:
    held: list[tuple[StubConnection, Frame]] = []
    broker.handlers[T.SEND] = lambda conn, frame: held.append((conn, frame))
    async with client_for(broker) as client:
        producer = await client.create_producer("t")
        waiting = asyncio.ensure_future(producer.send(b"a"))
        await broker.wait_for(lambda: len(held) == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        later = await producer.send_async(b"b")
        await broker.wait_for(lambda: len(held) == 2)
        for item in held:
            broker.receipt(*item)
        assert (await later).entry_id() == 1
        assert producer.last_sequence_id() == 1
        assert len(producer._pending) == 0
        assert producer._pending.messages == 0


async def test_a_duplicate_receipt_completes_the_send_with_minus_one(
    broker: StubBroker,
) -> None:
    broker.handlers[T.SEND] = lambda conn, frame: broker.receipt(conn, frame, duplicate=True)
    async with client_for(broker) as client:
        producer = await client.create_producer("t", producer_name="p")
        message_id = await producer.send(b"again", sequence_id=4)
        assert message_id == MessageId(-1, -1, -1, -1)
        assert producer.last_sequence_id() == 4


async def test_numbering_resumes_from_the_broker_or_the_initial_sequence_id(
    broker: StubBroker,
) -> None:
    broker.last_sequence_id = 41
    async with client_for(broker) as client:
        resumed = await client.create_producer("t", producer_name="p")
        assert resumed.last_sequence_id() == 41
        await resumed.send(b"x")
        explicit = await client.create_producer("u", producer_name="q", initial_sequence_id=9)
        assert explicit.last_sequence_id() == 9
        await explicit.send(b"y")
        await explicit.send(b"z", sequence_id=100)  # automatic ids continue above it
        await explicit.send(b"w")
        await explicit.send(b"v", sequence_id=50)  # a lower explicit id leaves them alone
        await explicit.send(b"u")
        assert sequence_ids(broker.of_type(T.SEND)) == [42, 10, 100, 101, 50, 102]
        with pytest.raises(ValueError):
            await explicit.send(b"bad", sequence_id=-5)


async def test_close_delivers_pending_messages_first(broker: StubBroker) -> None:
    held: list[tuple[StubConnection, Frame]] = []
    broker.handlers[T.SEND] = lambda conn, frame: held.append((conn, frame))
    async with client_for(broker) as client:
        producer = await client.create_producer("t")
        future = await producer.send_async(b"x")
        closing = asyncio.ensure_future(producer.close())
        await broker.wait_for(lambda: len(held) == 1)
        assert not closing.done()
        broker.receipt(*held[0])
        await closing
        assert (await future).entry_id() == 0
        assert broker.of_type(T.CLOSE_PRODUCER)
        with pytest.raises(AlreadyClosed):
            await producer.send(b"y")


async def test_close_gives_up_on_unanswered_messages_after_the_operation_timeout(
    broker: StubBroker,
) -> None:
    broker.handlers[T.SEND] = lambda conn, frame: None
    async with client_for(broker, operation_timeout_seconds=0.2) as client:
        producer = await client.create_producer("t", send_timeout_millis=0)
        future = await producer.send_async(b"x")
        await producer.close()
        with pytest.raises(AlreadyClosed):
            await future


async def test_closing_the_client_leaves_no_task_and_no_connection(broker: StubBroker) -> None:
    client = client_for(broker)
    producers = [await client.create_producer(f"t{i}") for i in range(3)]
    for producer in producers:
        await producer.send(b"x")
    assert len(client.connections) == 1  # one socket for every producer and lookup
    broker.connections[0].abort()  # a reconnection in progress must be stopped too
    await client.close()
    assert client.connections == []
    await broker.wait_for(lambda: not broker.serving)
    assert asyncio.all_tasks() == {asyncio.current_task()}
    with pytest.raises(AlreadyClosed):
        await client.create_producer("t")
