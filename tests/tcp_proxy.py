"""A fault-injecting TCP proxy for Pulsar connections, for tests.

``TcpProxy`` listens on ``127.0.0.1:<port>`` and relays every accepted connection to an upstream
broker. It runs its own asyncio loop on a daemon thread, so it works with the blocking official
client and with a broker in another thread or process. Point the client at ``proxy.url``.

Both directions are split into Pulsar frames by their length prefix and forwarded byte for byte
(never re-encoded). While a frame filter is installed, each frame is also decoded with
``protocol.FrameDecoder`` and handed to the filter, which may drop it. Faults:

* ``drop_frames(predicate)``: drop every frame for which ``predicate(direction, frame)`` is
  True (e.g. one chosen SEND_RECEIPT); ``drop_fraction(type, fraction, seed=...)`` drops a seeded
  random fraction of one command type (e.g. 1 % of SEND_RECEIPTs). ``dropped`` lists what was
  dropped, so a test can show that the fault really bit.
* ``stall()`` / ``resume()``: stop relaying in both directions (bytes are held, connections stay
  open), as a network partition that heals; ``refuse(True)`` closes new connections at once.
* ``cut()``: abort every open connection (the peers see a reset), as a dropped link.
* ``upstream`` can be changed at any time (a restarted broker on a new port); it applies to new
  connections.

Every control method is thread-safe and returns once the change is in effect for frames not yet
relayed. Frames are judged whole: a filter never sees a partial frame and a dropped frame never
leaves a partial frame on the wire, so the stream stays well formed.

Example::

    with TcpProxy(("127.0.0.1", broker.port)) as proxy:
        proxy.drop_fraction(pb.BaseCommand.SEND_RECEIPT, 0.01, seed=7)
        client = pulsar.Client(proxy.url)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import struct
import threading
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from protocol import Frame, FrameDecoder, RemoteProtocolError

__all__ = ["Direction", "DroppedFrame", "FrameFilter", "TcpProxy"]

R = TypeVar("R")
_U32 = struct.Struct(">I")
_READ_CHUNK = 256 * 1024


class Direction(enum.Enum):
    """Which way a frame travels through the proxy."""

    TO_BROKER = "to_broker"
    TO_CLIENT = "to_client"


FrameFilter = Callable[[Direction, Frame], bool]
"""Returns True to drop the frame. Runs on the proxy thread; keep it quick and thread-safe."""


@dataclass(frozen=True, slots=True)
class DroppedFrame:
    """A frame the proxy swallowed: its direction, decoded form and connection number."""

    direction: Direction
    frame: Frame
    connection: int


@dataclass(slots=True)
class _Link:
    """One proxied connection: the client side and the broker side."""

    number: int
    client: asyncio.StreamWriter
    broker: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client, self.broker):
            if writer is not None:
                writer.transport.abort()


class TcpProxy:
    """Relays TCP connections to ``upstream`` with injectable faults (see the module docstring)."""

    def __init__(
        self, upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self.dropped: list[DroppedFrame] = []
        self.forwarded: Counter[tuple[Direction, int]] = Counter()
        self.connections_accepted = 0
        self._filter: FrameFilter | None = None
        self._refusing = False
        self._links: dict[int, _Link] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> TcpProxy:
        """Start listening; returns self once ``port`` is bound."""
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("proxy did not start")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        """Abort every connection and stop listening."""
        if self._loop is None or not self._thread.is_alive():
            return
        stopped = self._stopped
        assert stopped is not None
        self._loop.call_soon_threadsafe(stopped.set)
        self._thread.join(10)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The ``pulsar://`` service URL to give the client."""
        return f"pulsar://{self.host}:{self.port}"

    # ------------------------------------------------------------------ faults

    def drop_frames(self, predicate: FrameFilter | None) -> None:
        """Drop every frame ``predicate`` accepts (None: drop nothing, relay unparsed)."""
        self._filter = predicate

    def drop_fraction(
        self,
        command_type: int,
        fraction: float,
        *,
        direction: Direction = Direction.TO_CLIENT,
        seed: int = 0,
    ) -> None:
        """Drop a seeded random ``fraction`` of the frames of ``command_type`` (a
        ``pb.BaseCommand.Type`` value) going ``direction``."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction}")
        rng = random.Random(seed)

        def predicate(seen: Direction, frame: Frame) -> bool:
            return seen is direction and frame.type == command_type and rng.random() < fraction

        self.drop_frames(predicate)

    def stall(self) -> None:
        """Stop relaying in both directions; bytes wait in the proxy until ``resume``."""
        self._call(self._set_flowing(False))

    def resume(self) -> None:
        """Relay again after ``stall``."""
        self._call(self._set_flowing(True))

    def refuse(self, refusing: bool = True) -> None:
        """While set, new connections are closed as soon as they are accepted."""
        self._refusing = refusing

    def cut(self) -> int:
        """Abort every open connection (both sides see a reset); returns how many."""
        return self._call(self._cut())

    def dropped_of(self, command_type: int) -> list[DroppedFrame]:
        """The dropped frames of one command type."""
        with self._lock:
            return [d for d in self.dropped if d.frame.type == command_type]

    @property
    def open_connections(self) -> int:
        return len(self._links)

    # ------------------------------------------------------------------ proxy thread

    def _call(self, coro: Coroutine[Any, Any, R]) -> R:
        loop = self._loop
        if loop is None:
            coro.close()
            raise RuntimeError("proxy is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(10)

    async def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _cut(self) -> int:
        links = list(self._links.values())
        for link in links:
            link.abort()
        return len(links)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced to the thread that called start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopped.wait()
        self._server.close()
        await self._cut()
        tasks = [task for link in list(self._links.values()) for task in link.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _accept(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        self.connections_accepted += 1
        link = _Link(self.connections_accepted, client)
        if self._refusing:
            client.transport.abort()
            return
        try:
            broker_reader, broker = await asyncio.open_connection(*self.upstream)
        except OSError:
            client.transport.abort()  # the broker is down: the client sees a reset and retries
            return
        link.broker = broker
        self._links[link.number] = link
        link.tasks = [
            asyncio.create_task(self._pump(link, client_reader, broker, Direction.TO_BROKER)),
            asyncio.create_task(self._pump(link, broker_reader, client, Direction.TO_CLIENT)),
        ]
        try:
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            self._links.pop(link.number, None)
            link.abort()

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        direction: Direction,
    ) -> None:
        """Relay whole frames from ``reader`` to ``writer`` until either side closes."""
        flowing = self._flowing
        assert flowing is not None
        pending = bytearray()
        try:
            while True:
                data = await reader.read(_READ_CHUNK)
                if not data:
                    break
                pending += data
                out, consumed = self._select_frames(pending, direction, link.number)
                del pending[:consumed]
                if out:
                    await flowing.wait()
                    writer.write(out)
                    await writer.drain()
        except (ConnectionError, RemoteProtocolError):
            pass
        finally:
            # One side is gone: close the other, as a real broker or client would see it.
            link.abort()

    def _select_frames(
        self, buffer: bytearray, direction: Direction, connection: int
    ) -> tuple[bytes, int]:
        """Split ``buffer`` into whole frames; return the bytes to relay and bytes consumed."""
        keep: list[bytes] = []
        offset = 0
        view = memoryview(buffer)
        try:
            while len(buffer) - offset >= 4:
                (size,) = _U32.unpack_from(buffer, offset)
                end = offset + 4 + size
                if end > len(buffer):
                    break
                raw = bytes(view[offset:end])
                offset = end
                if self._keep(raw, direction, connection):
                    keep.append(raw)
        finally:
            view.release()
        return b"".join(keep), offset

    def _keep(self, raw: bytes, direction: Direction, connection: int) -> bool:
        predicate = self._filter
        if predicate is None:
            return True
        decoder = FrameDecoder()
        decoder.feed(raw)
        frame = next(iter(decoder))
        if predicate(direction, frame):
            with self._lock:
                self.dropped.append(DroppedFrame(direction, frame, connection))
            return False
        self.forwarded[(direction, frame.type)] += 1
        return True
