"""Message and reader listeners of the blocking client (the official ``message_listener`` and
``reader_listener``), against a real broker."""

from __future__ import annotations

import threading
import uuid

import pytest

from client import Client, MessageId
from client.errors import InvalidConfiguration
from client.message import Message
from client.sync import Consumer, Reader
from tests.helpers import BrokerThread, topic_stats, wait_until

pytestmark = [pytest.mark.integration]


def new_topic() -> str:
    return f"persistent://public/default/listener-{uuid.uuid4().hex[:10]}"


def listener_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if "listener" in t.name]


def test_the_listener_gets_every_message_in_order_on_its_own_thread(
    running: BrokerThread,
) -> None:
    topic = new_topic()
    got: list[bytes] = []
    threads: set[str] = set()

    def listener(consumer: Consumer, message: Message) -> None:
        threads.add(threading.current_thread().name)
        got.append(message.data())
        consumer.acknowledge(message)  # blocking methods are allowed here
        if message.data() == b"3":
            raise ValueError("a listener bug must not stop the delivery")

    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub", message_listener=listener)
        with pytest.raises(InvalidConfiguration):
            consumer.receive(100)
        with pytest.raises(InvalidConfiguration):
            consumer.batch_receive()
        producer = client.create_producer(topic, batching_enabled=True)
        for i in range(50):
            producer.send_async(str(i).encode(), None)
        producer.flush()
        wait_until(lambda: len(got) == 50)
        assert got == [str(i).encode() for i in range(50)]
        assert len(threads) == 1
        assert threading.current_thread().name not in threads
        assert "magnetar-client" not in threads  # not the loop thread: it may block

        def backlog() -> int:
            return int(topic_stats(running.http, topic)["subscriptions"]["sub"]["msgBacklog"])

        wait_until(lambda: backlog() == 0)
        consumer.close()
        assert listener_threads() == []


def test_a_paused_listener_is_not_called_until_resumed(running: BrokerThread) -> None:
    topic = new_topic()
    got: list[bytes] = []
    with Client(running.url) as client:
        consumer = client.subscribe(
            topic, "sub", message_listener=lambda c, m: got.append(m.data())
        )
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        wait_until(lambda: got == [b"before"])
        consumer.pause_message_listener()
        for i in range(5):
            producer.send(str(i).encode())
        # All five reached the client while paused (one may be held by the listener thread).
        wait_until(lambda: consumer.async_consumer.queued >= 4)  # type: ignore[union-attr]
        assert got == [b"before"]
        consumer.resume_message_listener()
        wait_until(lambda: len(got) == 6)
        assert got == [b"before", *(str(i).encode() for i in range(5))]


def test_a_listener_may_close_its_own_consumer_and_closing_the_client_ends_every_thread(
    running: BrokerThread,
) -> None:
    topic = new_topic()
    closed = threading.Event()

    def close_on_first(consumer: Consumer, message: Message) -> None:
        consumer.close()  # from the listener thread itself: no deadlock
        closed.set()

    client = Client(running.url)
    try:
        client.subscribe(topic, "closes-itself", message_listener=close_on_first)
        client.subscribe(topic, "stays", message_listener=lambda c, m: None)
        client.subscribe([topic, new_topic()], "multi", message_listener=lambda c, m: None)
        client.create_producer(topic).send(b"x")
        assert closed.wait(10)
        wait_until(lambda: len(listener_threads()) == 2)  # the closed one's thread ended
    finally:
        client.close()
    assert listener_threads() == []


def test_the_reader_listener_reads_from_the_start(running: BrokerThread) -> None:
    topic = new_topic()
    got: list[bytes] = []
    readers: list[Reader] = []

    def listener(reader: Reader, message: Message) -> None:
        readers.append(reader)
        got.append(message.data())

    with Client(running.url) as client:
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(str(i).encode())
        reader = client.create_reader(topic, MessageId.earliest, reader_listener=listener)
        with pytest.raises(InvalidConfiguration):
            reader.read_next(100)
        wait_until(lambda: len(got) == 10)
        assert got == [str(i).encode() for i in range(10)]
        assert set(map(id, readers)) == {id(reader)}
        reader.close()
    assert listener_threads() == []
