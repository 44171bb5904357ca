"""The blocking ``Consumer``: receive takes queued messages on the calling thread (permits come
back), waits on a thread event for later ones, and acknowledgements reach the broker unasked."""

from __future__ import annotations

import concurrent.futures
import time
import uuid

import pytest

from client import Client
from client.errors import AlreadyClosed, Timeout
from tests.client.sync.helpers import new_topic
from tests.helpers import BrokerThread, topic_stats, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_blocking_receive_takes_queued_messages_in_order_and_returns_their_permits(
    running: BrokerThread,
) -> None:
    # 40 messages through a 4-message receiver queue: the fast path (take_queued on this
    # thread) must give every permit back, or receiving stalls at the 5th message.
    topic = f"sync-fast-{uuid.uuid4().hex}"
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub", receiver_queue_size=4)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(str(i).encode())
        received = []
        for _ in range(40):
            message = consumer.receive(5_000)
            received.append(message.data())
            consumer.acknowledge(message)
        assert received == [str(i).encode() for i in range(40)]


def test_blocking_receive_waits_for_a_later_message_times_out_and_wakes_on_close(
    running: BrokerThread,
) -> None:
    # Nothing queued: the receiving thread waits on a thread event the loop sets (no loop round
    # trip per message). It must wake for a message sent later, give up at its timeout, and
    # see AlreadyClosed when the consumer is closed from another thread while it waits.
    topic = f"sync-wait-{uuid.uuid4().hex}"
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(consumer.receive, 10_000)
            wait_until(lambda: consumer.async_consumer._receiver.threads_waiting == 1)  # type: ignore[union-attr]
            producer.send(b"later")
            assert waiting.result(10).data() == b"later"

            started = time.monotonic()
            with pytest.raises(Timeout):
                consumer.receive(200)
            assert 0.19 <= time.monotonic() - started < 5

            waiting = pool.submit(consumer.receive, 30_000)
            wait_until(lambda: consumer.async_consumer._receiver.threads_waiting == 1)  # type: ignore[union-attr]
            consumer.close()
            with pytest.raises(AlreadyClosed):
                waiting.result(10)


def test_acknowledgements_reach_the_broker_without_any_later_call(running: BrokerThread) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(25):
            producer.send(str(i).encode())
        for _ in range(25):
            consumer.acknowledge(consumer.receive(5_000))

        def backlog() -> int:
            stats = topic_stats(running.http, topic)
            return int(stats["subscriptions"]["sub"]["msgBacklog"])

        wait_until(lambda: backlog() == 0, 10)
