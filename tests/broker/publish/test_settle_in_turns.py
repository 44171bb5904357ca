"""A durable group commit is settled a slice per turn of the loop (issue #24): 3000 SENDs that
make one group are answered ``SETTLE_PER_TURN`` at most per turn, receipts still in SEND order.

Real broker (a long group wait, so every SEND of the write joins one group), a raw socket, and
``TurnSampler`` reading the topic's unsettled publications once per turn of the broker's loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.publish.publisher import SETTLE_PER_TURN
from protocol import commands, pb
from protocol.metadata import encode_entry
from tests.heavy_sends import TurnSampler
from tests.helpers import BrokerThread, broker_config, wait_until
from tests.raw_client import RawConnection

T = pb.BaseCommand.Type
TOPIC = "persistent://public/default/settle-in-turns"
COUNT = 3000


@pytest.fixture
def slow_groups(tmp_path: Path) -> Iterator[BrokerThread]:
    config = broker_config(
        tmp_path / "data",
        journal_max_group_wait_msec=1000.0,
        journal_max_group_size_bytes=64 << 20,
        max_pending_publish_requests_per_connection=10_000,
    )
    running = BrokerThread(config).start()
    try:
        yield running
    finally:
        running.stop()


def entry(sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    return encode_entry(metadata, b"m")


def test_a_large_group_is_settled_a_slice_per_turn_in_order(slow_groups: BrokerThread) -> None:
    assert slow_groups.loop is not None
    assert slow_groups.broker is not None
    service = slow_groups.broker.service
    assert service is not None
    with RawConnection(slow_groups.port) as conn:
        conn.handshake()
        conn.create_producer(TOPIC, 1, "p")
        publisher = service.topics[TOPIC].publisher
        sampler = TurnSampler(slow_groups.loop, lambda: publisher.in_flight)
        conn.send(b"".join(commands.send(1, seq, entry(seq)) for seq in range(COUNT)))
        # Staged within the group wait: one group of all of them.
        wait_until(lambda: publisher.in_flight == COUNT, 5)
        receipts = conn.wait_for(T.SEND_RECEIPT, COUNT, timeout=20)
        assert sampler.stop() <= SETTLE_PER_TURN
    assert sampler.turns > COUNT // SETTLE_PER_TURN
    assert [r.command.send_receipt.sequence_id for r in receipts] == list(range(COUNT))
    assert [r.command.send_receipt.message_id.entryId for r in receipts] == list(range(COUNT))
