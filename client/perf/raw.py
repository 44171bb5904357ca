"""The raw pipelined producer: pre-encoded SEND frames, receipts counted from their bytes.

It speaks the Pulsar protocol directly on one TCP connection (so it works against any
Pulsar-protocol broker that owns the topics: no LOOKUP redirects are followed): CONNECT and
PRODUCER go through the real codec, then SEND frames from ``frames`` are written in blocks, at
most ``window`` entries in flight, and SEND_RECEIPTs are read by
``protocol.receipts.ReceiptReader``. Receipts of one producer arrive in send order (the protocol
guarantees it per connection), so each receipt is matched against the next expected sequence id
and the oldest block in flight: a mismatch is counted, never ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, cast

from client.perf.frames import EncodedRun, EntryShape, SendFrames
from client.perf.options import PerfOptions
from client.perf.report import Recorder
from client.service_url import parse_address
from protocol import commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.framing import Frame
from protocol.receipts import Receipt, ReceiptReader

T = pb.BaseCommand
_DRAIN_TIMEOUT = 30.0
_RATE_TICK = 0.001


class RawProducerError(Exception):
    """The broker refused the connection or a producer, or sent a SEND_ERROR."""


@dataclass
class _Producer:
    producer_id: int
    frames: SendFrames
    entries: int  # to send; 0 = until the deadline
    encoded: EncodedRun | None = None
    sent: int = 0
    expected_sequence_id: int = 0
    # One [sent_at, entries not yet acknowledged] per written block, oldest first.
    blocks: deque[list[float]] = field(default_factory=deque)


class _Connection(asyncio.Protocol):
    def __init__(self, run: RawProducerRun) -> None:
        self.run = run
        self.reader = ReceiptReader()
        self.transport: asyncio.Transport | None = None
        self.requests: dict[int, asyncio.Future[Frame]] = {}
        self.connected: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.writable = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport does not subclass asyncio.Transport, but has its methods.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(commands.connect("magnetar-perf"))

    def data_received(self, data: bytes) -> None:
        receipts, others = self.reader.feed(data)
        for frame in others:
            self._on_frame(frame)
        if receipts:
            self.run.on_receipts(receipts)

    def _on_frame(self, frame: Frame) -> None:
        command = frame.command
        kind = frame.type
        if kind == T.CONNECTED:
            if not self.connected.done():
                self.connected.set_result(frame)
        elif kind == T.PRODUCER_SUCCESS:
            success = command.producer_success
            if success.producer_ready:  # not ready: queued behind an exclusive producer
                self._resolve(success.request_id, frame)
        elif kind == T.ERROR:
            self._fail(command.error.request_id, f"{command.error.error}: {command.error.message}")
        elif kind == T.PING:
            self.write(commands.pong())
        elif kind in (T.SEND_ERROR, T.CLOSE_PRODUCER):
            self.run.on_fatal(f"broker sent {T.Type.Name(kind)}: {command}")  # type: ignore[arg-type]

    def _resolve(self, request_id: int, frame: Frame) -> None:
        future = self.requests.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(frame)

    def _fail(self, request_id: int, message: str) -> None:
        error = RawProducerError(message)
        future = self.requests.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)
        elif not self.connected.done():
            self.connected.set_exception(error)
        else:
            self.run.on_fatal(message)

    def write(self, data: bytes | memoryview) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self.run.pump()

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.connected, *self.requests.values()):
            if not future.done():
                future.set_exception(RawProducerError(f"connection lost: {exc}"))
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.run.closing:
            self.run.on_fatal(f"connection lost: {exc}")


class RawProducerRun:
    """One raw produce run; ``await run.execute()`` returns the extra summary fields."""

    def __init__(self, options: PerfOptions, recorder: Recorder) -> None:
        self.options = options
        self.recorder = recorder
        self.producers: list[_Producer] = []
        self.inflight = 0
        self.sent_entries = 0
        self.deadline = float("inf")
        self.sending = False
        self.closing = False
        self.min_block = 1 if options.rate else max(1, options.window // 8)
        self.started = 0.0
        self.done: asyncio.Future[None] | None = None
        self.connection: _Connection | None = None
        self._round_robin: itertools.cycle[_Producer] | None = None
        self._rate_timer: asyncio.TimerHandle | None = None

    # --- setup ---------------------------------------------------------------------------

    def _plan(self) -> list[tuple[str, int]]:
        """(topic, entries) per producer; a count is rounded up to whole batches."""
        options = self.options
        slots = [topic for topic in options.topics for _ in range(options.producers)]
        if not options.count:
            return [(topic, 0) for topic in slots]
        entries = -(-options.count // options.batch_messages)
        share, extra = divmod(entries, len(slots))
        return [(topic, share + (i < extra)) for i, topic in enumerate(slots)]

    async def _open(self) -> _Connection:
        address = parse_address(self.options.url)
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            lambda: _Connection(self), address.host, address.port
        )
        await asyncio.wait_for(connection.connected, 30)
        return connection

    async def _create_producers(self, connection: _Connection) -> None:
        options = self.options
        prefix = options.producer_name_prefix or f"perf-{uuid.uuid4().hex[:8]}"
        payload = bytes(options.size)
        waits = []
        for producer_id, (topic, entries) in enumerate(self._plan()):
            name = f"{prefix}-{producer_id}"
            shape = EntryShape(producer_id, name, payload, options.batch_messages)
            self.producers.append(_Producer(producer_id, SendFrames(shape), entries))
            future = asyncio.get_running_loop().create_future()
            connection.requests[producer_id] = future
            connection.write(
                commands.producer(
                    topic,
                    producer_id,
                    producer_id,
                    producer_name=name,
                    access_mode=options.access_mode,
                )
            )
            waits.append(future)
        successes = await asyncio.wait_for(asyncio.gather(*waits), 60)
        for producer, success in zip(self.producers, successes, strict=True):
            # A fixed producer name may have published before: continue after its last id,
            # or dedup would drop the whole run.
            last = success.command.producer_success.last_sequence_id
            if last >= producer.frames.next_sequence_id:
                producer.frames.next_sequence_id = last + 1
            producer.expected_sequence_id = producer.frames.next_sequence_id
            if producer.entries:  # counted run: encode everything before the clock starts
                producer.encoded = EncodedRun(producer.frames, producer.entries)

    # --- the run -------------------------------------------------------------------------

    async def execute(self) -> dict[str, Any]:
        connection = self.connection = await self._open()
        stop_timer: asyncio.TimerHandle | None = None
        try:
            await self._create_producers(connection)
            loop = asyncio.get_running_loop()
            self.done = loop.create_future()
            cpu = time.process_time()
            self.recorder.started = self.started = time.perf_counter()
            if self.options.duration:
                self.deadline = self.started + self.options.duration
                # Stops a run whose window is full and whose broker went quiet, too.
                stop_timer = loop.call_later(self.options.duration, self._stop_sending)
            self.sending = True
            self._round_robin = itertools.cycle(self.producers)
            if self.options.rate:
                self._tick()
            else:
                self.pump()
            timeout = None if not self.options.duration else self.options.duration + _DRAIN_TIMEOUT
            await asyncio.wait_for(self.done, timeout)
            self.recorder.finish()
            cpu = time.process_time() - cpu
        finally:
            if self._rate_timer is not None:
                self._rate_timer.cancel()
            if stop_timer is not None:
                stop_timer.cancel()
            self.closing = True
            if connection.transport is not None:
                connection.transport.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(connection.lost, 5)
        entries = max(self.recorder.entries, 1)
        return {
            "generator_cpu_us_per_entry": round(cpu / entries * 1e6, 2),
            "receipts_fast_path": connection.reader.fast,
            "receipts_decoded": connection.reader.decoded,
        }

    def _want(self, producer: _Producer) -> int:
        if producer.entries:
            return producer.entries - producer.sent
        return 1 << 30

    def _allowed(self, now: float) -> int:
        """Entries the rate limit lets out now (the whole window when unlimited)."""
        rate = self.options.rate
        if not rate:
            return self.options.window
        entry_rate = rate / self.options.batch_messages
        return int((now - self.started) * entry_rate) + 1 - self.sent_entries

    def pump(self) -> None:
        """Write blocks while the window, the rate and the socket allow."""
        connection = self.connection
        if not self.sending or connection is None or not connection.writable:
            return
        now = time.perf_counter()
        if now >= self.deadline:
            self._stop_sending()
            return
        window = self.options.window
        batch = self.options.batch_messages
        producers = self.producers
        idle = 0
        while idle < len(producers):
            room = min(window - self.inflight, self._allowed(now))
            if room < self.min_block:
                return
            producer = next(self._round_robin)  # type: ignore[arg-type]
            count = min(room, self._want(producer))
            if count <= 0:
                idle += 1
                continue
            idle = 0
            if producer.encoded is not None:
                data: bytes | memoryview = producer.encoded.block(producer.sent, count)
            else:
                data = producer.frames.take(count)
            producer.blocks.append([now, count])
            producer.sent += count
            self.inflight += count
            self.sent_entries += count
            self.recorder.sent_messages += count * batch
            connection.write(data)
            if not connection.writable:
                return
        self._stop_sending()  # every producer sent its share

    def _stop_sending(self) -> None:
        self.sending = False
        self._check_done()

    def _tick(self) -> None:
        self.pump()
        if self.sending:
            loop = asyncio.get_running_loop()
            self._rate_timer = loop.call_later(_RATE_TICK, self._tick)

    def on_receipts(self, receipts: list[Receipt]) -> None:
        now = time.perf_counter()
        recorder = self.recorder
        producers = self.producers
        batch = self.options.batch_messages
        current: list[float] | None = None
        run = 0
        for receipt in receipts:
            producer = producers[receipt.producer_id]
            if receipt.sequence_id != producer.expected_sequence_id:
                recorder.mismatched_receipts += 1
            producer.expected_sequence_id = receipt.sequence_id + batch
            if receipt.ledger_id == -1:
                recorder.duplicates += 1
            block = producer.blocks[0]
            block[1] -= 1
            if block[1] == 0:
                producer.blocks.popleft()
            if block is not current:
                if current is not None:
                    recorder.record_latency(now - current[0], run * batch)
                current, run = block, 0
            run += 1
        if current is not None:
            recorder.record_latency(now - current[0], run * batch)
        acknowledged = len(receipts)
        self.inflight -= acknowledged
        recorder.entries += acknowledged
        recorder.messages += acknowledged * batch
        recorder.payload_bytes += acknowledged * batch * self.options.size
        if self.sending:
            if not self.options.rate:
                self.pump()
        else:
            self._check_done()

    def _check_done(self) -> None:
        done = self.done
        if not self.sending and self.inflight == 0 and done is not None and not done.done():
            done.set_result(None)

    def on_fatal(self, message: str) -> None:
        self.recorder.errors += 1
        self.sending = False
        if self.done is not None and not self.done.done():
            self.done.set_exception(RawProducerError(message))


async def run_raw_produce(options: PerfOptions, recorder: Recorder) -> dict[str, Any]:
    """Run the raw pipelined producer; returns the summary's raw-mode fields."""
    return await RawProducerRun(options, recorder).execute()
