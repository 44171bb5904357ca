"""PIP-68 access modes with the official client against an in-process broker (X1-X9).

Scenario names follow reliability.md §1.6 (Pulsar's ``ExclusiveProducerTest``). The topic's
``producerAccess`` stats (epoch, holder, waiters) are read over the admin HTTP API, which is also
how the tests wait for a producer to be queued before starting the next one.

pulsar-client 3.13 (C++ 4.2.0) note, X7: the client arms a "start timeout" of
``operation_timeout_seconds`` when a producer is created and cancels it only once the producer is
ready, so a producer queued longer than the operation timeout fails with ``Timeout`` whatever the
broker does (the request timer itself is disarmed by the first PRODUCER_SUCCESS, as in Java).
The broker side of X7 is therefore checked on the wire with a raw socket, the official client is
checked queued for a long time within its timeout, and a client that gives up is checked not to
block the topic.
"""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pulsar
import pytest

from protocol import FrameDecoder, commands, pb
from protocol.enums import ProducerAccessMode
from tests.helpers import BrokerThread, access_stats, close_client, new_client, read_all, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]

T = pb.BaseCommand.Type
SHARED = pulsar.ProducerAccessMode.Shared
EXCLUSIVE = pulsar.ProducerAccessMode.Exclusive
WAIT = pulsar.ProducerAccessMode.WaitForExclusive
FENCING = pulsar.ProducerAccessMode.ExclusiveWithFencing


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = new_client(broker.url)
    try:
        yield c
    finally:
        close_client(c)


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    """Threads for producer creations that block while queued."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def topic_name() -> str:
    return f"persistent://public/default/excl-{uuid.uuid4().hex[:10]}"


def queue_producer(
    pool: ThreadPoolExecutor,
    broker: BrokerThread,
    client: pulsar.Client,
    topic: str,
    name: str,
) -> Future[pulsar.Producer]:
    """Start a WaitForExclusive creation and return once the broker has queued it."""
    pending = pool.submit(client.create_producer, topic, producer_name=name, access_mode=WAIT)
    wait_until(
        lambda: name in access_stats(broker.http, topic)["waitingProducers"] or pending.done()
    )
    assert not pending.done(), "expected the producer to be queued"
    return pending


# ------------------------------------------------------------------------ X1, X2, X8


def test_x1_second_exclusive_is_fenced_and_shared_is_busy(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    p1.send(b"p1-0")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="p2", access_mode=EXCLUSIVE)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="p3", access_mode=SHARED)
    assert access_stats(broker.http, topic)["exclusiveHolder"] == "p1"
    p1.close()
    p2 = client.create_producer(topic, producer_name="p2", access_mode=EXCLUSIVE)
    p2.send(b"p2-0")
    assert read_all(client, topic) == [b"p1-0", b"p2-0"]
    assert access_stats(broker.http, topic)["topicEpoch"] == 1


def test_x2_exclusive_is_refused_while_shared_producers_exist(
    broker: BrokerThread, client: pulsar.Client, background: ThreadPoolExecutor
) -> None:
    topic = topic_name()
    s1 = client.create_producer(topic, producer_name="s1", access_mode=SHARED)
    s2 = client.create_producer(topic, producer_name="s2", access_mode=SHARED)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="x", access_mode=EXCLUSIVE)
    # WaitForExclusive queues behind Shared producers and gets the topic once the last leaves.
    waiting = queue_producer(background, broker, client, topic, "w")
    s1.close()
    assert not waiting.done()
    s2.close()
    waiter = waiting.result(10)
    waiter.send(b"w-0")
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "w"
    assert stats["sharedProducers"] == 0


def test_x8_consumers_do_not_count_as_writers(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = topic_name()
    consumer = client.subscribe(topic, "sub")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    p1.send(b"m-0")
    assert consumer.receive(5000).data() == b"m-0"
    assert reader.read_next(5000).data() == b"m-0"
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="p2", access_mode=EXCLUSIVE)


# ------------------------------------------------------------------------ X3, X4, X5


def _admin(broker: BrokerThread, path: str, method: str) -> int:
    request = urllib.request.Request(f"{broker.http}{path}", method=method)
    with urllib.request.urlopen(request) as response:
        status: int = response.status
    return status


@pytest.mark.parametrize("mode", [EXCLUSIVE, WAIT])
def test_x3_holder_keeps_the_topic_across_an_unload(
    broker: BrokerThread, client: pulsar.Client, mode: pulsar.ProducerAccessMode
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=mode)
    p1.send(b"before")
    path = topic.removeprefix("persistent://")
    assert _admin(broker, f"/admin/v2/persistent/{path}/unload", "PUT") == 204
    # The producer reconnects with the topic epoch it was given and keeps exclusivity.
    p1.send(b"after")
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "p1"
    assert stats["topicEpoch"] == 0
    assert read_all(client, topic) == [b"before", b"after"]


def test_x4_epoch_bumped_behind_the_holder_fences_it(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    p1.send(b"before")
    assert broker.broker is not None
    assert broker.broker.service is not None
    loaded = broker.broker.service.topics[topic]

    async def bump() -> int:
        return await loaded.producers.increment_epoch()

    assert broker.call(bump) == 1
    with pytest.raises(pulsar.ProducerFenced):
        p1.send(b"after")
    with pytest.raises(pulsar.ProducerFenced):
        p1.send(b"again")
    # A new producer (no epoch of its own) can take the topic; the old one stays fenced.
    p2 = client.create_producer(topic, producer_name="p2", access_mode=EXCLUSIVE)
    p2.send(b"p2")
    assert read_all(client, topic) == [b"before", b"p2"]
    assert access_stats(broker.http, topic)["topicEpoch"] == 2


def test_x5_topic_deleted_under_the_holder_is_recreated(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    p1.send(b"gone")
    path = topic.removeprefix("persistent://")
    assert _admin(broker, f"/admin/v2/persistent/{path}", "DELETE") == 204
    p1.send(b"recreated")
    assert read_all(client, topic) == [b"recreated"]
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "p1"
    assert stats["topicEpoch"] == 0  # the producer's epoch, adopted by the new topic


# ------------------------------------------------------------------------ X6, X7: WaitForExclusive


def test_x6_waiters_are_promoted_in_fifo_order(
    broker: BrokerThread, client: pulsar.Client, background: ThreadPoolExecutor
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=WAIT)
    p1.send(b"p1")
    second = queue_producer(background, broker, client, topic, "p2")
    third = queue_producer(background, broker, client, topic, "p3")
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "p1"
    assert stats["waitingProducers"] == ["p2", "p3"]
    assert stats["topicEpoch"] == 0

    p1.close()
    p2 = second.result(10)
    assert not third.done()
    assert access_stats(broker.http, topic)["waitingProducers"] == ["p3"]
    p2.send(b"p2")
    p2.close()
    p3 = third.result(10)
    p3.send(b"p3")
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "p3"
    assert stats["waitingProducers"] == []
    assert stats["topicEpoch"] == 2
    assert read_all(client, topic) == [b"p1", b"p2", b"p3"]


def test_x6_waiter_that_disconnects_leaves_the_queue(
    broker: BrokerThread, client: pulsar.Client, background: ThreadPoolExecutor
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    leaving_client = new_client(broker.url)
    leaving = queue_producer(background, broker, leaving_client, topic, "leaving")
    staying = queue_producer(background, broker, client, topic, "staying")
    leaving_client.close()
    wait_until(lambda: access_stats(broker.http, topic)["waitingProducers"] == ["staying"])
    with pytest.raises(pulsar.PulsarException):
        leaving.result(10)
    p1.close()
    staying.result(10).send(b"staying")
    assert access_stats(broker.http, topic)["exclusiveHolder"] == "staying"


def test_x7_client_stays_queued_for_seconds_then_is_promoted(
    broker: BrokerThread, background: ThreadPoolExecutor
) -> None:
    topic = topic_name()
    holder_client, waiting_client = (
        new_client(broker.url),
        new_client(broker.url, operation_timeout=5),
    )
    try:
        p1 = holder_client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
        pending = queue_producer(background, broker, waiting_client, topic, "p2")
        time.sleep(2.5)  # longer than a request round trip could ever be left unanswered
        assert not pending.done()
        p1.close()
        pending.result(10).send(b"p2")
        assert access_stats(broker.http, topic)["exclusiveHolder"] == "p2"
    finally:
        holder_client.close()
        waiting_client.close()


class RawProducerClient:
    """A bare protocol client: enough to watch the broker's PRODUCER answers frame by frame."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = FrameDecoder()
        self.sock.sendall(commands.connect("raw-pip68", protocol_version=20))
        assert self.next_frame(5).type == T.CONNECTED

    def next_frame(self, timeout: float) -> Any:
        """The next frame other than PING (answered), or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.decoder:
                if frame.type == T.PING:
                    self.sock.sendall(commands.pong())
                    continue
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            assert data, "broker closed the connection"
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


def test_x7_broker_answers_a_queued_producer_at_once_and_again_on_promotion(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    raw = RawProducerClient(broker.port)
    try:
        raw.sock.sendall(
            commands.producer(
                topic,
                producer_id=7,
                request_id=42,
                producer_name="raw",
                access_mode=ProducerAccessMode.WaitForExclusive,
            )
        )
        queued = raw.next_frame(5)
        assert queued is not None
        assert queued.type == T.PRODUCER_SUCCESS
        assert queued.command.producer_success.request_id == 42
        assert queued.command.producer_success.producer_ready is False
        # Nothing else while the holder lives (pings are answered by next_frame).
        assert raw.next_frame(2.0) is None
        p1.close()
        promoted = raw.next_frame(5)
        assert promoted is not None
        assert promoted.type == T.PRODUCER_SUCCESS
        success = promoted.command.producer_success
        assert success.request_id == 42
        assert success.producer_ready is True
        assert success.HasField("topic_epoch")
        assert success.topic_epoch == 1
    finally:
        raw.close()


def test_x7_a_client_that_gives_up_waiting_does_not_block_the_topic(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    """C++ 4.2.0 fails the queued creation after ``operation_timeout_seconds``; its request stays
    queued at the broker, and once promoted the client closes it (it no longer wants it)."""
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    impatient = new_client(broker.url, operation_timeout=1)
    try:
        with pytest.raises(pulsar.Timeout):
            impatient.create_producer(topic, producer_name="impatient", access_mode=WAIT)
        p1.close()
        wait_until(lambda: access_stats(broker.http, topic)["exclusiveHolder"] is None)
        p2 = client.create_producer(topic, producer_name="p2", access_mode=EXCLUSIVE)
        p2.send(b"p2")
        assert access_stats(broker.http, topic)["exclusiveHolder"] == "p2"
    finally:
        impatient.close()


# ------------------------------------------------------------------------ X9: fencing


def test_x9_exclusive_with_fencing_takes_over_and_fails_the_waiters(
    broker: BrokerThread, client: pulsar.Client, background: ThreadPoolExecutor
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    p1.send(b"p1-before")
    waiters = [queue_producer(background, broker, client, topic, f"w{i}") for i in range(2)]
    fencer = client.create_producer(topic, producer_name="fencer", access_mode=FENCING)
    for waiter in waiters:
        with pytest.raises(pulsar.ProducerFenced):
            waiter.result(10)
    with pytest.raises(pulsar.ProducerFenced):
        p1.send(b"p1-after")
    fencer.send(b"fencer")
    stats = access_stats(broker.http, topic)
    assert stats["exclusiveHolder"] == "fencer"
    assert stats["exclusiveHolderMode"] == "ExclusiveWithFencing"
    assert stats["waitingProducers"] == []
    assert stats["topicEpoch"] == 1
    assert read_all(client, topic) == [b"p1-before", b"fencer"]


def test_x9_fencing_also_stops_shared_producers(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = topic_name()
    shared = client.create_producer(
        topic, producer_name="s1", access_mode=SHARED, send_timeout_millis=1000
    )
    shared.send(b"s1-before")
    fencer = client.create_producer(topic, producer_name="fencer", access_mode=FENCING)
    # A Shared producer carries no epoch: its reconnection is refused with ProducerBusy (which
    # the client retries) while the fencer holds the topic, so its send times out.
    with pytest.raises(pulsar.Timeout):
        shared.send(b"s1-after")
    fencer.send(b"fencer")
    assert read_all(client, topic) == [b"s1-before", b"fencer"]


def test_x9_fenced_producer_reconnecting_is_refused_for_good(
    broker: BrokerThread, client: pulsar.Client
) -> None:
    topic = topic_name()
    p1 = client.create_producer(topic, producer_name="p1", access_mode=EXCLUSIVE)
    p1.send(b"p1")
    fencer = client.create_producer(topic, producer_name="fencer", access_mode=FENCING)
    fencer.close()  # the topic is free again, but p1's epoch is stale forever
    with pytest.raises(pulsar.ProducerFenced):
        p1.send(b"p1-late")
    assert access_stats(broker.http, topic)["exclusiveHolder"] is None
    assert read_all(client, topic) == [b"p1"]
