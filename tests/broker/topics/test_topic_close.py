"""A closed (unloaded) Topic: nothing new attaches to it and nobody is promoted on it.

Found by the session fuzzer: requests that were already on their way when an unload began
(a SUBSCRIBE writing its cursor, a holder's CLOSE_PRODUCER waiting for its receipts, a producer
whose grant was in progress) finished on the old, closed topic object.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.errors import BrokerError, ServiceNotReady
from broker.publish.producers import Producer
from broker.storage import Ledger, LedgerConfig
from broker.topics.topic import Topic
from protocol.enums import ProducerAccessMode
from protocol.topic_name import TopicName

TOPIC = TopicName.parse("persistent://public/default/closing")


class RecordingSink:
    """The connection side of a producer: what the topic told it."""

    def __init__(self) -> None:
        self.closed = 0
        self.ready: list[int | None] = []
        self.failed: list[BrokerError] = []

    def close_producer(self, producer: Producer) -> None:
        self.closed += 1

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        self.ready.append(topic_epoch)

    def producer_failed(self, producer: Producer, error: BrokerError) -> None:
        self.failed.append(error)

    async def check_alive(self) -> bool:
        return True


async def open_topic(directory: Path) -> Topic:
    ledger = await asyncio.to_thread(Ledger.open, directory, LedgerConfig(preallocate_bytes=0))
    return Topic(TOPIC, ledger, BrokerConfig(journal_max_group_wait_msec=0), dedup=None)


def producer(name: str, mode: ProducerAccessMode, sink: RecordingSink) -> Producer:
    return Producer(
        producer_id=1, name=name, mode=mode, sink=sink, connection_key=object(), request_id=1
    )


async def test_a_holder_leaving_a_closed_topic_promotes_no_waiter(tmp_path: Path) -> None:
    topic = await open_topic(tmp_path / "topic")
    holder_sink, waiter_sink = RecordingSink(), RecordingSink()
    holder = producer("holder", ProducerAccessMode.Exclusive, holder_sink)
    waiter = producer("waiter", ProducerAccessMode.WaitForExclusive, waiter_sink)
    assert await topic.add_producer(holder, None)
    assert not await topic.add_producer(waiter, None)  # queued behind the holder

    await topic.close()
    assert (holder_sink.closed, waiter_sink.closed) == (1, 1)  # both were told to go
    await topic.remove_producer(holder)  # e.g. its CLOSE_PRODUCER, done after the unload
    # Promoting the waiter would write its epoch into the closed ledger and answer it.
    assert (waiter_sink.ready, waiter_sink.failed) == ([], [])


@pytest.mark.parametrize("durable", [True, False])
async def test_a_closed_topic_refuses_new_subscriptions(tmp_path: Path, durable: bool) -> None:
    topic = await open_topic(tmp_path / "topic")
    await topic.close()
    with pytest.raises(ServiceNotReady):
        await topic.get_or_create_subscription(
            "late", durable=durable, start=None, initial_earliest=True
        )
    assert "late" not in topic.subscriptions


async def test_close_right_after_a_publish_returns(tmp_path: Path) -> None:
    """The publish wakes the flush loop, close() runs before it does: the loop must still see
    the close after flushing, or the unload (which holds the topic's load lock) hangs."""
    topic = await open_topic(tmp_path / "topic")
    sink = RecordingSink()
    writer = producer("writer", ProducerAccessMode.Shared, sink)
    assert await topic.add_producer(writer, None)
    durable = topic.publish(writer, 0, 0, b"\x00\x00\x00\x00entry")
    async with asyncio.timeout(5):  # close() in this task: it runs before the loop wakes
        await topic.close()
    assert durable.done()
    assert durable.result() is not None  # written before the close completed
