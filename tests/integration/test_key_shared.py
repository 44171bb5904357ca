"""Key_Shared policies and key-based batching across clients, on a real broker: the official
client's ``ConsumerKeySharedPolicy`` (Sticky ranges, AutoSplit, the out-of-order flag) and ours,
our ``BatchingType.KeyBased`` producer read by the official consumer."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator

import pulsar
import pytest

import client as ours
from broker.dispatch.key_shared import sticky_key_hash
from tests.helpers import BrokerThread, topic_stats, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.compat]

LOWER, UPPER = (0, 32767), (32768, 65535)


@pytest.fixture
def official(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        broker.url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def magnetar(broker: BrokerThread) -> Iterator[ours.Client]:
    c = ours.Client(broker.url, operation_timeout_seconds=10)
    try:
        yield c
    finally:
        c.close()


def topic_name() -> str:
    return f"persistent://public/default/ks-{uuid.uuid4().hex[:10]}"


def keys_in(lo: int, hi: int, count: int) -> list[str]:
    """``count`` keys with distinct sticky hashes in ``[lo, hi]``."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        key = f"key-{i}"
        key_hash = sticky_key_hash(key.encode())
        if lo <= key_hash <= hi:
            found.setdefault(key_hash, key)
        i += 1
    return list(found.values())


def sticky(*ranges: tuple[int, int]) -> pulsar.ConsumerKeySharedPolicy:
    return pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=list(ranges))


def drain(consumer: pulsar.Consumer, count: int) -> list[pulsar.Message]:
    return [consumer.receive(5000) for _ in range(count)]


def consumer_out(broker: BrokerThread, topic: str, name: str) -> int:
    """The broker's ``msgOutCounter`` of the consumer called ``name`` on subscription "sub"."""
    consumers = topic_stats(broker.http, topic)["subscriptions"]["sub"]["consumers"]
    return int(next(c["msgOutCounter"] for c in consumers if c["consumerName"] == name))


# --------------------------------------------------------------------------- Sticky


def test_official_sticky_consumers_get_exactly_their_declared_ranges(
    official: pulsar.Client,
) -> None:
    topic = topic_name()
    low = official.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky(LOWER)
    )
    high = official.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky(UPPER)
    )
    producer = official.create_producer(topic, batching_enabled=False)
    keys = keys_in(*LOWER, 4) + keys_in(*UPPER, 4)
    sent = [(keys[i % len(keys)], f"m-{i}") for i in range(80)]
    for key, value in sent:
        producer.send(value.encode(), partition_key=key)
    got = {"low": drain(low, 40), "high": drain(high, 40)}
    for side, (lo, hi) in (("low", LOWER), ("high", UPPER)):
        assert all(lo <= sticky_key_hash(m.partition_key().encode()) <= hi for m in got[side])
        for key in {m.partition_key() for m in got[side]}:
            in_order = [v for k, v in sent if k == key]
            assert [m.data().decode() for m in got[side] if m.partition_key() == key] == in_order


def test_official_sticky_ranges_overlapping_another_consumer_are_refused(
    official: pulsar.Client,
) -> None:
    topic = topic_name()
    official.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky((0, 99))
    )
    with pytest.raises(pulsar.ConsumerAssignError):
        official.subscribe(
            topic,
            "sub",
            consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=sticky((50, 200)),
        )
    # Next to it, not over it: accepted.
    official.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=sticky((100, 200)),
    )


def test_our_sticky_consumer_beside_an_official_one(
    official: pulsar.Client, magnetar: ours.Client
) -> None:
    topic = topic_name()
    theirs = official.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky(LOWER)
    )
    policy = ours.ConsumerKeySharedPolicy(ours.KeySharedMode.Sticky, sticky_ranges=[UPPER])
    mine = magnetar.subscribe(
        topic, "sub", consumer_type=ours.ConsumerType.KeyShared, key_shared_policy=policy
    )
    with pytest.raises(ours.ConsumerAssignError):
        magnetar.subscribe(
            topic,
            "sub",
            consumer_type=ours.ConsumerType.KeyShared,
            key_shared_policy=ours.ConsumerKeySharedPolicy(
                ours.KeySharedMode.Sticky, sticky_ranges=[(30000, 40000)]
            ),
        )
    producer = magnetar.create_producer(topic)
    low_keys, high_keys = keys_in(*LOWER, 3), keys_in(*UPPER, 3)
    for i in range(30):
        producer.send(f"m-{i}".encode(), partition_key=(low_keys + high_keys)[i % 6])
    assert {m.partition_key() for m in drain(theirs, 15)} == set(low_keys)
    assert {mine.receive(5000).partition_key() for _ in range(15)} == set(high_keys)


# --------------------------------------------------------------------------- AutoSplit


def _takeover(
    official: pulsar.Client, *, allow_out_of_order: bool
) -> tuple[str, pulsar.Consumer, pulsar.Consumer, list[pulsar.Message]]:
    """``first`` holds two unacknowledged messages of a key in the upper half; ``second``
    joins (taking the upper half) and two more messages of that key follow, then a marker of
    another upper-half key."""
    topic = topic_name()
    policy = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=allow_out_of_order)
    first = official.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name="first",
        key_shared_policy=policy,
    )
    producer = official.create_producer(topic, batching_enabled=False)
    moving, marker = keys_in(*UPPER, 2)
    for i in range(2):
        producer.send(f"early-{i}".encode(), partition_key=moving)
    held = drain(first, 2)
    assert [m.data() for m in held] == [b"early-0", b"early-1"]
    second = official.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name="second",
        key_shared_policy=policy,
    )
    for i in range(2):
        producer.send(f"late-{i}".encode(), partition_key=moving)
    producer.send(b"marker", partition_key=marker)
    return topic, first, second, held


