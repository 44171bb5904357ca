"""A blocking raw-protocol session for tests: frames built with ``protocol.commands`` go out,
decoded frames come back, and a reply is found by its ``request_id``.

Unlike the official client it never retries or validates names on its own, so a test sees
exactly what the broker answers.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from protocol import FrameDecoder, commands, pb
from protocol.framing import SUB_MESSAGE_NAME, Frame

T = pb.BaseCommand.Type


class RawSession:
    """One connected (CONNECT/CONNECTED done) socket to a broker on 127.0.0.1."""

    def __init__(self, port: int, *, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._decoder = FrameDecoder()
        self._unread: list[Frame] = []
        self.send(commands.connect("raw-session", protocol_version=20))
        self.wait_for(lambda frame: frame.type == T.CONNECTED)

    def __enter__(self) -> RawSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def send(self, frame: bytes) -> None:
        self._sock.sendall(frame)

    def wait_for(self, wanted: Callable[[Frame], bool]) -> Frame:
        """The first frame, received or still unread, for which ``wanted`` holds (others are
        kept for later calls). Raises ``ConnectionError`` if the broker closes the socket."""
        deadline = time.monotonic() + self.timeout
        while True:
            for index, frame in enumerate(self._unread):
                if wanted(frame):
                    return self._unread.pop(index)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no such frame; unread: {[f.type for f in self._unread]}")
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self._decoder.feed(data)
            self._unread.extend(self._decoder)

    def reply_to(self, request_id: int) -> Frame:
        """The response (of any type, ERROR included) carrying ``request_id``."""
        return self.wait_for(lambda frame: request_id_of(frame) == request_id)

    def request(self, frame: bytes, request_id: int) -> Frame:
        self.send(frame)
        return self.reply_to(request_id)

    def is_usable(self) -> bool:
        """True if a PING still gets its PONG: the broker kept this connection."""
        try:
            self.send(commands.ping())
            self.wait_for(lambda frame: frame.type == T.PONG)
        except (OSError, TimeoutError):
            return False
        return True


def request_id_of(frame: Frame) -> int | None:
    sub = getattr(frame.command, SUB_MESSAGE_NAME.get(frame.type, ""), None)
    if sub is None or not hasattr(sub, "request_id"):
        return None
    request_id: int = sub.request_id
    return request_id
