"""``managedLedgerCacheSizeMB`` bounds the whole broker's entry cache, as in Pulsar: topics share
one budget, the newest blocks win, and a topic whose entries were evicted is read from disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from protocol.topic_name import TopicName
from tests.helpers import BrokerThread, broker_config, close_client, new_client

pytestmark = pytest.mark.integration

MESSAGES = 600
PAYLOAD = 1000  # 600 KB a topic: three topics hold nearly twice the 1 MB budget


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    running = BrokerThread(broker_config(tmp_path / "data", managed_ledger_cache_size_mb=1)).start()
    try:
        yield running
    finally:
        running.stop()


def _payload(topic_index: int, index: int) -> bytes:
    return f"{topic_index}-{index}-".encode().ljust(PAYLOAD, b"x")


def test_topics_share_one_cache_budget(broker: BrokerThread) -> None:
    topics = [f"persistent://public/default/cache-{i}" for i in range(3)]
    client = new_client(broker.url)
    try:
        for topic_index, topic in enumerate(topics):
            producer = client.create_producer(
                topic, batching_enabled=True, batching_max_publish_delay_ms=5
            )
            for index in range(MESSAGES):
                producer.send_async(_payload(topic_index, index), None)
            producer.flush()
            producer.close()
        service = broker.broker.service
        cache = service.entry_cache
        held = [
            service.topics[TopicName.parse(t).full_name].ledger.stats()["cache_bytes"]
            for t in topics
        ]
        assert cache.size_bytes <= 1024 * 1024
        assert sum(held) == cache.size_bytes
        # FIFO over every topic: the first topic's blocks went first, the last's are all there.
        assert held[0] < held[2]
        assert held[2] >= MESSAGES * PAYLOAD
        # Evicted entries are read back from the segments, intact and in order.
        reader = client.create_reader(topics[0], pulsar.MessageId.earliest)
        got = [reader.read_next(10_000).data() for _ in range(MESSAGES)]
        assert got == [_payload(0, index) for index in range(MESSAGES)]
        reader.close()
    finally:
        close_client(client)
