"""Dead-letter policy against a real Magnetar broker: a message negatively acknowledged more
than ``max_redeliver_count`` times lands on the dead-letter topic (default name, the official
properties) and is acknowledged on the source subscription; the others are untouched."""

from __future__ import annotations

import uuid

import pytest

from client import AsyncClient, AsyncConsumer, Client, ConsumerType, InitialPosition, MessageId
from client.dead_letter import ORIGIN_MESSAGE_ID, REAL_TOPIC, ConsumerDeadLetterPolicy
from client.errors import Timeout
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration]


def new_topic() -> str:
    return f"persistent://public/default/dlq-{uuid.uuid4().hex[:10]}"


async def drain(consumer: AsyncConsumer) -> list[bytes]:
    """Receive and acknowledge until nothing comes for 300 ms."""
    received: list[bytes] = []
    while True:
        try:
            message = await consumer.receive(300)
        except Timeout:
            return received
        received.append(message.data())
        consumer.acknowledge(message)


def test_policy_names_and_defaults() -> None:
    policy = ConsumerDeadLetterPolicy(3)
    assert policy.topic_for("persistent://public/default/t", "sub") == (
        "persistent://public/default/t-sub-DLQ"
    )
    assert ConsumerDeadLetterPolicy(1, dead_letter_topic="dead").topic_for("t", "s") == "dead"
    with pytest.raises(ValueError, match="greater than 0"):  # as the official
        ConsumerDeadLetterPolicy(0)


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
async def test_nacked_too_often_goes_to_the_dead_letter_topic(
    running: BrokerThread, batched: bool
) -> None:
    topic = new_topic()
    policy = ConsumerDeadLetterPolicy(2, initial_subscription_name="dead-letters")
    async with AsyncClient(running.url) as client:
        consumer = await client.subscribe(
            topic,
            "work",
            consumer_type=ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=50,
            dead_letter_policy=policy,
        )
        producer = await client.create_producer(
            topic, batching_enabled=batched, batching_max_messages=3
        )
        futures = [
            await producer.send_async(f"m{i}".encode(), properties={"k": str(i)}) for i in range(3)
        ]
        await producer.flush()
        poison_id = futures[1].result()

        poison_deliveries: list[int] = []
        acked: set[bytes] = set()
        while not (acked == {b"m0", b"m2"} and len(poison_deliveries) == 3):
            message = await consumer.receive(5000)
            if message.data() == b"m1":
                poison_deliveries.append(message.redelivery_count())
                consumer.negative_acknowledge(message)
            else:
                acked.add(message.data())
                consumer.acknowledge(message)
        # Delivered max_redeliver_count + 1 times, as the official clients do.
        assert poison_deliveries == [0, 1, 2]

        dead_topic = policy.topic_for(topic, "work")
        reader = await client.create_reader(dead_topic, MessageId.earliest)
        assert (await reader.read_next(5000)).data() == b"m1"
        # Subscribing now at Latest still gets it: the policy created the subscription first.
        dead = await client.subscribe(
            dead_topic, "dead-letters", initial_position=InitialPosition.Latest
        )
        letter = await dead.receive(5000)
        assert letter.data() == b"m1"
        assert letter.properties() == {
            "k": "1",
            REAL_TOPIC: topic,
            ORIGIN_MESSAGE_ID: str(poison_id),
        }
        # Acknowledged on the source subscription: it does not come back. (A batch comes
        # back whole, so its acknowledged neighbours may be queued once more.)
        assert b"m1" not in await drain(consumer)
        await consumer.close()
        again = await client.subscribe(topic, "work", consumer_type=ConsumerType.Shared)
        with pytest.raises(Timeout):
            await again.receive(300)


def test_blocking_client_takes_the_policy(running: BrokerThread) -> None:
    topic = new_topic()
    with Client(running.url) as client:
        consumer = client.subscribe(
            topic,
            "work",
            consumer_type=ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=20,
            dead_letter_policy=ConsumerDeadLetterPolicy(1, dead_letter_topic=topic + "-dead"),
        )
        dead = client.subscribe(topic + "-dead", "d")
        producer = client.create_producer(topic)
        producer.send(b"poison")
        for expected_count in (0, 1):
            message = consumer.receive(5000)
            assert message.redelivery_count() == expected_count
            consumer.negative_acknowledge(message)
        assert dead.receive(5000).data() == b"poison"


def test_unset_names_read_as_the_official_getters_answer() -> None:
    policy = ConsumerDeadLetterPolicy(10)
    assert (policy.max_redeliver_count, policy.dead_letter_topic) == (10, "")
    assert policy.initial_subscription_name == ""
    assert policy.topic_for("t", "s") == "t-s-DLQ"
