"""PIP-68 under dropped connections (reliability.md R10), with the official client.

The exclusive holder talks to the broker through ``tests.tcp_proxy.TcpProxy`` while it publishes
continuously; the proxy then stalls its connection (a partition: bytes held, sockets open) or cuts
it (a reset) and refuses reconnection. A new producer, connected directly, takes over:
ExclusiveWithFencing at once, or WaitForExclusive once the broker's keepalive
(``keepAliveIntervalSeconds=1`` here) drops the silent connection, or a same-name producer after
the broker pinged the old connection in vain. Then the fault heals.

What must hold every time (PIP-68: "once a producer loses the exclusive access, no more messages
from that producer can be published"):

* the old holder's entries in the topic are exactly those stored when the new holder was granted
  the topic (a reader started right after the grant sees them all, since the grant waits for
  earlier writes to be durable), and all of them come before the new holder's first entry;
* every send of the old holder that got a receipt is stored; every other one fails with
  ``ProducerFenced``, and so does its next send.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pulsar
import pytest

from tests.helpers import (
    BrokerThread,
    access_stats,
    broker_config,
    close_client,
    new_client,
    read_all,
    wait_until,
)
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]

EXCLUSIVE = pulsar.ProducerAccessMode.Exclusive
WAIT = pulsar.ProducerAccessMode.WaitForExclusive
FENCING = pulsar.ProducerAccessMode.ExclusiveWithFencing
KEEPALIVE_S = 1


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A broker that drops a connection after one silent keepalive interval (1-2 s)."""
    running = BrokerThread(
        broker_config(tmp_path / "data", keep_alive_interval_seconds=KEEPALIVE_S)
    ).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def proxy(broker: BrokerThread) -> Iterator[TcpProxy]:
    with TcpProxy(("127.0.0.1", broker.port)) as running:
        yield running


@pytest.fixture
def direct(broker: BrokerThread) -> Iterator[pulsar.Client]:
    """A client that reaches the broker without the proxy: the new holder, readers."""
    client = new_client(broker.url)
    try:
        yield client
    finally:
        close_client(client)


@pytest.fixture
def proxied(proxy: TcpProxy) -> Iterator[pulsar.Client]:
    """The old holder's client, whose connection the proxy stalls or cuts."""
    client = new_client(proxy.url)
    try:
        yield client
    finally:
        close_client(client)


def topic_name() -> str:
    return f"persistent://public/default/fault-{uuid.uuid4().hex[:10]}"


