"""Non-persistent topics with the official client: in memory, at most once, to the consumers
connected when a message arrives; regex subscriptions list them by ``RegexSubscriptionMode``."""

from __future__ import annotations

import re
from pathlib import Path

import pulsar
import pytest

from tests.helpers import BrokerThread, close_client, new_client, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_at_most_once_to_connected_consumers_and_nothing_stored(
    broker: BrokerThread, tmp_path: Path
) -> None:
    topic = "non-persistent://public/default/np-basic"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic)
        producer.send(b"before anybody listens")  # dropped: nobody is subscribed
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(5):
            producer.send(f"m{i}".encode())
        assert [consumer.receive(5000).data() for _ in range(5)] == [
            f"m{i}".encode() for i in range(5)
        ]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(200)
        # Shared: each message to one consumer, none twice.
        a = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
        b = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
        for i in range(20):
            producer.send(f"s{i}".encode())
        got: list[bytes] = []

        def drain(c: pulsar.Consumer) -> None:
            while True:
                try:
                    got.append(c.receive(300).data())
                except pulsar.Timeout:
                    return

        drain(a)
        drain(b)
        assert sorted(got) == sorted(f"s{i}".encode() for i in range(20))
        # The exclusive consumer got them too (its own subscription).
        assert len([consumer.receive(5000) for _ in range(20)]) == 20
    finally:
        close_client(client)
    # Nothing on disk for it, ever.
    assert not [p for p in (tmp_path / "data").rglob("*") if "np-basic" in str(p)]


def test_no_redelivery_after_a_consumer_goes(broker: BrokerThread) -> None:
    topic = "non-persistent://public/default/np-no-redelivery"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic)
        first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer.send(b"once")
        assert first.receive(5000).data() == b"once"  # never acknowledged
        second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        first.close()
        with pytest.raises(pulsar.Timeout):
            second.receive(300)
    finally:
        close_client(client)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("PersistentOnly", {"persistent://public/default/rx-p"}),
        ("NonPersistentOnly", {"non-persistent://public/default/rx-np"}),
        (
            "AllTopics",
            {"persistent://public/default/rx-p", "non-persistent://public/default/rx-np"},
        ),
    ],
)
def test_regex_subscription_modes(broker: BrokerThread, mode: str, expected: set[str]) -> None:
    client = new_client(broker.url)
    try:
        persistent = client.create_producer("persistent://public/default/rx-p")
        in_memory = client.create_producer("non-persistent://public/default/rx-np")
        consumer = client.subscribe(
            re.compile("persistent://public/default/rx-.*"),
            f"regex-{mode}",
            regex_subscription_mode=getattr(pulsar.RegexSubscriptionMode, mode),
        )
        persistent.send(b"to persistent://public/default/rx-p")
        in_memory.send(b"to non-persistent://public/default/rx-np")
        received: set[str] = set()
        while True:
            try:
                received.add(consumer.receive(1000).data().decode().removeprefix("to "))
            except pulsar.Timeout:
                break
        assert received == expected
    finally:
        close_client(client)


def test_our_client_non_persistent_and_regex_modes(broker: BrokerThread) -> None:
    from client import RegexSubscriptionMode, Timeout
    from client.sync import Client

    client = Client(broker.url)
    try:
        persistent = client.create_producer("persistent://public/default/ours-p")
        in_memory = client.create_producer("non-persistent://public/default/ours-np")
        every = client.subscribe(
            re.compile("persistent://public/default/ours-.*"),
            "every",
            regex_subscription_mode=RegexSubscriptionMode.AllTopics,
        )
        memory_only = client.subscribe(
            re.compile("persistent://public/default/ours-.*"),
            "memory-only",
            regex_subscription_mode=RegexSubscriptionMode.NonPersistentOnly,
        )
        persistent.send(b"p")
        in_memory.send(b"np")
        assert sorted(every.receive(5000).data() for _ in range(2)) == [b"np", b"p"]
        assert memory_only.receive(5000).data() == b"np"
        with pytest.raises(Timeout):
            memory_only.receive(200)
    finally:
        client.close()


def test_an_idle_topic_is_forgotten(broker: BrokerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.topics.non_persistent as non_persistent

    monkeypatch.setattr(non_persistent, "IDLE_SECONDS", 0.2)
    topic = "non-persistent://public/default/np-idle"
    client = new_client(broker.url)
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "sub")
        producer.send(b"x")
        assert consumer.receive(5000).data() == b"x"

        async def loaded() -> bool:
            assert broker.broker is not None
            service = broker.broker.service
            assert service is not None
            return topic in service.topics

        assert broker.call(loaded)
        producer.close()
        consumer.close()
        wait_until(lambda: not broker.call(loaded))
    finally:
        close_client(client)


# ------------------------------------------------------------------ PIP-68 on non-persistent topics
# reliability.md §1.6: ExclusiveProducerTest runs for non-persistent topics too.


def _waiters(broker: BrokerThread, topic: str) -> tuple[str, ...]:
    async def waiters() -> tuple[str, ...]:
        assert broker.broker is not None
        service = broker.broker.service
        assert service is not None
        found = service.topics.get(topic)
        return () if found is None else found.producers.access.stats().waiters

    return broker.call(waiters)


def test_exclusive_producers_on_a_non_persistent_topic(broker: BrokerThread) -> None:
    from concurrent.futures import ThreadPoolExecutor

    topic = "non-persistent://public/default/np-exclusive"
    client = new_client(broker.url)
    exclusive = pulsar.ProducerAccessMode.Exclusive
    wait = pulsar.ProducerAccessMode.WaitForExclusive
    try:
        consumer = client.subscribe(topic, "reader")
        # X1: a second Exclusive is fenced, a Shared one is busy; after close a new one wins.
        p1 = client.create_producer(topic, producer_name="p1", access_mode=exclusive)
        with pytest.raises(pulsar.ProducerFenced):
            client.create_producer(topic, producer_name="p2", access_mode=exclusive)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(
                topic, producer_name="s", access_mode=pulsar.ProducerAccessMode.Shared
            )
        p1.send(b"p1")
        p1.close()
        # X6: WaitForExclusive waiters are promoted in FIFO order.
        holder = client.create_producer(topic, producer_name="w1", access_mode=wait)
        with ThreadPoolExecutor(max_workers=2) as pool:
            second = pool.submit(
                client.create_producer, topic, producer_name="w2", access_mode=wait
            )
            wait_until(lambda: _waiters(broker, topic) == ("w2",))
            third = pool.submit(client.create_producer, topic, producer_name="w3", access_mode=wait)
            wait_until(lambda: _waiters(broker, topic) == ("w2", "w3"))
            holder.send(b"w1")
            holder.close()
            w2 = second.result(10)
            assert not third.done()
            w2.send(b"w2")
            w2.close()
            w3 = third.result(10)
            w3.send(b"w3")
        assert [consumer.receive(5000).data() for _ in range(4)] == [b"p1", b"w1", b"w2", b"w3"]
    finally:
        close_client(client)
