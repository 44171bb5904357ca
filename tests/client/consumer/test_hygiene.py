"""Asyncio hygiene of consumers and readers (issue #11, Tests): nothing is left after
``close()``, a cancelled ``receive`` loses nothing, the blocking ``Client``'s consumers serve 8
threads at once, and a ``Client`` from before ``os.fork()`` is refused in the child while a new
one works there (Spark workers fork)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from pathlib import Path

import pytest

from client import AsyncClient, Client, ClientUsedAfterFork, InitialPosition, MessageId
from client.consumer import ConsumerType
from client.errors import AlreadyClosed, Timeout
from tests.client.sync.helpers import sockets_to
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration]

EARLIEST = InitialPosition.Earliest


def new_topic() -> str:
    return f"persistent://public/default/hygiene-{uuid.uuid4().hex[:10]}"


async def test_async_close_leaves_no_task_and_no_socket(running: BrokerThread) -> None:
    before = sockets_to(running.port)
    topic = new_topic()
    client = AsyncClient(running.url)
    consumer = await client.subscribe(topic, "sub", unacked_messages_timeout_ms=10_000)
    reader = await client.create_reader(topic, MessageId.earliest)
    producer = await client.create_producer(topic)
    await producer.send(b"x")
    message = await consumer.receive(5000)  # arms the unacked timer
    consumer.negative_acknowledge(message)  # and the negative-ack one
    assert (await reader.read_next(5000)).data() == b"x"
    waiting = asyncio.ensure_future(consumer.receive())
    reading = asyncio.ensure_future(reader.read_next())
    await asyncio.sleep(0)  # both are now parked on the empty queues
    assert sockets_to(running.port) == before + 1
    await client.close()
    for parked in (waiting, reading):
        with pytest.raises(AlreadyClosed):
            await parked
    assert client.connections == []
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert sockets_to(running.port) == before
    with pytest.raises(AlreadyClosed):
        await reader.read_next(10)
    with pytest.raises(AlreadyClosed):
        consumer.acknowledge(message)


def test_blocking_close_leaves_no_thread_and_no_socket(running: BrokerThread) -> None:
    before = sockets_to(running.port)
    threads_before = set(threading.enumerate())
    client = Client(running.url)
    topic = new_topic()
    consumer = client.subscribe(topic, "sub")
    reader = client.create_reader(topic, MessageId.earliest)
    client.create_producer(topic).send(b"x")
    assert consumer.receive(5000).data() == b"x"
    assert reader.read_next(5000).data() == b"x"
    assert sockets_to(running.port) == before + 1
    thread = client.loop_thread
    client.close()
    assert not thread.is_alive()
    assert set(threading.enumerate()) == threads_before
    assert sockets_to(running.port) == before
    with pytest.raises(AlreadyClosed):
        consumer.receive(10)
    with pytest.raises(AlreadyClosed):
        reader.read_next(10)


async def test_a_cancelled_receive_loses_no_message_and_no_permit(running: BrokerThread) -> None:
    topic = new_topic()
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(topic, "sub", receiver_queue_size=4)
        reader = await client.create_reader(topic, MessageId.earliest, receiver_queue_size=4)
        for source in (consumer.receive, reader.read_next):
            pending = asyncio.ensure_future(source())
            await asyncio.sleep(0)
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
            assert pending.cancelled()
            with pytest.raises(Timeout):  # a timeout is a cancellation too
                await source(50)
        producer = await client.create_producer(topic)
        for n in range(20):  # five times the queue: every permit must come back
            await producer.send_async(f"m{n}".encode())
        await producer.flush()
        got = []
        for n in range(20):
            message = await consumer.receive(5000)
            got.append(message.data())
            consumer.acknowledge(message)
            if n % 3 == 0:  # cancellations in between, with messages queued or not
                pending = asyncio.ensure_future(consumer.receive())
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
        assert got == [f"m{n}".encode() for n in range(20)]
        assert [(await reader.read_next(5000)).data() for _ in range(20)] == got
        with pytest.raises(Timeout):
            await consumer.receive(100)


def test_blocking_consumers_serve_eight_threads_at_once(running: BrokerThread) -> None:
    shared_topic = new_topic()
    own_topics = [new_topic() for _ in range(8)]
    with Client(running.url) as client:
        shared = client.subscribe(
            shared_topic, "sub", ConsumerType.Shared, initial_position=EARLIEST
        )
        producer = client.create_producer(shared_topic)
        for n in range(400):
            producer.send_async(f"s{n}".encode())
        for index, topic in enumerate(own_topics):
            own = client.create_producer(topic, batching_enabled=True)
            for n in range(50):
                own.send_async(f"{index}-{n}".encode())
            own.flush()
        producer.flush()
        taken: list[list[bytes]] = [[] for _ in range(8)]
        errors: list[BaseException] = []
        total = threading.Semaphore(400)

        def work(index: int) -> None:
            try:
                own = client.subscribe(own_topics[index], "own", initial_position=EARLIEST)
                reader = client.create_reader(own_topics[index], MessageId.earliest)
                mine = [own.receive(5000).data() for _ in range(50)]
                for data in mine:
                    assert data.startswith(f"{index}-".encode())
                assert [reader.read_next(5000).data() for _ in range(50)] == mine
                own.close()
                reader.close()
                while total.acquire(blocking=False):  # a share of the shared subscription
                    message = shared.receive(5000)
                    taken[index].append(message.data())
                    shared.acknowledge(message)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        everything = [m for share in taken for m in share]
        assert sorted(everything) == sorted(f"s{n}".encode() for n in range(400))
        with pytest.raises(Timeout):
            shared.receive(100)


def test_a_client_from_before_fork_is_refused_in_the_child_for_consumers_too(
    running: BrokerThread, tmp_path: Path
) -> None:
    topic = new_topic()
    report = tmp_path / "child.txt"
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "parent", initial_position=EARLIEST)
        reader = client.create_reader(topic, MessageId.earliest)
        client.create_producer(topic).send(b"before")
        pid = os.fork()
        if pid == 0:  # the child: report in a file, leave with os._exit
            outcome = []
            try:
                for name, call in (
                    ("receive", lambda: consumer.receive(100)),
                    ("acknowledge", lambda: consumer.acknowledge(MessageId.earliest)),
                    ("read_next", lambda: reader.read_next(100)),
                    ("subscribe", lambda: client.subscribe(topic, "child")),
                    ("create_reader", lambda: client.create_reader(topic, MessageId.earliest)),
                ):
                    try:
                        call()
                        outcome.append(f"{name} worked")
                    except ClientUsedAfterFork as exc:
                        outcome.append(f"{name} refused: {exc}")
                client.close()  # harmless in the child
                with Client(running.url) as fresh:
                    fresh_consumer = fresh.subscribe(topic, "child", initial_position=EARLIEST)
                    fresh_reader = fresh.create_reader(topic, MessageId.earliest)
                    outcome.append(
                        "fresh got "
                        + fresh_consumer.receive(5000).data().decode()
                        + ","
                        + fresh_reader.read_next(5000).data().decode()
                    )
            except BaseException as exc:
                outcome.append(f"error {exc!r}")
            report.write_text("\n".join(outcome))
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        lines = report.read_text().splitlines()
        assert len(lines) == 6, lines
        for line in lines[:5]:
            assert " refused: " in line, line
            assert "create a new Client in the child" in line
        assert lines[5] == "fresh got before,before"
        # The parent's consumer and reader are untouched.
        assert consumer.receive(5000).data() == b"before"
        assert reader.read_next(5000).data() == b"before"
