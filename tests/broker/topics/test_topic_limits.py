"""The broker's dispatch settings reach every subscription a topic opens."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.storage import Ledger, LedgerConfig
from broker.topics.topic import Topic
from protocol.topic_name import TopicName

TOPIC = TopicName.parse("persistent://public/default/limits")


@pytest.mark.parametrize("precise", [True, False])
async def test_precise_dispatcher_flow_control_reaches_the_dispatch_limits(
    tmp_path: Path, precise: bool
) -> None:
    ledger = await asyncio.to_thread(Ledger.open, tmp_path, LedgerConfig(preallocate_bytes=0))
    config = BrokerConfig(precise_dispatcher_flow_control=precise, dispatcher_max_read_batch_size=7)
    topic = Topic(TOPIC, ledger, config, dedup=None)
    try:
        assert topic.dispatch_limits.precise_flow_control is precise
        assert topic.dispatch_limits.max_read_entries == 7
    finally:
        await topic.close()
