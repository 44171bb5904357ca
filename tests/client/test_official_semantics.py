"""Our client behaves as the official one (issue #23): seeks, redelivery with a dead-letter
policy, readers at ``latest``, zero queues, closing, batch receive and the small missing calls.

Where the behaviour is visible from another client, the official ``pulsar-client`` runs the
same steps against the same broker and the outcomes are compared. Only official names are
imported from ``client``.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from client import (
    AlreadyClosed,
    Client,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    CumulativeAcknowledgementNotAllowedError,
    InitialPosition,
    InvalidConfiguration,
    MessageId,
    Timeout,
)
from tests.helpers import BrokerThread, wait_until

EARLIEST = InitialPosition.Earliest


def new_topic() -> str:
    return f"persistent://public/default/semantics-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def official(running: BrokerThread) -> Iterator[pulsar.Client]:
    handle = pulsar.Client(running.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def ours(running: BrokerThread) -> Iterator[Client]:
    with Client(running.url) as handle:
        yield handle


def publish(client: Any, topic: str, count: int, prefix: str = "m") -> list[Any]:
    producer = client.create_producer(topic)
    ids = [producer.send(f"{prefix}{i}".encode()) for i in range(count)]
    producer.close()
    return ids


# --- seek --------------------------------------------------------------------------------


def test_acknowledgements_made_before_a_seek_do_not_land_after_it(ours: Client) -> None:
    """Acks are grouped (up to 100 ms): sent after the rewind, they would acknowledge what the
    rewind brings back, and a later consumer of the subscription would never see it."""
    topic = new_topic()
    publish(ours, topic, 5)
    consumer = ours.subscribe(topic, "sub", initial_position=EARLIEST)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(5000))
    consumer.seek(MessageId.earliest)
    assert [consumer.receive(5000).data() for _ in range(5)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    consumer.close()  # nothing acknowledged since the seek
    again = ours.subscribe(topic, "sub")
    assert [again.receive(5000).data() for _ in range(5)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]


@pytest.mark.parametrize("inclusive", [False, True])
def test_a_seek_by_id_excludes_that_message_unless_inclusive_as_the_official(
    ours: Client, official: pulsar.Client, inclusive: bool
) -> None:
    topic = new_topic()
    ids = publish(ours, topic, 4)
    firsts = []
    for client, target in ((official, None), (ours, ids[1])):
        consumer = client.subscribe(
            topic,
            f"seek-{type(client).__module__}-{inclusive}",
            initial_position=pulsar.InitialPosition.Earliest if client is official else EARLIEST,
            start_message_id_inclusive=inclusive,
        )
        received = [consumer.receive(5000) for _ in range(4)]
        consumer.seek(received[1].message_id() if target is None else target)
        firsts.append(consumer.receive(5000).data())
        consumer.close()
    assert firsts[0] == firsts[1] == (b"m1" if inclusive else b"m2")


def test_a_reader_seek_by_id_excludes_that_message(ours: Client) -> None:
    topic = new_topic()
    ids = publish(ours, topic, 3)
    reader = ours.create_reader(topic, MessageId.earliest)
    reader.read_next(5000)
    reader.seek(ids[1])
    assert reader.read_next(5000).data() == b"m2"
    reader.close()


# --- dead letters ------------------------------------------------------------------------


def test_redelivering_everything_honours_the_dead_letter_policy(ours: Client) -> None:
    """``redeliver_unacknowledged_messages`` brings the message back with a growing count;
    past ``max_redeliver_count`` it goes to the dead-letter topic instead (it came back with
    count 6 and never reached it)."""
    topic = new_topic()
    consumer = ours.subscribe(
        topic,
        "work",
        ConsumerType.Shared,
        dead_letter_policy=ConsumerDeadLetterPolicy(2, dead_letter_topic=topic + "-dlq"),
    )
    dead = ours.subscribe(topic + "-dlq", "dead")
    publish(ours, topic, 1, prefix="poison")
    for expected in (0, 1, 2):
        message = consumer.receive(5000)
        assert message.redelivery_count() == expected
        consumer.redeliver_unacknowledged_messages()
    buried = dead.receive(5000)
    assert buried.data() == b"poison0"
    assert buried.properties()["REAL_TOPIC"] == topic
    with pytest.raises(Timeout):
        consumer.receive(500)  # acknowledged once stored in the dead-letter topic


# --- readers -----------------------------------------------------------------------------


def test_a_reader_at_latest_inclusive_reads_the_last_message(
    ours: Client, official: pulsar.Client
) -> None:
    topic = new_topic()
    publish(ours, topic, 3)
    reader = ours.create_reader(topic, MessageId.latest, start_message_id_inclusive=True)
    assert reader.read_next(5000).data() == b"m2"
    with pytest.raises(Timeout):
        reader.read_next(300)
    reader.close()
    # The official client gets there once asked whether a message is available (its
    # read_next alone times out); ours answers the same.
    for client, latest in ((official, pulsar.MessageId.latest), (ours, MessageId.latest)):
        other = client.create_reader(topic, latest, start_message_id_inclusive=True)
        assert other.has_message_available()
        assert other.read_next(5000).data() == b"m2"
        other.close()


def test_a_reader_at_latest_inclusive_on_an_empty_topic_waits_for_the_next(ours: Client) -> None:
    topic = new_topic()
    reader = ours.create_reader(topic, MessageId.latest, start_message_id_inclusive=True)
    publish(ours, topic, 1)
    assert reader.read_next(5000).data() == b"m0"
    reader.close()


# --- acknowledgement errors --------------------------------------------------------------


def test_a_blocking_cumulative_ack_on_shared_raises_as_the_official(
    ours: Client, official: pulsar.Client
) -> None:
    topic = new_topic()
    publish(ours, topic, 1)
    for client, shared in ((official, pulsar.ConsumerType.Shared), (ours, ConsumerType.Shared)):
        consumer = client.subscribe(
            topic,
            f"shared-{type(client).__module__}",
            shared,
            initial_position=pulsar.InitialPosition.Earliest if client is official else EARLIEST,
        )
        message = consumer.receive(5000)
        refused = (
            pulsar.CumulativeAcknowledgementNotAllowedError
            if client is official
            else CumulativeAcknowledgementNotAllowedError
        )
        with pytest.raises(refused):
            consumer.acknowledge_cumulative(message)
        with pytest.raises(refused):
            consumer.acknowledge_cumulative(message.message_id())
        consumer.close()


# --- zero queue --------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["official", "ours"])
def test_a_zero_queue_consumer_takes_one_message_per_receive(
    ours: Client, official: pulsar.Client, which: str
) -> None:
    """Two Shared consumers: the zero-queue one gets only what it asked for, one message per
    receive; the other gets the rest. The official consumer does the same on our broker."""
    client: Any = official if which == "official" else ours
    shared = pulsar.ConsumerType.Shared if which == "official" else ConsumerType.Shared
    topic = new_topic()
    zero = client.subscribe(topic, "sub", shared, receiver_queue_size=0)
    other = ours.subscribe(topic, "sub", ConsumerType.Shared)
    with pytest.raises(Exception) as refused:
        zero.receive(100)  # as the C++ client: a zero queue cannot time out
    assert type(refused.value).__name__ == "InvalidConfiguration"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(zero.receive)
        publish(ours, topic, 10)
        got = first.result(10).data()
    rest = [other.receive(5000).data() for _ in range(9)]
    assert sorted([got, *rest]) == sorted(f"m{i}".encode() for i in range(10))
    with pytest.raises(Timeout):
        other.receive(300)
    zero.close()
    other.close()


def test_our_zero_queue_refuses_a_timeout_with_the_official_error(ours: Client) -> None:
    consumer = ours.subscribe(new_topic(), "sub", receiver_queue_size=0)
    with pytest.raises(InvalidConfiguration):
        consumer.receive(100)
    consumer.close()


# --- closing -----------------------------------------------------------------------------


def test_closing_a_producer_twice_raises_already_closed_as_the_official(
    ours: Client, official: pulsar.Client
) -> None:
    topic = new_topic()
    for client in (official, ours):
        producer = client.create_producer(topic)
        producer.close()
        with pytest.raises(AlreadyClosed if client is ours else pulsar.AlreadyClosed):
            producer.close()


def test_closing_a_consumer_twice_is_harmless_as_in_the_official_core(ours: Client) -> None:
    """The official C++ consumer's second close succeeds (its Python wrapper then trips over
    its own bookkeeping with a ``ValueError`` from ``list.remove``, which is no API)."""
    consumer = ours.subscribe(new_topic(), "sub")
    consumer.close()
    consumer.close()
    with pytest.raises(AlreadyClosed):
        consumer.receive(100)


def test_shutdown_closes_at_once(running: BrokerThread) -> None:
    client = Client(running.url)
    producer = client.create_producer(new_topic())
    consumer = client.subscribe(new_topic(), "sub")
    client.shutdown()
    assert not consumer.is_connected()
    with pytest.raises(AlreadyClosed):
        producer.send(b"x")
    client.close()  # after shutdown: nothing left to do


# --- batch receive -----------------------------------------------------------------------


def test_batch_receive_honours_the_policy_count(ours: Client) -> None:
    topic = new_topic()
    consumer = ours.subscribe(
        topic, "sub", batch_receive_policy=ConsumerBatchReceivePolicy(3, -1, 10_000)
    )
    publish(ours, topic, 5)
    started = time.monotonic()
    assert [m.data() for m in consumer.batch_receive()] == [b"m0", b"m1", b"m2"]
    assert time.monotonic() - started < 5  # the count, not the 10 s timeout, ended it
    assert [m.data() for m in consumer.batch_receive()] != []


def test_batch_receive_honours_the_policy_bytes_and_timeout(ours: Client) -> None:
    topic = new_topic()
    by_bytes = ours.subscribe(
        topic, "bytes", batch_receive_policy=ConsumerBatchReceivePolicy(-1, 5, 10_000)
    )
    by_time = ours.subscribe(
        topic, "time", batch_receive_policy=ConsumerBatchReceivePolicy(-1, -1, 300)
    )
    publish(ours, topic, 4, prefix="abc")  # 4 bytes each
    assert [m.data() for m in by_bytes.batch_receive()] == [b"abc0", b"abc1"]  # 8 >= 5
    wait_until(lambda: by_time.async_consumer.queued == 4)
    assert len(by_time.batch_receive()) == 4
    started = time.monotonic()
    assert by_time.batch_receive() == []
    assert time.monotonic() - started >= 0.25


def test_the_default_batch_receive_policy_is_the_officials(ours: Client) -> None:
    with pytest.raises(ValueError):
        ConsumerBatchReceivePolicy(-1, -1, -1)  # no limit at all: refused, as the C++ one
    topic = new_topic()
    consumer = ours.subscribe(topic, "sub")
    publish(ours, topic, 3)
    wait_until(lambda: consumer.async_consumer.queued == 3)
    assert len(consumer.batch_receive()) == 3  # within the default 100 ms


# --- small calls -------------------------------------------------------------------------


def test_names_connections_and_contexts(ours: Client, official: pulsar.Client) -> None:
    topic = new_topic()
    named = ours.subscribe(topic, "a", consumer_name="mine")
    unnamed = ours.subscribe(topic, "b")
    assert named.consumer_name() == "mine"
    theirs = official.subscribe(topic, "c")
    # Unnamed: a made-up name, of the official form (10 hex digits).
    assert len(unnamed.consumer_name()) == len(theirs.consumer_name()) == 10
    int(unnamed.consumer_name(), 16)
    theirs.close()
    reader = ours.create_reader(topic, MessageId.earliest)
    assert named.is_connected()
    assert reader.is_connected()
    ids = publish(ours, topic, 1)
    message = named.receive(5000)
    assert message.encryption_context() is None
    named.close()
    reader.close()
    assert not named.is_connected()
    assert not reader.is_connected()
    assert MessageId.wrap(ids[0]) is ids[0]


def test_message_ids_of_the_official_client_wrap_into_ours(
    ours: Client, official: pulsar.Client
) -> None:
    topic = new_topic()
    their_id = official.create_producer(topic).send(b"x")
    wrapped = MessageId.wrap(their_id)
    assert (wrapped.ledger_id(), wrapped.entry_id()) == (their_id.ledger_id(), their_id.entry_id())
    reader = ours.create_reader(topic, wrapped, start_message_id_inclusive=True)
    assert reader.read_next(5000).data() == b"x"
    reader.close()
    with pytest.raises(TypeError):
        MessageId.wrap("1:2")
