"""Multi-topic and pattern subscriptions against a real Magnetar broker: messages of every topic
come out of one consumer, each telling its topic; acknowledgements reach the right topic (they
survive a resubscription); a pattern picks up a topic created after it subscribed."""

from __future__ import annotations

import re
import uuid

import pytest

from client import AsyncClient, Client, ConsumerType, InitialPosition, MessageId
from client.errors import InvalidConfiguration, InvalidTopicName, OperationNotSupported, Timeout
from client.multi_topic import AsyncMultiTopicConsumer, pattern_namespace
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration]

EARLIEST = InitialPosition.Earliest
NAMESPACE = "persistent://public/default"


async def publish(client: AsyncClient, topic: str, values: list[str]) -> None:
    producer = await client.create_producer(topic)
    for value in values:
        await producer.send(value.encode())
    await producer.close()


async def receive_all(consumer: AsyncMultiTopicConsumer, count: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(count):
        message = await consumer.receive(5000)
        out.append((message.topic_name(), message.data().decode()))
    return out


def test_pattern_namespace() -> None:
    assert pattern_namespace(re.compile(NAMESPACE + "/orders-.*")) == "public/default"
    assert pattern_namespace(re.compile("public/default/x.*")) == "public/default"
    with pytest.raises(InvalidTopicName):
        pattern_namespace(re.compile("persistent://public/.*/x"))


async def test_topic_list_merges_and_routes_acks(running: BrokerThread) -> None:
    run = uuid.uuid4().hex[:8]
    topics = [f"{NAMESPACE}/multi-{run}-{i}" for i in range(3)]
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(
            topics, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST
        )
        assert consumer.topics() == sorted(topics)
        for i, topic in enumerate(topics):
            await publish(client, topic, [f"t{i}-m{j}" for j in range(4)])
        got = await receive_all(consumer, 12)
        assert sorted(got) == sorted(
            (topic, f"t{i}-m{j}") for i, topic in enumerate(topics) for j in range(4)
        )
        # Per topic, in order.
        for i, topic in enumerate(topics):
            assert [v for t, v in got if t == topic] == [f"t{i}-m{j}" for j in range(4)]

        messages = {}
        await consumer.close()
        consumer = await client.subscribe(
            topics, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST
        )
        for _ in range(12):
            message = await consumer.receive(5000)
            messages[message.data().decode()] = message
        # Acknowledge half by message, half by a topic-carrying id (as the official client's).
        for value, message in messages.items():
            if value.endswith(("m0", "m1")):
                consumer.acknowledge(message)
            else:
                data = message.message_id().serialize()
                consumer.acknowledge(MessageId.deserialize(data, message.topic_name()))
        with pytest.raises(OperationNotSupported):  # as the official
            consumer.acknowledge(MessageId.deserialize(data))  # no topic: cannot be routed
        await consumer.close()

        again = await client.subscribe(topics, "sub", consumer_type=ConsumerType.Shared)
        with pytest.raises(Timeout):
            await again.receive(300)
        await again.close()


async def test_pattern_discovers_new_topics(running: BrokerThread) -> None:
    run = uuid.uuid4().hex[:8]
    first, second = f"{NAMESPACE}/pat-{run}-a", f"{NAMESPACE}/pat-{run}-b"
    unrelated = f"{NAMESPACE}/other-{run}"
    async with AsyncClient(running.url) as client:
        await publish(client, first, ["a0"])
        await publish(client, unrelated, ["x0"])
        consumer = await client.subscribe(
            re.compile(f"{NAMESPACE}/pat-{run}-.*"),
            "sub",
            initial_position=EARLIEST,
            pattern_auto_discovery_period=3600,  # checked by hand below
        )
        assert consumer.topics() == [first]
        assert await receive_all(consumer, 1) == [(first, "a0")]

        await publish(client, second, ["b0", "b1"])
        await consumer.check_for_new_topics()
        assert consumer.topics() == [first, second]
        assert await receive_all(consumer, 2) == [(second, "b0"), (second, "b1")]
        await consumer.close()


async def test_pattern_period_rechecks_on_its_own(running: BrokerThread) -> None:
    run = uuid.uuid4().hex[:8]
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(
            re.compile(f"public/default/auto-{run}-.*"),
            "sub",
            initial_position=EARLIEST,
            pattern_auto_discovery_period=0.05,
        )
        assert consumer.topics() == []
        await publish(client, f"{NAMESPACE}/auto-{run}-new", ["n0"])
        # The periodic check subscribes to it; receive waits for that.
        message = await consumer.receive(10_000)
        assert (message.topic_name(), message.data()) == (f"{NAMESPACE}/auto-{run}-new", b"n0")


def test_blocking_client_subscribes_to_a_list(running: BrokerThread) -> None:
    run = uuid.uuid4().hex[:8]
    topics = [f"{NAMESPACE}/sync-{run}-{i}" for i in range(2)]
    with Client(running.url) as client:
        consumer = client.subscribe(topics, "sub", initial_position=EARLIEST)
        for topic in topics:
            client.create_producer(topic).send(topic.encode())
        got = {consumer.receive(5000).topic_name() for _ in topics}
        assert got == set(topics)
        consumer.close()


async def test_seek_moves_every_topic_or_the_topic_of_the_id(running: BrokerThread) -> None:
    run = uuid.uuid4().hex[:8]
    first, second = (f"{NAMESPACE}/multi-seek-{run}-{i}" for i in range(2))
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(
            [first, second], "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST
        )
        await publish(client, first, ["a0", "a1", "a2"])
        await publish(client, second, ["b0", "b1"])
        everything = sorted(await receive_all(consumer, 5))

        # Earliest: every topic again, from its start.
        await consumer.seek(MessageId.earliest)
        assert sorted(await receive_all(consumer, 5)) == everything

        # The id of a message of `first`: only `first` moves, after that message (a seek by id
        # excludes it, as the official consumer's does).
        await consumer.seek(MessageId.earliest)
        messages = [await consumer.receive(5000) for _ in range(5)]
        a1 = next(m for m in messages if m.data() == b"a1")
        await consumer.seek(a1.message_id())
        assert sorted(await receive_all(consumer, 1)) == [(first, "a2")]
        with pytest.raises(Timeout):
            await consumer.receive(300)

        # A publish time before everything: every topic again.
        await consumer.seek(0)
        assert sorted(await receive_all(consumer, 5)) == everything

        # An id that names no topic and is neither earliest nor latest is refused.
        with pytest.raises(InvalidConfiguration):
            await consumer.seek(MessageId(-1, 1, 2))
        await consumer.close()


async def test_an_id_naming_no_topic_of_it_is_refused_or_ignored_as_the_official(
    running: BrokerThread,
) -> None:
    """A send's id names no topic: acknowledging it raises OperationNotSupported (cumulative
    too, before any cumulative-ack rule), negatively acknowledging it does nothing."""
    topic = f"{NAMESPACE}/unroutable-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic)
        send_id = await producer.send(b"m")
        consumer = await client.subscribe(
            [topic, topic + "-b"],
            "sub",
            consumer_type=ConsumerType.Shared,
            initial_position=EARLIEST,
            negative_ack_redelivery_delay_ms=100,
        )
        with pytest.raises(OperationNotSupported):
            consumer.acknowledge(send_id)
        with pytest.raises(OperationNotSupported):
            consumer.acknowledge_cumulative(send_id)
        consumer.negative_acknowledge(send_id)  # ignored
        message = await consumer.receive(5000)
        consumer.negative_acknowledge(message)  # routed: the message comes again
        again = await consumer.receive(5000)
        assert again.message_id() == message.message_id()
        assert again.redelivery_count() == 1
        await consumer.close()
