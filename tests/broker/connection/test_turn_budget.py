"""Bounded work per turn of the loop on one connection (issue #24): a write of thousands of
frames is decoded a budget at a time, a huge ACK is applied a slice at a time, and neither
changes what the client sees (order, back-pressure, replies).

Real broker, raw sockets; ``TurnSampler`` reads a counter once per turn of the broker's loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.connection.consumers import IDS_PER_TURN
from broker.connection.core import (
    FRAMES_PER_TURN,
    READ_BYTES_PER_TURN,
    REQUESTS_PER_TURN,
    ServerConnection,
)
from broker.service import BrokerService
from protocol import commands, pb
from protocol.ids import MessageId
from protocol.metadata import encode_entry
from tests.heavy_sends import TurnSampler
from tests.helpers import BrokerThread, broker_config
from tests.raw_client import RawConnection

T = pb.BaseCommand.Type
TOPIC = "persistent://public/default/turn-budget"


def service_of(broker: BrokerThread) -> BrokerService:
    assert broker.broker is not None
    assert broker.broker.service is not None
    return broker.broker.service


def frames_decoded(service: BrokerService) -> int:
    connections = list(service.connections)
    return sum(c.frames_received for c in connections if isinstance(c, ServerConnection))


def entry_metadata(name: str, sequence_id: int) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)


def entry(name: str, sequence_id: int) -> bytes:
    return encode_entry(entry_metadata(name, sequence_id), b"m")


@pytest.fixture
def small_pending(tmp_path: Path) -> Iterator[BrokerThread]:
    """A broker that pauses reading past 64 SENDs in flight on a connection."""
    config = broker_config(tmp_path / "data", max_pending_publish_requests_per_connection=64)
    running = BrokerThread(config).start()
    try:
        yield running
    finally:
        running.stop()


def test_a_write_of_thousands_of_frames_is_decoded_over_many_turns(broker: BrokerThread) -> None:
    assert broker.loop is not None
    service = service_of(broker)
    with RawConnection(broker.port) as conn:
        conn.handshake()
        sampler = TurnSampler(broker.loop, lambda: frames_decoded(service))
        conn.send(commands.ping() * 3000)
        assert len(conn.wait_for(T.PONG, 3000)) == 3000
        assert sampler.stop() <= FRAMES_PER_TURN
    assert sampler.turns > 3000 // FRAMES_PER_TURN


def test_a_stream_of_large_sends_is_read_a_budget_per_turn(broker: BrokerThread) -> None:
    """uvloop would read a socket up to 32 x 256 KiB in one turn: a connection stops reading
    for the turn once it has read ``READ_BYTES_PER_TURN``, so other connections (a consumer's
    FLOW) get their turn between; every SEND is still answered, in order."""
    assert broker.loop is not None
    service = service_of(broker)
    count, size = 80, 100_000
    with RawConnection(broker.port) as conn:
        conn.handshake()
        conn.create_producer(TOPIC, 1, "large")
        payload = b"x" * size
        frames = b"".join(
            commands.send(1, seq, encode_entry(entry_metadata("large", seq), payload))
            for seq in range(count)
        )
        sampler = TurnSampler(broker.loop, lambda: frames_decoded(service))
        conn.send(frames)
        receipts = conn.wait_for(T.SEND_RECEIPT, count)
        # The read that crosses the budget may add one more socket read (256 KiB) to the turn.
        assert sampler.stop() <= (READ_BYTES_PER_TURN + 256 * 1024) // size + 2
    assert [r.command.send_receipt.sequence_id for r in receipts] == list(range(count))


def test_requests_in_one_write_are_started_a_few_per_turn(broker: BrokerThread) -> None:
    """Each PRODUCER starts a task whose first step runs in the next turn: few per turn."""
    assert broker.loop is not None
    service = service_of(broker)
    producers = 400
    with RawConnection(broker.port) as conn:
        conn.handshake()
        sampler = TurnSampler(broker.loop, lambda: frames_decoded(service))
        conn.send(b"".join(commands.producer(TOPIC, i, i) for i in range(1, producers + 1)))
        replies = conn.wait_for(T.PRODUCER_SUCCESS, producers)
        assert sampler.stop() <= REQUESTS_PER_TURN
    assert sorted(r.command.producer_success.request_id for r in replies) == list(
        range(1, producers + 1)
    )


def test_order_and_back_pressure_hold_across_turns(small_pending: BrokerThread) -> None:
    """2000 SENDs and a CLOSE_PRODUCER in one write, 64 SENDs in flight at most: every receipt
    comes back, in SEND order, and the close is answered after the last of them."""
    count = 2000
    with RawConnection(small_pending.port) as conn:
        conn.handshake()
        conn.create_producer(TOPIC, 1, "ordered")
        frames = [commands.send(1, seq, entry("ordered", seq)) for seq in range(count)]
        conn.send(b"".join(frames) + commands.close_producer(1, 77))
        conn.wait_for(T.SUCCESS)
        answered = [f for f in conn.frames if f.type in (T.SEND_RECEIPT, T.SUCCESS)]
    receipts = [f.command.send_receipt for f in answered[:-1]]
    assert [r.sequence_id for r in receipts] == list(range(count))
    assert [r.message_id.entryId for r in receipts] == list(range(count))
    assert answered[-1].command.success.request_id == 77


def test_a_huge_ack_is_applied_over_several_turns_before_the_next_frame(
    broker: BrokerThread,
) -> None:
    assert broker.loop is not None
    count = 3 * IDS_PER_TURN + 10
    with RawConnection(broker.port) as conn:
        conn.handshake()
        conn.create_producer(TOPIC, 1, "acked")
        conn.send(b"".join(commands.send(1, seq, entry("acked", seq)) for seq in range(count)))
        conn.wait_for(T.SEND_RECEIPT, count)
        conn.send(
            commands.subscribe(TOPIC, "sub", 2, 2, pb.CommandSubscribe.Shared, initial_position=1)
        )
        conn.wait_for(T.SUCCESS)
        conn.send(commands.flow(2, count))
        messages = conn.wait_for(T.MESSAGE, count)
        ids = [MessageId.from_pb(m.command.message.message_id) for m in messages]
        subscription = service_of(broker).topics[TOPIC].subscriptions["sub"]
        assert subscription.unacked_count() == count

        sampler = TurnSampler(broker.loop, subscription.unacked_count)
        # The stats request behind the ACK is answered once the whole ACK is applied.
        conn.send(commands.ack(2, ids, request_id=3) + commands.consumer_stats(2, 4))
        stats = conn.wait_for(T.CONSUMER_STATS_RESPONSE)[0].command.consumerStatsResponse
        assert sampler.stop() <= IDS_PER_TURN
    assert stats.unackedMessages == 0
    ack_response = conn.of_type(T.ACK_RESPONSE)[0].command.ackResponse
    assert ack_response.request_id == 3
    assert not ack_response.HasField("error")
    assert subscription.unacked_count() == 0