class ContinuousWriter:
    """Publishes ``old-<n>`` with ``send_async`` every few milliseconds from a thread and records
    each send's result; stops by itself after the first failure."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self.results: dict[int, pulsar.Result] = {}
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ContinuousWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, n: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            with self._lock:
                self.results[n] = result
            if result != pulsar.Result.Ok:
                self._stop.set()

        return done

    def _run(self) -> None:
        while not self._stop.is_set():
            n = self.sent
            self.producer.send_async(f"old-{n}".encode(), self._record(n))
            self.sent = n + 1
            time.sleep(0.003)

    def wait_sent(self, more: int) -> None:
        target = self.sent + more
        wait_until(lambda: self.sent >= target)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def wait_all_results(self) -> None:
        wait_until(lambda: len(self.results) == self.sent, timeout=30)

    def acked(self) -> set[bytes]:
        with self._lock:
            return {f"old-{n}".encode() for n, r in self.results.items() if r == pulsar.Result.Ok}

    def failures(self) -> set[pulsar.Result]:
        with self._lock:
            return {r for r in self.results.values() if r != pulsar.Result.Ok}


def write_new(producer: pulsar.Producer, count: int = 20) -> None:
    for n in range(count):
        producer.send(f"new-{n}".encode())


def assert_old_holder_fenced_cleanly(
    writer: ContinuousWriter, old_at_takeover: list[bytes], final: list[bytes]
) -> None:
    writer.wait_all_results()
    old = [entry for entry in final if entry.startswith(b"old-")]
    new_positions = [i for i, entry in enumerate(final) if entry.startswith(b"new-")]
    assert new_positions, "the new holder wrote nothing"
    # Nothing of the old holder was stored after it lost the topic ...
    assert old == old_at_takeover
    assert all(entry.startswith(b"old-") for entry in final[: new_positions[0]])
    assert all(entry.startswith(b"new-") for entry in final[new_positions[0] :])
    assert len(set(old)) == len(old)
    # ... everything it was told was stored is there, everything else failed as fenced.
    assert writer.acked() <= set(old)
    assert writer.failures() == {pulsar.Result.ProducerFenced}
    with pytest.raises(pulsar.ProducerFenced):
        writer.producer.send(b"old-late")


# ------------------------------------------------------------------------ stall / cut + fencing


def test_fencing_producer_takes_over_from_a_stalled_holder(
    broker: BrokerThread, proxy: TcpProxy, proxied: pulsar.Client, direct: pulsar.Client
) -> None:
    topic = topic_name()
    old_holder = proxied.create_producer(topic, producer_name="old", access_mode=EXCLUSIVE)
    with ContinuousWriter(old_holder) as writer:
        writer.wait_sent(50)
        proxy.stall()
        writer.wait_sent(20)  # these sit in the partition
        new_holder = direct.create_producer(topic, producer_name="new", access_mode=FENCING)
        old_at_takeover = read_all(direct, topic)
        write_new(new_holder)
        proxy.resume()
    assert access_stats(broker.http, topic)["exclusiveHolder"] == "new"
    assert_old_holder_fenced_cleanly(writer, old_at_takeover, read_all(direct, topic))


def test_fencing_producer_takes_over_from_a_cut_holder(
    broker: BrokerThread, proxy: TcpProxy, proxied: pulsar.Client, direct: pulsar.Client
) -> None:
    topic = topic_name()
    old_holder = proxied.create_producer(topic, producer_name="old", access_mode=EXCLUSIVE)
    with ContinuousWriter(old_holder) as writer:
        writer.wait_sent(50)
        proxy.refuse(True)
        assert proxy.cut() >= 1
        writer.wait_sent(20)  # queued in the client while it cannot reconnect
        new_holder = direct.create_producer(topic, producer_name="new", access_mode=FENCING)
        old_at_takeover = read_all(direct, topic)
        write_new(new_holder)
        proxy.refuse(False)
    assert_old_holder_fenced_cleanly(writer, old_at_takeover, read_all(direct, topic))
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "new"
    assert stats["topicEpoch"] == 1


# ------------------------------------------------------------------------ keepalive + waiting


def test_waiting_producer_takes_over_once_keepalive_drops_a_stalled_holder(
    broker: BrokerThread, proxy: TcpProxy, proxied: pulsar.Client, direct: pulsar.Client
) -> None:
    topic = topic_name()
    old_holder = proxied.create_producer(topic, producer_name="old", access_mode=EXCLUSIVE)
    with ContinuousWriter(old_holder) as writer, ThreadPoolExecutor(1) as pool:
        writer.wait_sent(50)
        proxy.stall()
        pending = pool.submit(direct.create_producer, topic, producer_name="new", access_mode=WAIT)
        # Queued first: the broker has not noticed anything yet.
        wait_until(lambda: access_stats(broker.http, topic)["waitingProducers"] == ["new"])
        new_holder = pending.result(15)  # promoted when keepalive closes the silent connection
        old_at_takeover = read_all(direct, topic)
        write_new(new_holder)
        proxy.resume()
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "new"
    assert stats["topicEpoch"] == 1
    assert_old_holder_fenced_cleanly(writer, old_at_takeover, read_all(direct, topic))


# ------------------------------------------------------------------------ same name, new connection


def test_same_name_from_a_new_connection_evicts_a_holder_that_does_not_answer_a_ping(
    broker: BrokerThread, proxy: TcpProxy, proxied: pulsar.Client, direct: pulsar.Client
) -> None:
    """The application restarted on another host while the old process hangs (half-open TCP):
    the broker pings the old connection and, with no answer, hands the name and topic over."""
    topic = topic_name()
    old_holder = proxied.create_producer(topic, producer_name="app", access_mode=EXCLUSIVE)
    with ContinuousWriter(old_holder) as writer:
        writer.wait_sent(50)
        proxy.stall()
        writer.wait_sent(20)
        new_holder = direct.create_producer(topic, producer_name="app", access_mode=EXCLUSIVE)
        old_at_takeover = read_all(direct, topic)
        write_new(new_holder)
        proxy.resume()
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "app"
    assert stats["topicEpoch"] == 1
    assert_old_holder_fenced_cleanly(writer, old_at_takeover, read_all(direct, topic))


def test_same_name_from_a_new_connection_is_refused_while_the_holder_answers(
    broker: BrokerThread, direct: pulsar.Client
) -> None:
    topic = topic_name()
    holder = direct.create_producer(topic, producer_name="app", access_mode=EXCLUSIVE)
    other = new_client(broker.url)
    try:
        with pytest.raises(pulsar.ProducerFenced):
            other.create_producer(topic, producer_name="app", access_mode=EXCLUSIVE)
        with pytest.raises(pulsar.ProducerBusy):
            other.create_producer(topic, producer_name="app")
    finally:
        other.close()
    holder.send(b"still mine")
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "app"
    assert stats["topicEpoch"] == 0
