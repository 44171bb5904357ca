"""``Publisher.submit`` answers each SEND with an outcome (a ``Publication`` settled in place, or a
``Settled`` answer), each connection told once per group commit (so its receipts leave in one
write), failures and duplicates included."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from broker.errors import PersistenceError
from broker.publish.producers import Producer
from broker.publish.publication import PublishOutcome
from broker.storage import Position
from broker.topics.topic import Topic
from tests.broker.storage.faults import FaultyLayer
from tests.broker.topics.test_topic_dedup import config, connect, entry, open_topic

# Long enough that everything submitted in one event-loop turn joins one group commit.
GROUP_WAIT_MS = 200.0


class Settled:
    """An ``on_settled`` callback that counts its calls and records what was done then."""

    def __init__(self) -> None:
        self.calls = 0
        self.done_at_call: list[list[bool]] = []
        self.requests: list[PublishOutcome] = []
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.done_at_call.append([request.done for request in self.requests])
        self.event.set()


def submit(topic: Topic, settled: Settled, producer: Producer, seq: int) -> PublishOutcome:
    """One SEND of ``producer`` with sequence id ``seq`` (its entry names both)."""
    outcome = topic.publisher.submit(
        producer, seq, seq, entry(producer.name, seq), None, 1, settled
    )
    settled.requests.append(outcome)
    return outcome


async def test_one_call_per_connection_per_group(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config(journal_max_group_wait_msec=GROUP_WAIT_MS))
    try:
        p1, p2 = await connect(topic, "p1"), await connect(topic, "p2")
        first, second = Settled(), Settled()
        for seq in range(5):  # two connections' requests interleaved in one group
            submit(topic, first, p1, seq)
            submit(topic, second, p2, seq)
        await asyncio.wait_for(asyncio.gather(first.event.wait(), second.event.wait()), 10)
        for settled in (first, second):
            assert settled.calls == 1
            assert settled.done_at_call == [[True] * 5]  # every request settled before the call
        pairs = zip(first.requests, second.requests, strict=True)
        positions = [r.position for pair in pairs for r in pair]
        stored = [p for p in positions if isinstance(p, Position)]
        assert len(stored) == 10
        assert stored == sorted(stored)  # settled in append (= submit) order
        assert topic.stats.flushes == 1
    finally:
        await topic.close()


async def test_a_duplicate_is_settled_at_once_without_a_call(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "t", config())
    try:
        producer = await connect(topic, "p1")
        settled = Settled()
        stored = submit(topic, settled, producer, 3)
        await asyncio.wait_for(settled.event.wait(), 10)
        duplicate = submit(topic, settled, producer, 3)
        assert duplicate.done
        assert duplicate.position is None
        assert duplicate.error is None
        assert stored.position is not None
        assert settled.calls == 1  # the duplicate is answered by the connection in its turn
    finally:
        await topic.close()


async def test_a_failed_group_is_failed_then_told_once(tmp_path: Path) -> None:
    layer = FaultyLayer()
    topic = await open_topic(
        tmp_path / "t", config(journal_max_group_wait_msec=GROUP_WAIT_MS), layer=layer
    )
    try:
        producer = await connect(topic, "p1")
        layer.fail("fdatasync", errno.EIO, suffix=".seg")
        settled = Settled()
        for seq in range(3):
            submit(topic, settled, producer, seq)
        await asyncio.wait_for(settled.event.wait(), 10)
        assert settled.calls == 1
        assert all(isinstance(r.error, PersistenceError) for r in settled.requests)
        assert all(r.done for r in settled.requests)
        assert all(r.position is None for r in settled.requests)
    finally:
        await topic.close()


async def test_publish_keeps_its_future(tmp_path: Path) -> None:
    """``Topic.publish`` (one awaited entry) is ``submit`` with a future."""
    topic = await open_topic(tmp_path / "t", config())
    try:
        producer = await connect(topic, "p1")
        position = await topic.publish(producer, 0, 0, entry("p1", 0))
        assert isinstance(position, Position)
        assert await topic.publish(producer, 0, 0, entry("p1", 0)) is None
    finally:
        await topic.close()
