"""The raw consumer: SUBSCRIBE + FLOW on one connection, entries counted, batches never split.

Our client hands every message of a batch to the application one by one, which caps a
catch-up read of small batched messages at the client's per-message cost; this reader counts
whole entries (messages from the entry's ``num_messages_in_batch``, bytes from its payload)
so a catch-up read measures the broker's dispatch. Rates count from the first entry received
(a tailing consumer subscribes before anything is published). Permits are returned and the
subscription acknowledged cumulatively every half window. Latency is ``now - publish_time``
(milliseconds: the only clock a stored entry carries).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, cast

from client.perf.options import PerfOptions
from client.perf.report import Recorder
from client.service_url import parse_address
from protocol import commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.enums import AckType
from protocol.framing import Frame, FrameDecoder
from protocol.ids import MessageId
from protocol.metadata import parse_entry_metadata

T = pb.BaseCommand
_CONSUMER_ID = 1
_SUBSCRIBE_REQUEST = 1


class RawConsumerError(Exception):
    """The broker refused the connection or the subscription."""


class _Consumer(asyncio.Protocol):
    def __init__(self, options: PerfOptions, recorder: Recorder, finished: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        self.options = options
        self.recorder = recorder
        self.finished = finished
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.connected: asyncio.Future[None] = loop.create_future()
        self.subscribed: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.unreturned_permits = 0
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.write(commands.connect("magnetar-perf"))

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        last: Frame | None = None
        for frame in self.decoder:
            if frame.type == T.MESSAGE:
                self._on_message(frame)
                last = frame
            else:
                self._on_control(frame)
        if last is not None:
            self._settle(last)

    def _on_message(self, frame: Frame) -> None:
        assert frame.entry is not None
        metadata = parse_entry_metadata(frame.entry)
        recorder = self.recorder
        messages = metadata.num_messages
        if not recorder.entries:  # rates count from the first entry, not from the SUBSCRIBE
            recorder.started = time.perf_counter()
        recorder.entries += 1
        recorder.messages += messages
        recorder.payload_bytes += len(frame.entry) - metadata.payload_offset
        recorder.record_latency(max(time.time() - metadata.publish_time / 1000, 0), messages)
        self.unreturned_permits += messages

    def _settle(self, last: Frame) -> None:
        """Return permits and acknowledge (cumulatively) every half window."""
        count = self.options.count
        if count and self.recorder.messages >= count:
            self.finished.set()
        if self.unreturned_permits * 2 >= self.options.window:
            message_id = last.command.message.message_id
            done = MessageId(message_id.ledgerId, message_id.entryId)
            self.write(
                commands.ack(_CONSUMER_ID, [done], ack_type=AckType.Cumulative)
                + commands.flow(_CONSUMER_ID, self.unreturned_permits)
            )
            self.unreturned_permits = 0

    def _on_control(self, frame: Frame) -> None:
        kind = frame.type
        command = frame.command
        if kind == T.CONNECTED:
            self.connected.set_result(None)
        elif kind == T.SUCCESS and not self.subscribed.done():
            self.subscribed.set_result(None)
        elif kind == T.ERROR:
            error = RawConsumerError(f"{command.error.error}: {command.error.message}")
            for future in (self.connected, self.subscribed):
                if not future.done():
                    future.set_exception(error)
                    return
            self.recorder.errors += 1
        elif kind == T.PING:
            self.write(commands.pong())

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.connected, self.subscribed):
            if not future.done():
                future.set_exception(RawConsumerError(f"connection lost: {exc}"))
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.closing:
            self.recorder.errors += 1
        self.finished.set()


async def run_raw_consume(options: PerfOptions, recorder: Recorder) -> dict[str, Any]:
    """Consume ``options.topics[0]`` until ``count`` messages or ``duration`` seconds."""
    address = parse_address(options.url)
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()
    _, consumer = await loop.create_connection(
        lambda: _Consumer(options, recorder, finished), address.host, address.port
    )
    try:
        await asyncio.wait_for(consumer.connected, 30)
        consumer.write(
            commands.subscribe(
                options.topics[0],
                options.subscription,
                _CONSUMER_ID,
                _SUBSCRIBE_REQUEST,
                options.subscription_type,
                initial_position=options.initial_position,
            )
        )
        await asyncio.wait_for(consumer.subscribed, 60)
        cpu = time.process_time()
        consumer.write(commands.flow(_CONSUMER_ID, options.window))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(finished.wait(), options.duration or None)
        recorder.finish()
        cpu = time.process_time() - cpu
    finally:
        consumer.closing = True
        if consumer.transport is not None:
            consumer.transport.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(consumer.lost, 5)
    return {"generator_cpu_us_per_entry": round(cpu / max(recorder.entries, 1) * 1e6, 2)}
