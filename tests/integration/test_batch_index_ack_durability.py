"""PIP-54 durability (R9): partial batch acks survive a clean restart, a SIGKILL and a topic
unload/reload. Pulsar bugs #20585/#26475 (bitmap not restored), #26498 (partial ack never
persisted), #14982 (duplicates after an unload).

A subprocess broker (``BrokerProcess``) holds 100 messages in batches of 10. The official client
acknowledges a pattern that leaves most batches partially acknowledged (Shared: individual acks;
Exclusive: a cumulative ack inside a batch, then individual ones). After the disruption a
consumer drains the subscription: it must get **exactly** the unacknowledged messages, each once
(zero acknowledged ones, every unacknowledged one), and new messages must still flow.

Persistence window: the broker persists a dirty cursor every
``managedLedgerCursorPersistIntervalMs`` (1000 ms here, the default) from its housekeeping task,
and on close. A SIGKILL therefore loses
the acks of at most the last ~1-2 s (interval plus the housekeeping tick); those messages are
delivered again (at-least-once). The SIGKILL case below kills only after the cursor file on disk
shows every ack, so it checks that what *was* persisted is exact and complete.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from broker.storage import Position
from broker.storage.cursor_file import decode_cursor_state
from broker.storage.cursor_registry import CURSOR_DIR, CURSOR_SUFFIX, cursor_file_stem
from broker.storage.files import read_file
from broker.storage.paths import topic_directory
from protocol.topic_name import TopicName
from tests.helpers import BrokerProcess
from tests.integration.test_batch_index_ack import (
    drain,
    entry_of,
    make_client,
    new_topic,
    publish,
    receive_values,
    value_of,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat]

Shared = pulsar.ConsumerType.Shared
Exclusive = pulsar.ConsumerType.Exclusive
MESSAGES = 100


def sub_stats(broker: BrokerProcess, topic: str) -> dict[str, object]:
    local = topic.rsplit("/", 1)[1]
    url = f"http://127.0.0.1:{broker.web_port}/admin/v2/persistent/public/default/{local}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats: dict[str, object] = json.load(response)["subscriptions"]["sub"]
    return stats


def unload(broker: BrokerProcess, topic: str) -> None:
    local = topic.rsplit("/", 1)[1]
    url = f"http://127.0.0.1:{broker.web_port}/admin/v2/persistent/public/default/{local}/unload"
    request = urllib.request.Request(url, method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 204)


def persisted_acked(data_dir: Path, topic: str, ids: list[pulsar.MessageId]) -> set[int]:
    """The messages the cursor file on disk says are acknowledged."""
    directory = topic_directory(data_dir, TopicName.parse(topic)) / CURSOR_DIR
    path = directory / (cursor_file_stem("sub") + CURSOR_SUFFIX)
    state = decode_cursor_state(read_file(path), path)
    acked = set()
    for value, mid in enumerate(ids):
        position = Position(*entry_of(mid))
        held = state.batch.get(position)
        if position <= state.mark_delete or any(
            r.first <= position <= r.last for r in state.ranges
        ):
            acked.add(value)
        elif held is not None:
            index = mid.batch_index()
            if not (held[index // 64] >> (index % 64)) & 1:
                acked.add(value)
    return acked


def ack_pattern(
    consumer: pulsar.Consumer, messages: list[pulsar.Message], exclusive: bool
) -> set[int]:
    """Acknowledge a pattern leaving most batches partial; returns the acknowledged values."""
    acked: set[int] = set()
    if exclusive:
        consumer.acknowledge_cumulative(messages[24])
        acked |= set(range(25))
    for message in messages:
        value = value_of(message)
        if value not in acked and (value % 3 == 0 or value >= 90):
            consumer.acknowledge(message)
            acked.add(value)
    return acked


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    running = BrokerProcess(tmp_path / "data").start()
    try:
        yield running
    finally:
        running.kill()


def _disrupt(how: str, broker: BrokerProcess, topic: str, settle: Callable[[], None]) -> None:
    if how == "sigterm":
        assert broker.terminate() == 0
        broker.restart()
    elif how == "sigkill":
        settle()
        broker.kill()
        broker.restart()
    else:
        unload(broker, topic)


@pytest.mark.parametrize("how", ["sigterm", "sigkill", "unload"])
@pytest.mark.parametrize("sub_type", [Shared, Exclusive], ids=["shared", "exclusive"])
def test_partial_batch_acks_survive(
    broker: BrokerProcess, sub_type: pulsar.ConsumerType, how: str
) -> None:
    topic = new_topic()
    client = make_client(broker.url)
    consumer = client.subscribe(
        topic, "sub", consumer_type=sub_type, receiver_queue_size=1000, batch_index_ack_enabled=True
    )
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
    )
    ids = publish(producer, range(MESSAGES))
    messages = receive_values(consumer, MESSAGES)
    acked = ack_pattern(consumer, messages, exclusive=sub_type == Exclusive)
    unacked = sorted(set(range(MESSAGES)) - acked)
    partial_entries = {entry_of(ids[v]) for v in unacked} & {entry_of(ids[v]) for v in acked}
    assert len(partial_entries) >= 5, "the pattern must leave batches partially acknowledged"

    def applied() -> bool:
        consumers = sub_stats(broker, topic)["consumers"]
        assert isinstance(consumers, list)
        return [c["unackedMessages"] for c in consumers] == [len(unacked)]

    wait_for(applied, "the broker to apply every ack")

    def persisted() -> None:
        wait_for(
            lambda: persisted_acked(broker.data_dir, topic, ids) == acked,
            "the cursor file to hold every ack",
        )

    if how == "unload":
        # The producer is not what this test is about: an unload does not close producers yet
        # (a SEND to the closing topic fails and the client drops the shared connection).
        producer.close()
    _disrupt(how, broker, topic, persisted)
    if how == "unload":
        # The connected consumer is closed by the unload and re-subscribes to the reloaded topic.
        again = drain(consumer, 1500)
        producer = client.create_producer(topic, batching_enabled=True)
    else:
        client.close()
        client = make_client(broker.url)
        consumer = client.subscribe(
            topic, "sub", consumer_type=sub_type, batch_index_ack_enabled=True
        )
        producer = client.create_producer(topic, batching_enabled=True)
        again = drain(consumer, 1000)
    try:
        assert sorted(value_of(m) for m in again) == unacked
        for message in again:
            consumer.acknowledge(message)
        publish(producer, range(MESSAGES, MESSAGES + 10))
        fresh = [value_of(m) for m in receive_values(consumer, 10)]
        assert sorted(fresh) == list(range(MESSAGES, MESSAGES + 10))
    finally:
        client.close()


def test_a_lone_partial_ack_is_persisted_and_survives_sigkill(broker: BrokerProcess) -> None:
    """#26498: one batch-index ack and nothing else (no whole-entry ack, no mark-delete move)
    must still be scheduled for persistence by the periodic task."""
    topic = new_topic()
    client = make_client(broker.url)
    try:
        consumer = client.subscribe(
            topic, "sub", consumer_type=Shared, batch_index_ack_enabled=True
        )
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
        )
        ids = publish(producer, range(10))
        messages = receive_values(consumer, 10)
        consumer.acknowledge(messages[3])
        wait_for(
            lambda: persisted_acked(broker.data_dir, topic, ids) == {3},
            "the partial ack in the cursor file",
        )
    finally:
        client.close()
    broker.kill()
    broker.restart()
    client = make_client(broker.url)
    try:
        consumer = client.subscribe(
            topic, "sub", consumer_type=Shared, batch_index_ack_enabled=True
        )
        assert sorted(value_of(m) for m in drain(consumer)) == [v for v in range(10) if v != 3]
    finally:
        client.close()
