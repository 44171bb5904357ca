"""The blocking facade: ``Client`` and ``Producer`` from threads, callbacks, fork, hygiene."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from client import Client, ClientUsedAfterFork, MessageId, ProducerQueueIsFull, Result
from client.errors import AlreadyClosed, OperationNotSupported, Timeout
from tests.helpers import (
    BrokerThread,
    close_client,
    new_client,
    topic_stats,
    wait_until,
)
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def new_topic() -> str:
    return f"persistent://public/default/sync-{uuid.uuid4().hex[:10]}"


def stored(url: str, topic: str) -> list[bytes]:
    official = new_client(url)
    try:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).data())
        return out
    finally:
        close_client(official)


def sockets_to(port: int) -> int:
    """Established TCP sockets of this process whose peer is 127.0.0.1:``port``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


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
        with pytest.raises(ValueError):
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


def test_close_leaves_no_thread_and_no_socket(running: BrokerThread) -> None:
    before = sockets_to(running.port)
    client = Client(running.url)
    producer = client.create_producer(new_topic())
    producer.send(b"x")
    assert sockets_to(running.port) == before + 1
    thread = client.loop_thread
    assert thread.is_alive()
    client.close()
    assert not thread.is_alive()
    assert thread not in threading.enumerate()
    assert sockets_to(running.port) == before
    with pytest.raises(AlreadyClosed):
        producer.send(b"y")
    with pytest.raises(AlreadyClosed):
        client.create_producer(new_topic())
    client.close()  # idempotent


def test_a_client_from_before_fork_is_refused_in_the_child_and_a_new_one_works(
    running: BrokerThread, tmp_path: Path
) -> None:
    topic = new_topic()
    report = tmp_path / "child.txt"
    with Client(running.url) as client:
        producer = client.create_producer(topic)
        producer.send(b"parent-before")
        pid = os.fork()
        if pid == 0:  # the child: report in a file, leave with os._exit
            outcome = "?"
            try:
                try:
                    producer.send(b"inherited")
                    outcome = "inherited producer worked"
                except ClientUsedAfterFork as exc:
                    outcome = "refused:" + str(exc)
                try:
                    client.create_producer(topic)
                    outcome += "|inherited client worked"
                except ClientUsedAfterFork:
                    outcome += "|client refused"
                client.close()  # harmless in the child
                with Client(running.url) as fresh:
                    fresh.create_producer(topic).send(b"child")
                outcome += "|fresh client sent"
            except BaseException as exc:
                outcome += f"|error {exc!r}"
            report.write_text(outcome)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        outcome = report.read_text()
        assert outcome.startswith("refused:")
        assert "create a new Client in the child" in outcome
        assert outcome.endswith("|client refused|fresh client sent")
        producer.send(b"parent-after")  # the parent's client is untouched
    assert stored(running.url, topic) == [b"parent-before", b"child", b"parent-after"]


def test_future_results_cross_threads(running: BrokerThread) -> None:
    with Client(running.url) as client:
        producer = client.create_producer(new_topic())
        futures = [producer.send_async(b"%d" % n) for n in range(100)]
        done, _ = concurrent.futures.wait([f for f in futures if f], timeout=10)
        assert len(done) == 100


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
            wait_until(lambda: consumer.async_consumer._threads_waiting == 1)  # type: ignore[union-attr]
            producer.send(b"later")
            assert waiting.result(10).data() == b"later"

            started = time.monotonic()
            with pytest.raises(Timeout):
                consumer.receive(200)
            assert 0.19 <= time.monotonic() - started < 5

            waiting = pool.submit(consumer.receive, 30_000)
            wait_until(lambda: consumer.async_consumer._threads_waiting == 1)  # type: ignore[union-attr]
            consumer.close()
            with pytest.raises(AlreadyClosed):
                waiting.result(10)


def test_last_message_id_proves_acks_arrived_and_readers_read_through_the_fast_path(
    running: BrokerThread,
) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        consumer = client.subscribe(topic, "sub", receiver_queue_size=4)
        reader = client.create_reader(topic, MessageId.earliest, receiver_queue_size=4)
        assert consumer.get_last_message_id().entry_id() == -1  # empty topic
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [producer.send(str(i).encode()) for i in range(12)]
        assert consumer.get_last_message_id() == sent[-1]
        assert reader.get_last_message_id() == sent[-1]
        # A reader reads through the consumer facade's fast path: a 4-message queue, 12
        # messages, in order (a permit not returned would stall it at the 5th).
        assert [reader.read_next(5_000).message_id() for _ in range(12)] == sent
        assert not reader.has_message_available()
        for _ in range(12):
            consumer.acknowledge(consumer.receive(5_000))
        # The acknowledgements are fire-and-forget; the answer comes after them.
        consumer.get_last_message_id()
        stats = topic_stats(running.http, topic)
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 0


def test_topics_of_namespace_lists_the_partitions_of_a_partitioned_topic(
    running: BrokerThread,
) -> None:
    name = f"sync-ns-{uuid.uuid4().hex[:8]}"
    request = urllib.request.Request(
        f"{running.http}/admin/v2/persistent/public/default/{name}/partitions",
        data=b"2",
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()
    with Client(running.url) as client:
        full = f"persistent://public/default/{name}"
        assert client.get_topic_partitions(name) == [f"{full}-partition-{i}" for i in (0, 1)]
        # Partitions show up in the namespace's list once they exist as topics.
        client.create_producer(name).close()
        listed = client.get_topics_of_namespace("public/default")
        assert {f"{full}-partition-0", f"{full}-partition-1"} <= set(listed)
        consumer = client.subscribe(name, "sub")
        with pytest.raises(OperationNotSupported):
            consumer.get_last_message_id()


def test_deferred_submissions_share_wakeups_and_keep_their_order_with_the_others() -> None:
    """Acknowledgements go to the loop deferred: thousands of them must wake the loop a few
    dozen times, not once each, and still run in submission order with the immediate ones."""
    from client.sync import _LoopThread

    thread = _LoopThread()
    try:
        wakeups = 0
        original = thread.loop.call_soon_threadsafe

        def counting(*args: Any) -> Any:
            nonlocal wakeups
            wakeups += 1
            return original(*args)

        thread.loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        ran: list[int] = []
        done = threading.Event()
        for i in range(10_000):
            if i % 1000 == 999:
                thread.call_soon(ran.append, i)
            else:
                thread.call_deferred(ran.append, i)
        thread.call_deferred(lambda: done.set())
        assert done.wait(10)  # nothing submitted after it: the deferral alone delivers it
        assert ran == list(range(10_000))
        assert wakeups < 500, wakeups
    finally:
        thread.stop()


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
