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


def _queued(consumer: object, count: int) -> bool:
    return consumer.async_consumer.queued == count  # type: ignore[attr-defined, no-any-return]


def test_a_run_taken_ahead_is_dropped_when_the_queue_is_cleared(running: BrokerThread) -> None:
    # A durable consumer's receive takes a run of queued messages at once (one lock, not one
    # per message). Redelivering everything clears the queue: the rest of that run must go
    # too, or its messages would come twice, ahead of the redelivered ones.
    topic = new_topic()
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub", receiver_queue_size=64)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(str(i).encode())
        wait_until(lambda: _queued(consumer, 20))
        queue = consumer.async_consumer.receiver_queue  # type: ignore[union-attr]
        assert consumer.receive(5_000).data() == b"0"
        assert 0 < len(queue.messages) < 19  # the rest of a run is taken
        generation = queue.generation
        consumer.redeliver_unacknowledged_messages()
        wait_until(lambda: queue.generation != generation)
        received = [consumer.receive(5_000).data() for _ in range(20)]
        assert received == [str(i).encode() for i in range(20)]


def test_batch_receive_sees_the_rest_of_a_run_first(running: BrokerThread) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(str(i).encode())
        wait_until(lambda: _queued(consumer, 10))
        assert consumer.receive(5_000).data() == b"0"
        assert _queued(consumer, 0)  # the other nine were taken with it
        batch = consumer.batch_receive(9, 5_000)
        assert [m.data() for m in batch] == [str(i).encode() for i in range(1, 10)]


def test_acknowledgements_of_batched_messages_complete_their_entries(
    running: BrokerThread,
) -> None:
    # The blocking consumer hands its acknowledgements to the loop a window at a time; an
    # entry of a batch is acknowledged once every message of it is, and not before.
    topic = new_topic()

    def backlog() -> int:
        stats = topic_stats(running.http, topic)
        return int(stats["subscriptions"]["sub"]["msgBacklog"])

    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=60_000,
        )
        for i in range(30):
            producer.send_async(str(i).encode(), None)
        producer.flush()
        messages = [consumer.receive(5_000) for _ in range(30)]
        assert len({m.message_id().entry_id() for m in messages}) == 3  # three batches
        for message in messages[:-1]:
            consumer.acknowledge(message)
        consumer.get_last_message_id()  # answered after the acknowledgements reached the broker
        assert backlog() >= 1  # the last batch is not done: its entry is still unacknowledged
        consumer.acknowledge(messages[-1])
        wait_until(lambda: backlog() == 0, 10)
