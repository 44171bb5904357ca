"""Bad input over a raw socket: each case gets its documented outcome, and only that connection
suffers: a healthy official-client producer on another connection keeps publishing meanwhile."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from protocol import FrameDecoder, commands, encode_command, pb
from protocol.errors import ServerError
from protocol.metadata import encode_entry
from tests.helpers import BrokerThread, broker_config

pytestmark = [pytest.mark.integration, pytest.mark.compat]
T = pb.BaseCommand.Type


class HealthyProducer:
    """Publishes continuously from a thread; counts acknowledged sends."""

    def __init__(self, url: str) -> None:
        self.client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.producer = self.client.create_producer(
            f"persistent://public/default/healthy-{uuid.uuid4().hex[:8]}"
        )
        self.acked = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.send(b"still-alive")
                self.acked += 1
            except Exception as exc:  # recorded and asserted on by the test
                self.errors.append(exc)
                return

    def __enter__(self) -> HealthyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


@pytest.fixture
def healthy(broker: BrokerThread) -> Iterator[HealthyProducer]:
    with HealthyProducer(broker.url) as producer:
        yield producer


_open_sockets: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_raw_sockets() -> Iterator[None]:
    yield
    while _open_sockets:
        _open_sockets.pop().close()


def raw_connect(broker: BrokerThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    _open_sockets.append(sock)
    return sock


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True once the broker closed the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def read_frames(sock: socket.socket, want: Callable[[list], bool], timeout: float = 5.0) -> list:
    decoder = FrameDecoder()
    frames: list = []
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not want(frames):
        data = sock.recv(65536)
        if not data:
            break
        decoder.feed(data)
        frames.extend(decoder)
    return frames


def handshake(sock: socket.socket) -> None:
    sock.sendall(commands.connect("raw-test", protocol_version=20))
    frames = read_frames(sock, lambda f: len(f) >= 1)
    assert frames[0].type == T.CONNECTED


def assert_healthy_progress(healthy: HealthyProducer) -> None:
    before = healthy.acked
    deadline = time.monotonic() + 5
    while healthy.acked < before + 20 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not healthy.errors
    assert healthy.acked >= before + 20


def test_garbage_closes_only_that_connection(
    broker: BrokerThread, healthy: HealthyProducer
) -> None:
    sock = raw_connect(broker)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert closed_by_peer(sock)
    assert_healthy_progress(healthy)


def test_oversized_length_is_refused_without_reading_it(
    broker: BrokerThread, healthy: HealthyProducer
) -> None:
    for declared in (2**31 - 1, broker.config.frame_limit + 1):
        sock = raw_connect(broker)
        sock.sendall(struct.pack(">I", declared))
        assert closed_by_peer(sock)
    assert_healthy_progress(healthy)


def test_truncated_protobuf_closes(broker: BrokerThread, healthy: HealthyProducer) -> None:
    sock = raw_connect(broker)
    good = commands.connect("raw-test", protocol_version=20)
    body = good[8:-3]  # cut the command short, sizes consistent with the cut
    sock.sendall(struct.pack(">II", len(body) + 4, len(body)) + body)
    assert closed_by_peer(sock)
    assert_healthy_progress(healthy)


def test_command_before_connect_closes(broker: BrokerThread, healthy: HealthyProducer) -> None:
    sock = raw_connect(broker)
    sock.sendall(commands.ping())
    assert closed_by_peer(sock)
    assert_healthy_progress(healthy)


def test_unknown_command_type_closes(broker: BrokerThread, healthy: HealthyProducer) -> None:
    sock = raw_connect(broker)
    handshake(sock)
    cmd = pb.BaseCommand()
    cmd.type = T.NEW_TXN  # parses, but this broker serves no transactions
    cmd.newTxn.request_id = 1
    sock.sendall(encode_command(cmd))
    assert closed_by_peer(sock)
    assert_healthy_progress(healthy)


def test_bad_checksum_gets_checksum_error_and_keeps_connection(
    broker: BrokerThread, healthy: HealthyProducer
) -> None:
    sock = raw_connect(broker)
    handshake(sock)
    topic = f"persistent://public/default/crc-{uuid.uuid4().hex[:8]}"
    sock.sendall(commands.producer(topic, 1, 1, producer_name="crc-producer"))
    frames = read_frames(sock, lambda f: any(x.type == T.PRODUCER_SUCCESS for x in f))
    assert any(x.type == T.PRODUCER_SUCCESS for x in frames)

    metadata = pb.MessageMetadata(producer_name="crc-producer", sequence_id=0, publish_time=1)
    entry = encode_entry(metadata, b"payload")
    frame = bytearray(commands.send(1, 0, entry))
    frame[-1] ^= 0x01  # flip a payload bit after the checksum was computed
    sock.sendall(bytes(frame))
    frames = read_frames(sock, lambda f: any(x.type == T.SEND_ERROR for x in f))
    errors = [x for x in frames if x.type == T.SEND_ERROR]
    assert errors
    assert errors[0].command.send_error.error == ServerError.ChecksumError

    # The connection is still usable: a correct SEND is stored and acknowledged.
    sock.sendall(commands.send(1, 0, entry))
    frames = read_frames(sock, lambda f: any(x.type == T.SEND_RECEIPT for x in f))
    receipts = [x for x in frames if x.type == T.SEND_RECEIPT]
    assert receipts
    assert receipts[0].command.send_receipt.message_id.entryId == 0
    assert_healthy_progress(healthy)


def test_handshake_deadline_closes_silent_connection(tmp_path: object) -> None:
    assert isinstance(tmp_path, Path)
    running = BrokerThread(
        broker_config(tmp_path / "data", connection_handshake_timeout_seconds=1)
    ).start()
    try:
        sock = socket.create_connection(("127.0.0.1", running.port), timeout=5)
        _open_sockets.append(sock)
        started = time.monotonic()
        assert closed_by_peer(sock, timeout=5)
        assert time.monotonic() - started >= 0.9
    finally:
        running.stop()


def test_slow_consumer_back_pressure_bounds_the_write_buffer(tmp_path: Path) -> None:
    """A consumer that never reads: dispatch stops at the write high-water mark."""
    high = 256 * 1024
    running = BrokerThread(
        broker_config(
            tmp_path / "data",
            connection_write_buffer_high_water_mark_bytes=high,
            connection_write_buffer_low_water_mark_bytes=high // 4,
        )
    ).start()
    client = pulsar.Client(running.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        topic = f"persistent://public/default/slow-{uuid.uuid4().hex[:8]}"
        sock = raw_connect(running)
        handshake(sock)
        sock.sendall(commands.subscribe(topic, "slow", 1, 1, sub_type=pb.CommandSubscribe.Shared))
        read_frames(sock, lambda f: any(x.type == T.SUCCESS for x in f))
        sock.sendall(commands.flow(1, 1_000_000))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        payload = b"x" * 10_000
        for _ in range(2000):  # 20 MB, far more than socket buffers and the high-water mark
            producer.send_async(payload, None)
        producer.flush()

        async def dispatched() -> int:
            assert running.broker is not None
            assert running.broker.service is not None
            topic_obj = running.broker.service.topics[topic]
            return topic_obj.subscriptions["slow"].stats.msg_out

        async def largest_buffer() -> int:
            assert running.broker is not None
            assert running.broker.service is not None
            sizes = [
                c._transport.get_write_buffer_size()
                for c in running.broker.service.connections
                if c._transport is not None
            ]
            return max(sizes)

        time.sleep(0.5)
        assert running.call(dispatched) > 0
        # One dispatch round may overshoot the mark by at most a read batch of entries.
        assert running.call(largest_buffer) <= high + 100 * len(payload) + 65536
    finally:
        client.close()
        running.stop()
