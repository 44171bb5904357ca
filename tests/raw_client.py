"""A raw Pulsar-protocol client for tests: frames built with ``protocol.commands``, read with
``FrameDecoder``, over a plain blocking socket, so a test can send exactly the bytes it means."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from protocol import Frame, FrameDecoder, commands, pb

T = pb.BaseCommand.Type


class RawConnection:
    """One socket to the broker; ``frames`` keeps everything read so far, in order."""

    def __init__(self, port: int, *, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._decoder = FrameDecoder()
        self.frames: list[Frame] = []

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, want: Callable[[list[Frame]], bool], timeout: float = 10.0) -> list[Frame]:
        """Read frames until ``want(self.frames)`` holds; AssertionError at the deadline."""
        deadline = time.monotonic() + timeout
        while not want(self.frames):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out; frames so far: {[f.type for f in self.frames]}")
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 20)
            if not data:
                raise AssertionError("connection closed by the broker")
            self._decoder.feed(data)
            self.frames.extend(self._decoder)
        return self.frames

    def of_type(self, kind: int) -> list[Frame]:
        return [f for f in self.frames if f.type == kind]

    def wait_for(self, kind: int, count: int = 1, timeout: float = 10.0) -> list[Frame]:
        """Wait until ``count`` frames of ``kind`` arrived in total; return them."""
        self.read_until(lambda frames: sum(f.type == kind for f in frames) >= count, timeout)
        return self.of_type(kind)

    def handshake(self) -> None:
        self.send(commands.connect("raw-test", protocol_version=20))
        self.wait_for(T.CONNECTED)

    def create_producer(self, topic: str, producer_id: int, name: str) -> None:
        before = len(self.of_type(T.PRODUCER_SUCCESS))
        self.send(commands.producer(topic, producer_id, 1000 + producer_id, producer_name=name))
        self.wait_for(T.PRODUCER_SUCCESS, before + 1)


def send_outcomes(conn: RawConnection) -> list[tuple[int, object]]:
    """``(sequence_id, "ledger:entry" or the ServerError code)`` of every receipt and error."""
    outcomes: list[tuple[int, object]] = []
    for frame in conn.frames:
        if frame.type == T.SEND_RECEIPT:
            receipt = frame.command.send_receipt
            mid = receipt.message_id
            entry = -1 if mid.entryId >= 2**63 else mid.entryId
            ledger = -1 if mid.ledgerId >= 2**63 else mid.ledgerId
            outcomes.append((receipt.sequence_id, f"{ledger}:{entry}"))
        elif frame.type == T.SEND_ERROR:
            error = frame.command.send_error
            outcomes.append((error.sequence_id, error.error))
    return outcomes
