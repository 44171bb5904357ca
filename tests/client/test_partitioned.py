"""Partitioned topics through our client, against a real broker and next to the official client:
routing (Murmur3-32 of the key, round-robin without, a custom router), ids that carry the
partition, consumers and readers over every partition, partitions added while they run, PIP-6
dedup per partition, and the blocking facade."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pulsar
import pytest

from client import AsyncClient, Client, ConsumerType, InitialPosition, MessageId
from client.errors import InvalidConfiguration
from client.message import Message
from client.routing import PartitionsRoutingMode
from protocol.hashing import murmur3_32_hash
from tests.helpers import (
    BrokerThread,
    close_client,
    new_client,
    wait_until_async,
)
from tests.integration.test_partitioned_topics import admin, create_partitioned

pytestmark = [pytest.mark.integration, pytest.mark.compat]

EARLIEST = InitialPosition.Earliest


def fresh(running: BrokerThread, partitions: int = 4) -> str:
    return create_partitioned(running.http, f"parts-{uuid.uuid4().hex[:10]}", partitions)


async def test_keys_hash_to_one_partition_and_unkeyed_messages_go_round(
    running: BrokerThread,
) -> None:
    topic = fresh(running)
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic)
        assert producer.topic() == topic
        keyed = {}
        for index in range(40):
            key = f"key-{index % 10}"
            message_id = await producer.send(f"{key}/{index}".encode(), partition_key=key)
            assert message_id.partition() == murmur3_32_hash(key.encode()) % 4
            keyed.setdefault(key, set()).add(message_id.partition())
        assert all(len(partitions) == 1 for partitions in keyed.values())
        spread = Counter([(await producer.send(b"u")).partition() for _ in range(40)])
        assert spread == {0: 10, 1: 10, 2: 10, 3: 10}  # one after the other, evenly
        assert producer.last_sequence_id() >= 0
        await producer.close()


async def test_a_custom_router_and_single_partition_mode(running: BrokerThread) -> None:
    topic = fresh(running)
    async with AsyncClient(running.url) as client:

        def by_property(message: Message, partitions: int) -> int:
            return int(message.properties()["p"]) % partitions

        routed = await client.create_producer(topic, message_router=by_property)
        for p in range(8):
            assert (await routed.send(b"x", properties={"p": str(p)})).partition() == p % 4
        single = await client.create_producer(
            topic, message_routing_mode=PartitionsRoutingMode.UseSinglePartition
        )
        assert len({(await single.send(b"y")).partition() for _ in range(12)}) == 1
        with pytest.raises(ValueError):
            await client.create_producer(
                topic, message_routing_mode=PartitionsRoutingMode.CustomPartition
            )


async def test_our_consumer_reads_every_partition_of_official_and_our_messages(
    running: BrokerThread,
) -> None:
    topic = fresh(running)
    official = new_client(running.url)
    try:
        async with AsyncClient(running.url) as client:
            consumer = await client.subscribe(
                topic, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST
            )
            assert consumer.topic() == topic
            assert len(consumer.topics()) == 4
            theirs = official.create_producer(topic, batching_enabled=True)
            for index in range(60):
                theirs.send_async(f"official-{index}".encode(), None, partition_key=f"k{index}")
            theirs.flush()
            ours = await client.create_producer(topic, batching_enabled=True)
            futures = [await ours.send_async(f"ours-{index}".encode()) for index in range(60)]
            await asyncio.gather(*futures)
            got = {}
            for _ in range(120):
                message = await consumer.receive(10_000)
                partition = message.message_id().partition()
                assert message.topic_name() == f"{topic}-partition-{partition}"
                got[message.data().decode()] = partition
                consumer.acknowledge(message)
            assert sorted(got) == sorted(
                [f"official-{i}" for i in range(60)] + [f"ours-{i}" for i in range(60)]
            )
            assert set(got.values()) == {0, 1, 2, 3}
    finally:
        close_client(official)


async def test_the_official_consumer_reads_what_our_producer_routed(running: BrokerThread) -> None:
    topic = fresh(running)
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic)
        sent = {
            f"m{i}": (await producer.send(f"m{i}".encode(), partition_key=f"k{i}"))
            for i in range(20)
        }
    official = new_client(running.url)
    try:
        consumer = official.subscribe(
            topic, "sub", initial_position=pulsar.InitialPosition.Earliest
        )
        for _ in range(20):
            message = consumer.receive(10_000)
            ours = sent[message.data().decode()]
            assert message.message_id().partition() == ours.partition()
            assert message.topic_name() == f"{topic}-partition-{ours.partition()}"
    finally:
        close_client(official)


async def test_a_reader_reads_every_partition_from_earliest(running: BrokerThread) -> None:
    topic = fresh(running, 3)
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic)
        for index in range(12):
            await producer.send(b"%d" % index)
        reader = await client.create_reader(topic, MessageId.earliest)
        assert reader.topic() == topic
        seen = []
        while await reader.has_message_available():
            seen.append((await reader.read_next(5_000)).data())
        assert sorted(seen) == sorted(b"%d" % i for i in range(12))
        await reader.close()
        with pytest.raises(InvalidConfiguration):
            await client.create_reader(topic, MessageId(0, 1, 2))


async def test_added_partitions_are_picked_up_by_producers_and_consumers(
    running: BrokerThread,
) -> None:
    topic = fresh(running, 2)
    local = topic.rsplit("/", 1)[1]
    async with AsyncClient(running.url, partitions_update_interval_seconds=0.2) as client:
        consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
        producer = await client.create_producer(topic)
        admin(running.http, "POST", f"/admin/v2/persistent/public/default/{local}/partitions", 4)
        await wait_until_async(lambda: producer.partitions() == 4 and len(consumer.topics()) == 4)
        partitions = {(await producer.send(b"%d" % i)).partition() for i in range(8)}
        assert partitions == {0, 1, 2, 3}
        received = {(await consumer.receive(10_000)).message_id().partition() for _ in range(8)}
        assert received == {0, 1, 2, 3}


async def test_dedup_applies_per_partition_under_one_producer_name(running: BrokerThread) -> None:
    topic = fresh(running, 2)
    async with AsyncClient(running.url) as client:
        producer = await client.create_producer(topic, producer_name="writer")
        first = await producer.send(b"a", partition_key="k", sequence_id=5)
        await producer.close()
        again = await client.create_producer(topic, producer_name="writer")
        assert again.producer_name() == "writer"
        assert again.last_sequence_id() == 5  # the highest over the partitions
        duplicate = await again.send(b"a", partition_key="k", sequence_id=5)
        assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)
        # The other partition never saw sequence id 5 from "writer": stored there.
        other_key = next(
            f"o{i}"
            for i in range(100)
            if murmur3_32_hash(f"o{i}".encode()) % 2 != first.partition()
        )
        other = await again.send(b"b", partition_key=other_key, sequence_id=5)
        assert other.entry_id() >= 0
        assert other.partition() != first.partition()


def test_the_blocking_client_produces_and_reads_partitioned_topics(running: BrokerThread) -> None:
    topic = fresh(running)
    with Client(running.url) as client:
        producer = client.create_producer(topic, batching_enabled=True)
        for index in range(20):
            producer.send_async(b"%d" % index, None, partition_key=str(index))
        producer.flush()
        reader = client.create_reader(topic, MessageId.earliest)
        got = [reader.read_next(5_000).data() for _ in range(20)]
        assert sorted(got) == sorted(b"%d" % i for i in range(20))
        assert not reader.has_message_available()
