"""Issue #24: a heavy SEND never keeps the broker's event loop busy for long.

A real broker, a raw socket client, and a task on the broker's own loop that records the longest
gap between its wake-ups while the heavy SENDs are answered. The bound (200 ms) is generous for
a shared 2-core machine and far below what these shapes cost before (4-10 s each).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from protocol import commands, pb
from protocol.framing import Frame, FrameDecoder
from tests.heavy_sends import LoopGap, empty_record_batch, keyed_batch, zstd_key_bomb
from tests.helpers import BrokerThread, topic_stats

T = pb.BaseCommand.Type
TOPIC = "persistent://public/default/bounded-sends"
MAX_LOOP_GAP_S = 0.2


class RawProducer:
    """A blocking socket speaking just enough of the protocol to produce."""

    def __init__(self, port: int, name: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.decoder = FrameDecoder(max_frame_size=64 << 20)
        self.sock.sendall(commands.connect("bounded-sends-test"))
        self.expect(T.CONNECTED)
        self.sock.sendall(commands.producer(TOPIC, 1, 1, producer_name=name))
        self.expect(T.PRODUCER_SUCCESS)

    def expect(self, kind: int) -> Frame:
        while True:
            for frame in self.decoder:
                if frame.type == T.PING:
                    self.sock.sendall(commands.pong())
                    continue
                assert frame.type == kind, frame.command
                return frame
            data = self.sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            self.decoder.feed(data)

    def send(self, sequence_id: int, entry: bytes, num_messages: int | None = None) -> Frame:
        self.sock.sendall(commands.send(1, sequence_id, entry, num_messages=num_messages))
        while True:
            for frame in self.decoder:
                if frame.type in (T.SEND_RECEIPT, T.SEND_ERROR):
                    return frame
            data = self.sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def loop_gap(broker: BrokerThread) -> Iterator[LoopGap]:
    assert broker.loop is not None
    gap = LoopGap(broker.loop)
    yield gap
    gap.stop()


@pytest.fixture
def connect(broker: BrokerThread) -> Iterator[Callable[[str], RawProducer]]:
    opened: list[RawProducer] = []

    def open_producer(name: str) -> RawProducer:
        opened.append(RawProducer(broker.port, name))
        return opened[-1]

    yield open_producer
    for producer in opened:
        producer.close()


def test_a_large_batch_below_the_high_water_mark_is_cheap(
    connect: Callable[[str], RawProducer], loop_gap: LoopGap
) -> None:
    producer = connect("dedup")
    for seq in range(10):
        entry = keyed_batch("dedup", seq, [f"k{seq}"])
        assert producer.send(seq, entry, 1).type == T.SEND_RECEIPT
    entry, count = empty_record_batch("dedup", 5)  # ~700,000 records, at or below the mark
    frame = producer.send(5, entry, count)
    assert frame.type == T.SEND_RECEIPT  # the range reaches above the mark: stored
    assert frame.command.send_receipt.message_id.entryId == 10
    assert loop_gap.stop() < MAX_LOOP_GAP_S


def test_a_zstd_bomb_with_a_key_is_refused_without_stalling(
    broker: BrokerThread, connect: Callable[[str], RawProducer], loop_gap: LoopGap
) -> None:
    producer = connect("keys")
    entry, count = zstd_key_bomb("keys", 0, "bomb")
    assert len(entry) < 2048
    frame = producer.send(0, entry, count)
    assert frame.type == T.SEND_ERROR
    error = frame.command.send_error
    # ChecksumError: the official clients fail just this message (broker/errors.py).
    assert error.error == pb.ServerError.ChecksumError
    assert "maxMessageSize" in error.message
    # Nothing stored, and the producer goes on.
    ok = producer.send(1, keyed_batch("keys", 1, ["a", "b"]), 2)
    assert ok.type == T.SEND_RECEIPT
    assert ok.command.send_receipt.message_id.entryId == 0
    assert loop_gap.stop() < MAX_LOOP_GAP_S
    assert topic_stats(broker.http, TOPIC)["msgInCounter"] == 2
