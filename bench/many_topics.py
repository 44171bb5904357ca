"""Raw-protocol drivers for thousands of topics over a few connections (``scenarios_scale``).

The official client and ``client/`` open one producer or consumer object per topic with its
own bookkeeping; at 10,000 or 100,000 topics the generator, not the broker, would be measured.
These drivers speak the protocol directly: requests are pipelined (at most ``window`` waiting
per connection), replies matched by request id, and consumers counted, not decoded.

* ``open_idle_topics``: PRODUCER then CLOSE_PRODUCER per topic: the topic is loaded (created
  on first use) and left idle, as a producer that connected once and went away leaves it.
* ``ConsumerPool``: one Exclusive consumer per topic (SUBSCRIBE + FLOW); each read of a
  connection acknowledges, cumulatively, the last entry of every consumer that received some,
  and returns permits once half are used.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import cast

from protocol import commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.enums import AckType, InitialPosition, SubType
from protocol.framing import Frame, FrameDecoder
from protocol.ids import MessageId

T = pb.BaseCommand
_REPLY_TIMEOUT = 600.0
_PERMITS = 1000


class RawTopicsError(Exception):
    """The broker refused a connection or a request."""


class _Pipe(asyncio.Protocol):
    """One connection: requests answered by request id; MESSAGE frames to ``on_messages``."""

    def __init__(self, on_messages: Callable[[_Pipe, list[Frame]], None] | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.connected: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.requests: dict[int, asyncio.Future[Frame]] = {}
        self.on_messages = on_messages
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.write(commands.connect("magnetar-bench"))

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def request(self, request_id: int, data: bytes) -> asyncio.Future[Frame]:
        future: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self.requests[request_id] = future
        self.write(data)
        return future

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        messages = []
        for frame in self.decoder:
            if frame.type == T.MESSAGE:
                messages.append(frame)
            else:
                self._on_control(frame)
        if messages and self.on_messages is not None:
            self.on_messages(self, messages)

    def _on_control(self, frame: Frame) -> None:
        kind, command = frame.type, frame.command
        if kind == T.CONNECTED:
            self.connected.set_result(None)
        elif kind == T.PRODUCER_SUCCESS:
            self._resolve(command.producer_success.request_id, frame)
        elif kind == T.SUCCESS:
            self._resolve(command.success.request_id, frame)
        elif kind == T.ERROR:
            error = RawTopicsError(f"{command.error.error}: {command.error.message}")
            future = self.requests.pop(command.error.request_id, None)
            if future is not None and not future.done():
                future.set_exception(error)
        elif kind == T.PING:
            self.write(commands.pong())

    def _resolve(self, request_id: int, frame: Frame) -> None:
        future = self.requests.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.connected, *self.requests.values()):
            if not future.done():
                future.set_exception(RawTopicsError(f"connection lost: {exc}"))
        if not self.lost.done():
            self.lost.set_result(None)

    async def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.lost, 5)


async def _open_pipes(
    port: int, count: int, on_messages: Callable[[_Pipe, list[Frame]], None] | None = None
) -> list[_Pipe]:
    loop = asyncio.get_running_loop()
    pipes = []
    for _ in range(count):
        _, pipe = await loop.create_connection(lambda: _Pipe(on_messages), "127.0.0.1", port)
        await asyncio.wait_for(pipe.connected, 30)
        pipes.append(pipe)
    return pipes


async def _pipelined(
    pipe: _Pipe,
    jobs: Sequence[tuple[int, str]],
    window: int,
    step: Callable[[_Pipe, int, str], Awaitable[None]],
) -> None:
    """Run ``step(pipe, id, topic)`` for each job, at most ``window`` at a time."""
    gate = asyncio.Semaphore(window)

    async def one(job_id: int, topic: str) -> None:
        async with gate:
            await step(pipe, job_id, topic)

    await asyncio.gather(*(one(job_id, topic) for job_id, topic in jobs))


async def _attach_and_close(pipe: _Pipe, producer_id: int, topic: str) -> None:
    await asyncio.wait_for(
        pipe.request(producer_id, commands.producer(topic, producer_id, producer_id)),
        _REPLY_TIMEOUT,
    )
    # The CLOSE_PRODUCER's request id must differ from every PRODUCER's: bit 40 set.
    close_id = producer_id | 1 << 40
    await asyncio.wait_for(
        pipe.request(close_id, commands.close_producer(producer_id, close_id)), _REPLY_TIMEOUT
    )


def _spread(topics: Sequence[str], ways: int) -> list[list[tuple[int, str]]]:
    """Topics dealt round-robin over ``ways`` connections, each with a unique id."""
    shares: list[list[tuple[int, str]]] = [[] for _ in range(ways)]
    for index, topic in enumerate(topics):
        shares[index % ways].append((index + 1, topic))
    return shares


async def open_idle_topics(
    port: int, topics: Sequence[str], *, connections: int = 4, window: int = 256
) -> None:
    """Load every topic (a producer attached, then closed) and leave it idle."""
    pipes = await _open_pipes(port, connections)
    try:
        await asyncio.gather(
            *(
                _pipelined(pipe, share, window, _attach_and_close)
                for pipe, share in zip(pipes, _spread(topics, connections), strict=True)
            )
        )
    finally:
        await asyncio.gather(*(pipe.close() for pipe in pipes))


class ConsumerPool:
    """One Exclusive consumer per topic over a few connections; counts what arrives."""

    def __init__(self, port: int, topics: Sequence[str], subscription: str) -> None:
        self.port = port
        self.topics = topics
        self.subscription = subscription
        self.received = 0
        self.pipes: list[_Pipe] = []
        self._permits_used: dict[int, int] = {}
        self._arrived = asyncio.Event()

    async def subscribe(self, *, connections: int = 4, window: int = 256) -> None:
        self.pipes = await _open_pipes(self.port, connections, self._on_messages)
        await asyncio.gather(
            *(
                _pipelined(pipe, share, window, self._subscribe_one)
                for pipe, share in zip(self.pipes, _spread(self.topics, connections), strict=True)
            )
        )

    async def _subscribe_one(self, pipe: _Pipe, consumer_id: int, topic: str) -> None:
        request = commands.subscribe(
            topic,
            self.subscription,
            consumer_id,
            consumer_id,
            SubType.Exclusive,
            initial_position=InitialPosition.Earliest,
        )
        await asyncio.wait_for(pipe.request(consumer_id, request), _REPLY_TIMEOUT)
        self._permits_used[consumer_id] = 0
        pipe.write(commands.flow(consumer_id, _PERMITS))

    def _on_messages(self, pipe: _Pipe, frames: list[Frame]) -> None:
        last: dict[int, MessageId] = {}
        for frame in frames:
            message = frame.command.message
            ids = message.message_id
            last[message.consumer_id] = MessageId(ids.ledgerId, ids.entryId)
        replies = []
        for consumer_id, message_id in last.items():
            replies.append(commands.ack(consumer_id, [message_id], ack_type=AckType.Cumulative))
        for frame in frames:
            consumer_id = frame.command.message.consumer_id
            used = self._permits_used[consumer_id] + 1
            if used * 2 >= _PERMITS:
                replies.append(commands.flow(consumer_id, used))
                used = 0
            self._permits_used[consumer_id] = used
        pipe.write(b"".join(replies))
        self.received += len(frames)
        self._arrived.set()

    async def wait_for_total(self, total: int) -> None:
        """Until ``total`` entries arrived over all consumers (bound it with a timeout)."""
        while self.received < total:
            self._arrived.clear()
            await self._arrived.wait()

    async def close(self) -> None:
        await asyncio.gather(*(pipe.close() for pipe in self.pipes))
