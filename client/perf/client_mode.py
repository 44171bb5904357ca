"""produce / consume / end-to-end through our own client (``client.AsyncClient``).

What users of the client will see: every message goes through ``send_async`` (batching as the
options say) and ``receive``. Producers stamp ``time.time_ns()`` into the first 8 bytes of each
payload (when it has 8 bytes), so a consumer measures end-to-end latency to the microsecond;
other payloads fall back to the broker-visible publish time (milliseconds).
"""

from __future__ import annotations

import asyncio
import functools
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from client.client import AsyncClient
from client.errors import Timeout
from client.message import Message
from client.perf.options import PerfOptions
from client.perf.report import Recorder

_STAMP = struct.Struct(">Q")
_RECEIVE_POLL_MS = 200
_MAX_PLAUSIBLE_NS = 3600 * 10**9
#: Seconds an end-to-end run waits for the consumer once the producers are done.
E2E_DRAIN = 30.0


def _payload_factory(size: int) -> Callable[[], bytes]:
    padding = bytes(max(size - _STAMP.size, 0))
    fixed = bytes(size)
    if size < _STAMP.size:
        return lambda: fixed
    pack = _STAMP.pack
    return lambda: pack(time.time_ns()) + padding


async def _produce_one(
    client: AsyncClient,
    topic: str,
    name: str,
    options: PerfOptions,
    recorder: Recorder,
    share: int,
    rate: float,
    deadline: float,
) -> None:
    producer = await client.create_producer(
        topic,
        producer_name=name,
        max_pending_messages=options.window,
        block_if_queue_full=True,
        batching_enabled=options.batching,
        batching_max_messages=options.batch_messages,
        batching_max_allowed_size_in_bytes=max(
            128 * 1024, options.batch_messages * (options.size + 16)
        ),
        batching_max_publish_delay_ms=options.batch_delay_ms,
        access_mode=options.access_mode,
    )
    payload = _payload_factory(options.size)
    size = options.size
    unbatched = not options.batching
    perf_counter = time.perf_counter

    def on_done(future: asyncio.Future[Any], sent_at: float) -> None:
        if future.cancelled() or future.exception() is not None:
            recorder.errors += 1
            return
        recorder.record_latency(perf_counter() - sent_at)
        recorder.messages += 1
        recorder.payload_bytes += size
        if unbatched:
            recorder.entries += 1

    started = perf_counter()
    sent = 0
    last: asyncio.Future[Any] | None = None
    while (not share or sent < share) and perf_counter() < deadline:
        if rate:
            ahead = started + sent / rate - perf_counter()
            if ahead > 0.001:
                await asyncio.sleep(ahead)
        sent_at = perf_counter()
        last = await producer.send_async(payload())
        last.add_done_callback(functools.partial(on_done, sent_at=sent_at))
        sent += 1
        recorder.sent_messages += 1
    await producer.flush()
    if last is not None:
        await asyncio.wait([last])
    await producer.close()


async def run_client_produce(options: PerfOptions, recorder: Recorder) -> dict[str, Any]:
    """Produce with ``client.AsyncClient``: one producer task per (topic, producer slot)."""
    slots = [topic for topic in options.topics for _ in range(options.producers)]
    shares = [0] * len(slots)
    if options.count:
        share, extra = divmod(options.count, len(slots))
        shares = [share + (i < extra) for i in range(len(slots))]
    prefix = options.producer_name_prefix or f"perf-{uuid.uuid4().hex[:8]}"
    rate = options.rate / len(slots)
    async with AsyncClient(options.url) as client:
        cpu = time.process_time()
        recorder.started = time.perf_counter()
        deadline = recorder.started + options.duration if options.duration else float("inf")
        await asyncio.gather(
            *(
                _produce_one(
                    client, topic, f"{prefix}-{i}", options, recorder, shares[i], rate, deadline
                )
                for i, topic in enumerate(slots)
            )
        )
        recorder.finish()
        cpu = time.process_time() - cpu
    return {"generator_cpu_us_per_msg": round(cpu / max(recorder.messages, 1) * 1e6, 2)}


def _latency_ns(message: Message, payload: bytes, now_ns: int) -> int:
    if len(payload) >= _STAMP.size:
        stamp: int = _STAMP.unpack_from(payload)[0]
        if 0 <= now_ns - stamp < _MAX_PLAUSIBLE_NS:
            return now_ns - stamp
    return max(now_ns - message.publish_timestamp() * 1_000_000, 0)


async def consume(
    client: AsyncClient,
    options: PerfOptions,
    recorder: Recorder,
    finished: Callable[[], bool],
    ready: asyncio.Event | None = None,
) -> None:
    """Receive (acknowledging each message) until ``finished()``."""
    topics = list(options.topics)
    consumer = await client.subscribe(
        topics if len(topics) > 1 else topics[0],
        options.subscription,
        consumer_type=options.subscription_type,
        initial_position=options.initial_position,
        receiver_queue_size=max(options.window, 1000),
    )
    if ready is not None:
        ready.set()
    recorder.started = time.perf_counter()
    while not finished():
        try:
            message = await consumer.receive(_RECEIVE_POLL_MS)
        except Timeout:
            continue
        payload = message.data()
        recorder.record_latency(_latency_ns(message, payload, time.time_ns()) / 1e9)
        recorder.messages += 1
        recorder.payload_bytes += len(payload)
        consumer.acknowledge(message)
    recorder.finish()
    await consumer.close()


async def run_client_consume(options: PerfOptions, recorder: Recorder) -> dict[str, Any]:
    """Consume ``count`` messages or for ``duration`` seconds (from the subscription's start)."""
    deadline = [float("inf")]

    def finished() -> bool:
        if options.count and recorder.messages >= options.count:
            return True
        return time.perf_counter() >= deadline[0]

    async with AsyncClient(options.url) as client:
        cpu = time.process_time()
        ready = asyncio.Event()
        task = asyncio.create_task(consume(client, options, recorder, finished, ready))
        await ready.wait()
        if options.duration:
            deadline[0] = time.perf_counter() + options.duration
        await task
        cpu = time.process_time() - cpu
    return {"generator_cpu_us_per_msg": round(cpu / max(recorder.messages, 1) * 1e6, 2)}


Producer = Callable[[PerfOptions, Recorder], Awaitable[dict[str, Any]]]


async def run_e2e(
    options: PerfOptions, produced: Recorder, received: Recorder, produce: Producer
) -> dict[str, Any]:
    """Subscribe first, then produce (``produce``: raw or client mode) and receive together.

    Ends once every acknowledged message was received, or ``E2E_DRAIN`` seconds after the
    producers finished.
    """
    producing = [True]
    drain_deadline = [float("inf")]

    def finished() -> bool:
        if producing[0]:
            return False
        return received.messages >= produced.messages or time.perf_counter() > drain_deadline[0]

    async with AsyncClient(options.url) as client:
        ready = asyncio.Event()
        task = asyncio.create_task(consume(client, options, received, finished, ready))
        await ready.wait()
        try:
            extra = await produce(options, produced)
        finally:
            producing[0] = False
            drain_deadline[0] = time.perf_counter() + E2E_DRAIN
        await task
    return {"produce": extra}
