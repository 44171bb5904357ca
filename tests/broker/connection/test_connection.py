"""ServerConnection without a socket: a fake transport records writes and read pausing.

Checks the hot-path rules of broker/connection/core.py: SENDs are pipelined (the read side never
waits for fsync), receipts come back in SEND order only after the group commit, replies of one
read batch are coalesced into one write, and past ``maxPendingPublishRequestsPerConnection``
reading pauses until receipts drain.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from broker.connection.core import INBOX_BYTES, ServerConnection
from broker.service import BrokerService
from broker.storage.files import FileLayer
from protocol import FrameDecoder, commands, pb
from protocol._accel import speedups
from protocol.metadata import encode_entry
from tests.helpers import broker_config

T = pb.BaseCommand.Type


class GatedSyncLayer(FileLayer):
    """fdatasync blocks while the gate is closed (a slow disk we control)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def fdatasync(self, fd: int) -> None:
        self.gate.wait(30)
        super().fdatasync(fd)


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.paused = False
        self.pause_count = 0
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def pause_reading(self) -> None:
        self.paused = True
        self.pause_count += 1

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True

    def frames(self) -> list[Any]:
        decoder = FrameDecoder()
        decoder.feed(b"".join(self.writes))
        return list(decoder)


async def _until(predicate: Any) -> None:
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110 - polls a fake transport, no event exists
            await asyncio.sleep(0.005)


def _entry(sequence_id: int) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    return encode_entry(meta, b"x" * 10)


async def test_pipelined_sends_pause_reading_and_receipts_stay_ordered(tmp_path: Path) -> None:
    config = replace(
        broker_config(tmp_path / "data"), max_pending_publish_requests_per_connection=50
    )
    service = BrokerService(config)
    layer = GatedSyncLayer()
    service.file_layer = layer
    transport = FakeTransport()
    connection = ServerConnection(service)
    connection.connection_made(transport)  # type: ignore[arg-type]
    topic = "persistent://public/default/pipelined"
    connection.data_received(
        commands.connect("test", protocol_version=20)
        + commands.producer(topic, 1, 1, producer_name="p")
    )
    await _until(lambda: any(f.type == T.PRODUCER_SUCCESS for f in transport.frames()))

    layer.gate.clear()  # the disk stalls: nothing can become durable
    writes_before = len(transport.writes)
    sends = b"".join(commands.send(1, seq, _entry(seq)) for seq in range(120))
    connection.data_received(sends)  # one read batch: all 120 go to the topic at once
    await asyncio.sleep(0.1)
    assert transport.paused  # past 50 in flight, reading stops
    assert not [f for f in transport.frames() if f.type == T.SEND_RECEIPT]

    layer.gate.set()
    await _until(lambda: len([f for f in transport.frames() if f.type == T.SEND_RECEIPT]) == 120)
    receipts = [f.command.send_receipt for f in transport.frames() if f.type == T.SEND_RECEIPT]
    assert [r.sequence_id for r in receipts] == list(range(120))
    assert [r.message_id.entryId for r in receipts] == list(range(120))
    assert not transport.paused
    # Coalescing: far fewer socket writes than receipts.
    assert len(transport.writes) - writes_before < 30
    connection.connection_lost(None)
    await service.close_topics()


async def test_duplicate_receipt_waits_for_earlier_pending(tmp_path: Path) -> None:
    """A duplicate's receipt (-1:-1) is not sent ahead of an earlier, still pending SEND."""
    service = BrokerService(broker_config(tmp_path / "data"))
    layer = GatedSyncLayer()
    service.file_layer = layer
    transport = FakeTransport()
    connection = ServerConnection(service)
    connection.connection_made(transport)  # type: ignore[arg-type]
    topic = "persistent://public/default/dup-order"
    connection.data_received(
        commands.connect("test", protocol_version=20)
        + commands.producer(topic, 1, 1, producer_name="p")
    )
    await _until(lambda: any(f.type == T.PRODUCER_SUCCESS for f in transport.frames()))
    connection.data_received(commands.send(1, 0, _entry(0)))
    await _until(lambda: len([f for f in transport.frames() if f.type == T.SEND_RECEIPT]) == 1)
    layer.gate.clear()
    connection.data_received(commands.send(1, 1, _entry(1)) + commands.send(1, 0, _entry(0)))
    await asyncio.sleep(0.1)
    assert len([f for f in transport.frames() if f.type == T.SEND_RECEIPT]) == 1
    layer.gate.set()
    await _until(lambda: len([f for f in transport.frames() if f.type == T.SEND_RECEIPT]) == 3)
    receipts = [f.command.send_receipt for f in transport.frames() if f.type == T.SEND_RECEIPT]
    assert [r.sequence_id for r in receipts] == [0, 1, 0]
    assert receipts[2].message_id.entryId == 2**64 - 1  # duplicate: -1:-1
    connection.connection_lost(None)
    await service.close_topics()


def _read_in(connection: ServerConnection, data: bytes, read_size: int) -> list[int]:
    """Deliver ``data`` as a buffered transport does (``get_buffer``, write, ``buffer_updated``),
    at most ``read_size`` bytes a read; returns the size of each buffer offered."""
    offered = []
    view = memoryview(data)
    while view:
        buffer = connection.get_buffer(-1)
        offered.append(len(buffer))
        taken = min(len(buffer), read_size, len(view))
        buffer[:taken] = view[:taken]
        connection.buffer_updated(taken)
        view = view[taken:]
    return offered


async def test_a_large_send_is_read_straight_into_its_entry(tmp_path: Path) -> None:
    """Past its head, a batch-sized SEND's bytes go from the transport into the entry (the
    decoder's window), and what is stored is byte for byte what was sent."""
    service = BrokerService(broker_config(tmp_path / "data"))
    transport = FakeTransport()
    connection = ServerConnection(service)
    connection.connection_made(transport)  # type: ignore[arg-type]
    topic = "persistent://public/default/windowed"
    _read_in(
        connection,
        commands.connect("test", protocol_version=20)
        + commands.producer(topic, 1, 1, producer_name="p"),
        1000,
    )
    await _until(lambda: any(f.type == T.PRODUCER_SUCCESS for f in transport.frames()))
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    entries = [encode_entry(meta, bytes(range(256)) * 1200)]  # ~300 KB
    meta.sequence_id = 1
    entries.append(encode_entry(meta, b"small"))
    data = commands.send(1, 0, entries[0]) + commands.send(1, 1, entries[1])
    offered = _read_in(connection, data, 50_000)
    windows = [size for size in offered if size != INBOX_BYTES]  # the rest of the entry
    if speedups() is None:  # the reference decoder buffers every frame whole
        assert windows == []
    else:
        assert len(entries[0]) - 50_000 < windows[0] < len(entries[0]) - 49_900
        assert windows == list(range(windows[0], 0, -50_000))
    await _until(lambda: len([f for f in transport.frames() if f.type == T.SEND_RECEIPT]) == 2)
    stored = service.topics[topic].ledger
    assert [data for _, data in stored.iter_entries(stored.before_first_position())] == entries
    connection.connection_lost(None)
    await service.close_topics()