def test_official_auto_split_newcomer_waits_for_a_moved_key_to_be_acknowledged(
    official: pulsar.Client, broker: BrokerThread
) -> None:
    topic, first, second, held = _takeover(official, allow_out_of_order=False)
    # The marker is dispatched after the later messages of the moving key (position order):
    # once it arrived, those had been held back, not sent to anybody.
    assert second.receive(5000).data() == b"marker"
    assert consumer_out(broker, topic, "second") == 1
    assert consumer_out(broker, topic, "first") == 2
    first.acknowledge(held[0])
    wait_until(lambda: topic_stats(broker.http, topic)["subscriptions"]["sub"]["msgBacklog"] == 4)
    assert consumer_out(broker, topic, "second") == 1  # one message of the key still held
    # Acknowledging the last one releases the key to `second`, in order.
    first.acknowledge(held[1])
    assert [m.data() for m in drain(second, 2)] == [b"late-0", b"late-1"]


def test_official_auto_split_with_out_of_order_delivery_hands_a_moved_key_over_at_once(
    official: pulsar.Client, broker: BrokerThread
) -> None:
    topic, _first, second, _held = _takeover(official, allow_out_of_order=True)
    assert [m.data() for m in drain(second, 3)] == [b"late-0", b"late-1", b"marker"]
    assert consumer_out(broker, topic, "first") == 2


def test_official_consumers_with_another_policy_are_refused(official: pulsar.Client) -> None:
    topic = topic_name()
    official.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
    relaxed = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=True)
    with pytest.raises(pulsar.ConsumerBusy):
        official.subscribe(
            topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=relaxed
        )
    with pytest.raises(pulsar.ConsumerBusy):
        official.subscribe(
            topic,
            "sub",
            consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=sticky(UPPER),
        )


def test_our_auto_split_newcomer_waits_for_a_moved_key_to_be_acknowledged(
    magnetar: ours.Client, broker: BrokerThread
) -> None:
    topic = topic_name()
    first = magnetar.subscribe(
        topic, "sub", consumer_type=ours.ConsumerType.KeyShared, consumer_name="first"
    )
    producer = magnetar.create_producer(topic)
    moving, marker = keys_in(*UPPER, 2)
    producer.send(b"early", partition_key=moving)
    held = first.receive(5000)
    second = magnetar.subscribe(
        topic,
        "sub",
        consumer_type=ours.ConsumerType.KeyShared,
        consumer_name="second",
        key_shared_policy=ours.ConsumerKeySharedPolicy(ours.KeySharedMode.AutoSplit),
    )
    producer.send(b"late", partition_key=moving)
    producer.send(b"marker", partition_key=marker)
    assert second.receive(5000).data() == b"marker"
    assert consumer_out(broker, topic, "second") == 1
    first.acknowledge(held)
    assert second.receive(5000).data() == b"late"


# --------------------------------------------------------------------------- KeyBased batching


def test_our_key_based_batches_hold_one_key_each_for_the_official_consumer(
    official: pulsar.Client, magnetar: ours.Client
) -> None:
    topic = topic_name()
    low = official.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky(LOWER)
    )
    high = official.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky(UPPER)
    )
    producer = magnetar.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=60_000,
        batching_type=ours.BatchingType.KeyBased,
    )
    keys = keys_in(*LOWER, 3) + keys_in(*UPPER, 3)
    sent = [(keys[i % len(keys)], f"m-{i}") for i in range(60)]
    ids: list[ours.MessageId | None] = []
    for key, value in sent:
        producer.send_async(value.encode(), lambda _res, mid: ids.append(mid), partition_key=key)
    producer.flush()
    assert len(ids) == 60
    got = drain(low, 30) + drain(high, 30)
    by_entry: dict[tuple[int, int], set[str]] = defaultdict(set)
    for m in got:
        by_entry[(m.message_id().ledger_id(), m.message_id().entry_id())].add(m.partition_key())
        assert m.message_id().batch_index() >= 0  # it did travel in a batch
    assert len(by_entry) == len(keys)  # one batch per key
    assert all(len(entry_keys) == 1 for entry_keys in by_entry.values())
    for key in keys:
        in_order = [v for k, v in sent if k == key]
        assert [m.data().decode() for m in got if m.partition_key() == key] == in_order


def test_our_key_based_batches_reach_our_key_shared_consumers_one_key_each(
    magnetar: ours.Client,
) -> None:
    topic = topic_name()
    halves = [
        magnetar.subscribe(
            topic,
            "sub",
            consumer_type=ours.ConsumerType.KeyShared,
            key_shared_policy=ours.ConsumerKeySharedPolicy(
                ours.KeySharedMode.Sticky, sticky_ranges=[side]
            ),
        )
        for side in (LOWER, UPPER)
    ]
    producer = magnetar.create_producer(
        topic,
        batching_enabled=True,
        batching_max_publish_delay_ms=60_000,
        batching_type=ours.BatchingType.KeyBased,
    )
    keys = keys_in(*LOWER, 2) + keys_in(*UPPER, 2)
    for i in range(40):  # dedup is on: interleaved key batches must all be stored
        producer.send_async(f"m-{i}".encode(), None, partition_key=keys[i % 4])
    producer.flush()
    for consumer, side in zip(halves, (LOWER, UPPER), strict=True):
        got = [consumer.receive(5000) for _ in range(20)]
        entries: dict[tuple[int, int], set[str]] = defaultdict(set)
        for m in got:
            assert side[0] <= sticky_key_hash(m.partition_key().encode()) <= side[1]
            entries[(m.message_id().ledger_id(), m.message_id().entry_id())].add(m.partition_key())
        assert sorted(len(k) for k in entries.values()) == [1, 1]
