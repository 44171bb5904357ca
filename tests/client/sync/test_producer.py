"""The blocking ``Producer``: send and both flavours of send_async from threads, bad arguments
in the calling thread, the pending bound, callbacks that must not block the loop."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from client import Client, MessageId, ProducerQueueIsFull, Result
from tests.client.sync.helpers import new_topic, stored
from tests.helpers import BrokerThread, wait_until
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_send_and_both_flavours_of_send_async(running: BrokerThread) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        producer = client.create_producer(topic, producer_name="sync")
        first = producer.send(b"blocking")
        assert isinstance(first, MessageId)
        future = producer.send_async(b"future")
        assert future is not None
        results: list[tuple[Result, MessageId | None]] = []
        assert producer.send_async(b"callback", lambda r, m: results.append((r, m))) is None
        producer.flush()
        assert future.result(5).entry_id() == first.entry_id() + 1
        assert results == [(Result.Ok, MessageId(-1, first.ledger_id(), first.entry_id() + 2))]
        assert producer.last_sequence_id() == 2
        assert producer.producer_name() == "sync"
        assert producer.topic() == topic
        assert producer.is_connected()
    assert stored(running.url, topic) == [b"blocking", b"future", b"callback"]


def test_bad_arguments_fail_in_the_calling_thread(running: BrokerThread) -> None:
    with Client(running.url) as client:
        producer = client.create_producer(new_topic())
        with pytest.raises(TypeError):  # as the official BytesSchema
            producer.send("not bytes")
        with pytest.raises(ValueError):
            producer.send_async(b"x", properties={"a": 1})  # type: ignore[dict-item]
        with pytest.raises(ValueError):
            producer.send(b"x", sequence_id=-1)
        assert producer.send(b"fine").entry_id() == 0


def test_eight_threads_share_one_client_and_one_producer(running: BrokerThread) -> None:
    shared_topic = new_topic()
    with Client(running.url) as client:
        shared = client.create_producer(shared_topic, block_if_queue_full=True)
        errors: list[BaseException] = []
        own_topics = [new_topic() for _ in range(8)]

        def work(index: int) -> None:
            try:
                own = client.create_producer(own_topics[index], block_if_queue_full=True)
                futures = [own.send_async(f"{index}-{n}".encode()) for n in range(200)]
                for n in range(50):
                    shared.send(f"{index}:{n}".encode())
                own.flush()
                assert [f.result(10).entry_id() for f in futures if f] == list(range(200))
                own.close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert shared.last_sequence_id() == 8 * 50 - 1
    got = stored(running.url, shared_topic)
    assert sorted(got) == sorted(f"{i}:{n}".encode() for i in range(8) for n in range(50))
    for index in range(8):  # each thread's own messages in its order (submission is FIFO)
        assert [m for m in got if m.startswith(f"{index}:".encode())] == [
            f"{index}:{n}".encode() for n in range(50)
        ]
        assert stored(running.url, own_topics[index]) == [
            f"{index}-{n}".encode() for n in range(200)
        ]


def test_a_full_queue_refuses_without_blocking(running: BrokerThread) -> None:
    with TcpProxy(("127.0.0.1", running.port)) as proxy, Client(proxy.url) as client:
        producer = client.create_producer(new_topic(), max_pending_messages=5)
        proxy.stall()  # nothing is acknowledged while stalled
        results: list[Result] = []
        for n in range(8):
            producer.send_async(b"%d" % n, lambda r, _m: results.append(r))
        refused = producer.send_async(b"x")
        assert refused is not None
        with pytest.raises(ProducerQueueIsFull):
            refused.result(5)
        assert results.count(Result.ProducerQueueIsFull) == 3
        proxy.resume()
        producer.flush()
        assert results.count(Result.Ok) == 5


def test_a_blocking_call_from_a_callback_raises_instead_of_deadlocking(
    running: BrokerThread,
) -> None:
    with Client(running.url) as client:
        producer = client.create_producer(new_topic())
        seen: list[BaseException] = []

        def callback(_result: Result, _message_id: MessageId | None) -> None:
            try:
                producer.send(b"inner")
            except RuntimeError as exc:
                seen.append(exc)

        producer.send_async(b"outer", callback)
        producer.flush()
        wait_until(lambda: bool(seen))
        assert "deadlock" in str(seen[0])


def test_future_results_cross_threads(running: BrokerThread) -> None:
    with Client(running.url) as client:
        producer = client.create_producer(new_topic())
        futures = [producer.send_async(b"%d" % n) for n in range(100)]
        done, _ = concurrent.futures.wait([f for f in futures if f], timeout=10)
        assert len(done) == 100
