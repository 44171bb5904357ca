"""Our consumer and reader survive a lost connection (issue #11, Deliver 4).

Two ways to lose it: the broker subprocess is SIGKILLed and restarted on the same port, or a
``TcpProxy`` cuts the link while the broker stays up. Either way the consumer looks the topic
up again, resubscribes and receives every message: what it had acknowledged (and the broker had
recorded) never comes back, what it had received without acknowledging comes again (at least
once), nothing is lost, and the order on an Exclusive subscription is the topic's order. The
reader resumes after the last message it handed out, so it sees each message exactly once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.storage.cursor_file import decode_cursor_state
from client import AsyncClient, InitialPosition, MessageId
from client.consumer import AsyncConsumer
from client.errors import Timeout
from client.reader import AsyncReader
from tests.client.test_effectively_once import free_port
from tests.helpers import (
    BrokerProcess,
    BrokerThread,
    close_client,
    new_client,
    topic_stats,
    wait_until,
    wait_until_async,
)
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]

COUNT = 300
ACKED_BEFORE = 100  # acknowledged (and recorded by the broker) before the connection goes
HELD = 20  # then received without an acknowledgement: these must come again
READ_BEFORE = 150


def new_topic() -> str:
    return f"persistent://public/default/recover-{uuid.uuid4().hex[:10]}"


def produce(url: str, topic: str, first: int, count: int) -> None:
    """Messages ``m<first>`` .. with the official producer, one entry each (so the
    subscription's backlog, counted in entries, counts messages)."""
    official = new_client(url)
    try:
        producer = official.create_producer(topic, batching_enabled=False)
        for n in range(first, first + count):
            producer.send_async(f"m{n}".encode(), None)
        producer.flush()
    finally:
        close_client(official)


def payloads(first: int, end: int) -> list[bytes]:
    return [f"m{n}".encode() for n in range(first, end)]


def backlog(http: str, topic: str) -> int:
    stats = topic_stats(http, topic)
    value: int = stats["subscriptions"]["sub"]["msgBacklog"]
    return value


async def receive_until_cut(consumer: AsyncConsumer, reader: AsyncReader, http: str) -> list[bytes]:
    """Ack ``ACKED_BEFORE`` messages (until the broker records them), hold ``HELD`` more, and
    read ``READ_BEFORE`` with the reader; returns what the reader got."""
    for n in range(ACKED_BEFORE):
        message = await consumer.receive(5000)
        assert message.data() == f"m{n}".encode()
        consumer.acknowledge(message)
    topic = consumer.topic()
    await wait_until_async(lambda: backlog(http, topic) == COUNT - ACKED_BEFORE)
    for n in range(ACKED_BEFORE, ACKED_BEFORE + HELD):
        assert (await consumer.receive(5000)).data() == f"m{n}".encode()
    return [(await reader.read_next(5000)).data() for _ in range(READ_BEFORE)]


async def check_recovery(
    client: AsyncClient,
    url: str,
    http: Callable[[], str],
    break_link: Callable[[], None],
    mend_link: Callable[[], None],
) -> None:
    """``break_link`` loses the connection and keeps the consumer from reconnecting until
    ``mend_link``; both block, so they run in a thread while the client's loop goes on."""
    topic = new_topic()
    consumer = await client.subscribe(
        topic, "sub", initial_position=InitialPosition.Earliest, receiver_queue_size=50
    )
    reader = await client.create_reader(topic, MessageId.earliest, receiver_queue_size=50)
    await asyncio.to_thread(produce, url, topic, 0, COUNT)
    read = await receive_until_cut(consumer, reader, http())

    await asyncio.to_thread(break_link)
    # Once the loss is seen, what was queued from the old connection is dropped (the broker
    # sends it again); the test waits for that so the order below is exact.
    await wait_until_async(lambda: not consumer.is_connected() and not reader.is_connected())
    await asyncio.to_thread(mend_link)
    await asyncio.to_thread(produce, url, topic, COUNT, 50)  # the topic grows meanwhile

    after: list[bytes] = []
    while len(after) < COUNT + 50 - ACKED_BEFORE:
        message = await consumer.receive(15_000)
        after.append(message.data())
        consumer.acknowledge(message)
    # Exclusive: the broker redelivers from the recorded mark-delete, in order; the held
    # messages come again, the acknowledged ones never do.
    assert after == payloads(ACKED_BEFORE, COUNT + 50)
    with pytest.raises(Timeout):
        await consumer.receive(300)
    while len(read) < COUNT + 50:
        read.append((await reader.read_next(15_000)).data())
    assert read == payloads(0, COUNT + 50)  # the reader resumed after its last message
    assert not await reader.has_message_available()
    await wait_until_async(lambda: backlog(http(), topic) == 0)


def durable_mark_delete_entry(data_dir: Path) -> int:
    """Entry id of subscription ``sub``'s mark-delete as its cursor file holds it (-1 if none)."""
    paths = list(data_dir.glob("persistent/public/default/*/cursors/sub.cursor"))
    if len(paths) != 1:
        return -1
    state = decode_cursor_state(paths[0].read_bytes(), paths[0])
    return state.mark_delete.entry_id


async def test_consumer_and_reader_recover_when_the_broker_is_killed(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        f"brokerServicePort={port}",
        "managedLedgerCursorPersistIntervalMs=0",  # a recorded ack survives the SIGKILL
    ).start()
    restarts = []

    def kill_once_acks_are_durable() -> None:
        # The backlog the test waited for is the broker's memory; the cursor file is written
        # by its housekeeping a moment later. Killing before that would lose the acks, which
        # at-least-once allows but this test's exact order check does not.
        wait_until(lambda: durable_mark_delete_entry(tmp_path / "data") >= ACKED_BEFORE - 1)
        broker.kill()

    def restart() -> None:
        broker.start()
        restarts.append(broker.port)

    try:
        async with AsyncClient(
            broker.url, initial_backoff_interval_ms=50, max_backoff_interval_ms=500
        ) as client:
            await check_recovery(
                client, broker.url, lambda: broker.http, kill_once_acks_are_durable, restart
            )
            assert restarts == [port]
    finally:
        broker.terminate()


async def test_consumer_and_reader_recover_when_the_link_is_cut(broker: BrokerThread) -> None:
    with TcpProxy(("127.0.0.1", broker.port)) as proxy:
        cuts = []

        def cut() -> None:
            proxy.refuse(True)  # no reconnection until mended
            cuts.append(proxy.cut())

        async with AsyncClient(
            proxy.url, initial_backoff_interval_ms=50, max_backoff_interval_ms=500
        ) as client:
            await check_recovery(
                client, broker.url, lambda: broker.http, cut, lambda: proxy.refuse(False)
            )
            assert [count >= 1 for count in cuts] == [True]
            assert proxy.connections_accepted >= 2  # and a new one after the cut
