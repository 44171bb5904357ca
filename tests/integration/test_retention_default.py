"""Issue #10 item 6: by default Magnetar keeps 7 days of messages whether or not a durable
subscription exists, so a Reader (no cursor) finds every message after segment roll-overs and
restarts; retention 0 shows Pulsar's behaviour (unsubscribed data goes with the segment)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from tests.helpers import BrokerThread, broker_config, close_client, new_client, read_all

pytestmark = [pytest.mark.integration, pytest.mark.compat]

MESSAGES = 1000


def _trim(running: BrokerThread, topic: str) -> int:
    """Run the housekeeping trim now (it also runs every tick) and return how many segments
    it deleted."""

    async def trim() -> int:
        assert running.broker is not None
        assert running.broker.service is not None
        ledger = running.broker.service.topics[topic].ledger
        return await asyncio.to_thread(ledger.trim)

    return running.call(trim)


def _produce_then_restart(config: BrokerConfig, restarts: int) -> tuple[list[int], list[int]]:
    """Publish with no subscription at all, restart ``restarts`` times; per load: segments the
    trim deleted and messages a Reader found."""
    topic = f"persistent://public/default/retained-{uuid.uuid4().hex[:8]}"
    trimmed: list[int] = []
    found: list[int] = []
    for load in range(restarts + 1):
        running = BrokerThread(config).start()
        client = new_client(running.url)
        try:
            if load == 0:
                producer = client.create_producer(topic, batching_enabled=False)
                for i in range(MESSAGES):
                    producer.send_async(str(i).encode(), None)
                producer.flush()
                producer.close()
            found.append(len(read_all(client, topic)))
            trimmed.append(_trim(running, topic))
        finally:
            close_client(client)
            running.stop()
    return trimmed, found


def test_default_keeps_unsubscribed_messages_across_rolls_and_restarts(tmp_path: Path) -> None:
    config = broker_config(tmp_path / "data", managed_ledger_max_entries_per_ledger=100)
    assert config.default_retention_time_in_minutes == 7 * 24 * 60
    assert config.default_retention_size_in_mb == -1
    trimmed, found = _produce_then_restart(config, restarts=3)
    assert trimmed == [0, 0, 0, 0]
    assert found == [MESSAGES] * 4


def test_retention_zero_is_pulsars_behaviour(tmp_path: Path) -> None:
    """The control: the same run with Pulsar's default loses what no subscription holds."""
    config = broker_config(
        tmp_path / "data",
        managed_ledger_max_entries_per_ledger=100,
        default_retention_time_in_minutes=0,
        default_retention_size_in_mb=0,
    )
    trimmed, found = _produce_then_restart(config, restarts=2)
    # Load 0 may trim nothing yet: the dedup cursor (a durable cursor, as in Pulsar) persists
    # its mark lazily. After the restart its mark is on disk at the end of the log, so every
    # sealed segment goes: nobody else is subscribed.
    assert trimmed[1] >= 9
    assert found[:2] == [MESSAGES, MESSAGES]  # each read before that load's trim
    assert found[2] < MESSAGES
