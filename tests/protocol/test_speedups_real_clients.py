"""Real SEND frames, from the official ``pulsar-client`` and from ours, on both implementations.

A proxy in front of a real broker keeps every byte the clients write; the stream is then
decoded by the compiled and the reference decoder (same frames, same dedup identity) and each
SEND's entry checked by both checkers (same verdict). Every SEND of these clients must take the
compiled fast path: that is where the broker's time goes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pulsar
import pytest

import client
from protocol import _speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.framing import PyFrameDecoder
from protocol.metadata import PySendEntryChecker
from protocol.send_identity import py_of_send
from tests.helpers import BrokerThread
from tests.protocol.speedups_wire import outcomes
from tests.tcp_proxy import Direction, TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.compat]


class RecordingProxy(TcpProxy):
    """Keeps, per connection, the bytes each client sent (whole frames, in order)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream)
        self.sent: dict[int, list[bytes]] = {}
        self._recording = threading.Lock()

    def _keep(self, raw: bytes, direction: Direction, connection: int) -> bool:
        if direction is Direction.TO_BROKER:
            with self._recording:
                self.sent.setdefault(connection, []).append(raw)
        return super()._keep(raw, direction, connection)


@pytest.fixture
def proxy(broker: BrokerThread) -> Iterator[RecordingProxy]:
    with RecordingProxy(("127.0.0.1", broker.port)) as running:
        yield running


def _publish(client_class: type, url: str, topic: str) -> None:
    """Unbatched with key and properties, a batch of three, and named sequence ids."""
    pulsar_client = client_class(url, operation_timeout_seconds=10)
    try:
        single = pulsar_client.create_producer(
            topic, producer_name=f"{topic}-single", batching_enabled=False
        )
        single.send(b"hello", properties={"colour": "blue"}, partition_key="key-1")
        single.send(b"again", sequence_id=41)
        batched = pulsar_client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=60_000,
        )
        for index in range(3):
            batched.send_async(f"b-{index}".encode(), callback=lambda *_: None)
        batched.flush()
        single.close()
        batched.close()
    finally:
        pulsar_client.close()


@pytest.mark.parametrize("client_class", [pulsar.Client, client.Client], ids=["official", "ours"])
def test_real_sends_decode_alike_and_take_the_fast_path(
    proxy: RecordingProxy, client_class: type
) -> None:
    _publish(client_class, proxy.url, f"persistent://public/default/real-{client_class.__module__}")
    streams = list(proxy.sent.values())
    sends = 0
    for frames in streams:
        compiled = outcomes(_speedups.FrameDecoder(), frames, _speedups.of_send)
        assert compiled == outcomes(PyFrameDecoder(), frames, py_of_send)
        decoder = _speedups.FrameDecoder()
        decoder.feed(b"".join(frames))
        for frame in decoder:
            if frame.type != pb.BaseCommand.SEND:
                continue
            sends += 1
            assert isinstance(frame.command, _speedups.SendCommand)  # the fast path
            assert frame.checksum_valid
            assert frame.has_checksum
            count = frame.command.send.num_messages
            expected = PySendEntryChecker().check(frame.entry, count)
            assert _speedups.SendEntryChecker().check(frame.entry, count) == expected
    assert sends == 3  # two single messages and one batch
