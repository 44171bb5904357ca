"""A raw Pulsar-protocol client for tests: frames built with ``protocol.commands``, read with
``FrameDecoder``, over a plain blocking socket, so a test can send exactly the bytes it means.

Unlike the official client it never retries or validates names on its own, so a test sees
exactly what the broker answers. ``RawConnection`` keeps every frame it read (``frames``);
``RawSession`` connects at once and hands out replies one by one (by request id)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from protocol import Frame, FrameDecoder, commands, pb
from protocol.framing import SUB_MESSAGE_NAME

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
        """Read frames until ``want(self.frames)`` holds. Raises ``TimeoutError`` at the
        deadline, ``ConnectionError`` if the broker closes the socket."""
        deadline = time.monotonic() + timeout
        while not want(self.frames):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out; frames so far: {[f.type for f in self.frames]}")
            self._receive(remaining)
        return self.frames

    def _receive(self, timeout: float) -> list[Frame]:
        self.sock.settimeout(timeout)
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the broker closed the connection")
        self._decoder.feed(data)
        new = list(self._decoder)
        self.frames.extend(new)
        return new

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


class RawSession(RawConnection):
    """A connected (CONNECT/CONNECTED done) socket whose replies are taken one at a time."""

    def __init__(self, port: int, *, timeout: float = 5.0, connect: bytes | None = None) -> None:
        super().__init__(port, timeout=timeout)
        self.timeout = timeout
        self._unread: list[Frame] = []
        # ``connect``: a CONNECT of the test's own (credentials, issue #15).
        self.send(connect or commands.connect("raw-session", protocol_version=20))
        self.take(lambda frame: frame.type == T.CONNECTED)

    def take(self, wanted: Callable[[Frame], bool]) -> Frame:
        """The first frame, received or still unread, for which ``wanted`` holds (others are
        kept for later calls). Raises ``ConnectionError`` if the broker closes the socket."""
        deadline = time.monotonic() + self.timeout
        while True:
            for index, frame in enumerate(self._unread):
                if wanted(frame):
                    return self._unread.pop(index)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no such frame; unread: {[f.type for f in self._unread]}")
            self._unread.extend(self._receive(remaining))

    def reply_to(self, request_id: int) -> Frame:
        """The response (of any type, ERROR included) carrying ``request_id``."""
        return self.take(lambda frame: request_id_of(frame) == request_id)

    def request(self, frame: bytes, request_id: int) -> Frame:
        self.send(frame)
        return self.reply_to(request_id)

    def is_usable(self) -> bool:
        """True if a PING still gets its PONG: the broker kept this connection."""
        try:
            self.send(commands.ping())
            self.take(lambda frame: frame.type == T.PONG)
        except (OSError, TimeoutError):
            return False
        return True


def request_id_of(frame: Frame) -> int | None:
    sub = getattr(frame.command, SUB_MESSAGE_NAME.get(frame.type, ""), None)
    if sub is None or not hasattr(sub, "request_id"):
        return None
    request_id: int = sub.request_id
    return request_id
