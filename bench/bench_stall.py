"""How long one heavy request stalls the broker's event loop, per request shape (issue #24).

A broker subprocess (``tests.helpers.BrokerProcess``, basic authentication on, as the CONNECT
flood needs) serves three things at once while each shape is sent:

* a health probe: ``GET /admin/v2/brokers/health`` every 5 ms, one at a time (its latency);
* a probe producer: one 100-byte message every 5 ms on its own topic (the gap between
  consecutive receipts);
* the shape itself, on its own connection, its bytes built before the clock starts.

Shapes: ``large_batch`` (a 4 MiB batch of empty records below the dedup high-water mark),
``zstd_bomb`` (an 851-byte zstd batch declaring 8 MiB of records, with an idempotency key),
``chunk_flood`` (thousands of small chunks in one write), ``schema_flood`` (hundreds of PRODUCERs
with distinct schemas in one write), ``connect_flood`` (31 CONNECTs with wrong basic-auth passwords
in one write), ``producer_flood`` / ``subscribe_flood`` / ``lookup_flood`` (1000 PRODUCERs, 1000
SUBSCRIBEs, 4000 LOOKUPs in one write), ``ack_flood`` / ``redeliver_flood`` (one ACK or
REDELIVER_UNACKNOWLEDGED_MESSAGES naming 100,000 message ids) and ``flow_backlog`` (one FLOW of a
million permits on a subscription 20,000 entries behind). For each: the worst health-check latency
and receipt gap seen while it was in flight (from the shape's first byte until its answers and 0.3
s more), and how long the shape's own answers took. One JSON object on stdout.

The health check stands in for the event loop: it is answered on the loop, so its worst
latency is at least the longest time the loop was busy (plus its ~1-2 ms own cost).

    .venv/bin/python bench/bench_stall.py [--shapes large_batch,zstd_bomb] [--repeat 2]
    # "before": the same bench against another tree's broker
    git -C /work/main archive HEAD | tar -x -C /tmp/stall-before
    .venv/bin/python bench/bench_stall.py --broker-src /tmp/stall-before
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import itertools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from passlib.hash import bcrypt

from protocol import commands, pb
from protocol.framing import FrameDecoder
from protocol.ids import MessageId
from tests import helpers
from tests.heavy_sends import chunk, empty_record_batch, zstd_key_bomb

T = pb.BaseCommand.Type
USER, PASSWORD = "bench", "bench-pw"
PROBE_INTERVAL_S = 0.005
SETTLE_S = 0.3
SHAPES = (
    "large_batch",
    "zstd_bomb",
    "chunk_flood",
    "schema_flood",
    "connect_flood",
    "producer_flood",
    "subscribe_flood",
    "lookup_flood",
    "ack_flood",
    "redeliver_flood",
    "flow_backlog",
)
TOPIC = "persistent://public/default/stall-"


# ------------------------------------------------------------------------------ the wire


class Wire:
    """One connection: frames out, every frame in decoded; receipts and replies observed."""

    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None
        self.frames: list[tuple[float, pb.BaseCommand]] = []
        self.closed = asyncio.Event()
        self.changed = asyncio.Event()
        self.on_receipt: Callable[[float], None] | None = None

    async def open(self, port: int, auth_data: bytes | None, *, handshake: bool = True) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        asyncio.get_running_loop().create_task(self._read(reader))
        if handshake:
            self.write(connect_frame(auth_data))
            await self.wait(lambda: self.count(T.CONNECTED) > 0, 30)

    def write(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder(max_frame_size=64 << 20)
        try:
            while data := await reader.read(1 << 16):
                decoder.feed(data)
                now = time.monotonic()
                for frame in decoder:
                    if frame.type == T.PING:
                        self.write(commands.pong())
                    elif frame.type == T.SEND_RECEIPT and self.on_receipt is not None:
                        self.on_receipt(now)
                    self.frames.append((now, frame.command))
                self.changed.set()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            self.changed.set()

    def count(self, *kinds: int) -> int:
        return sum(1 for _, command in self.frames if command.type in kinds)

    async def wait(self, condition: Callable[[], bool], within: float) -> bool:
        deadline = time.monotonic() + within
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0 or self.closed.is_set():
                return condition()
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        return True

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def connect_frame(auth_data: bytes | None) -> bytes:
    return commands.connect("magnetar-bench-stall", auth_method_name="basic", auth_data=auth_data)


def good_auth() -> bytes:
    return f"{USER}:{PASSWORD}".encode()


async def new_producer(port: int, topic: str, name: str) -> Wire:
    wire = Wire()
    await wire.open(port, good_auth())
    wire.write(commands.producer(topic, 1, 1, producer_name=name))
    if not await wire.wait(lambda: wire.count(T.PRODUCER_SUCCESS) > 0, 30):
        raise RuntimeError(f"no PRODUCER_SUCCESS for {name}: {wire.frames[-1:]}")
    return wire


def answers(wire: Wire) -> int:
    return wire.count(T.SEND_RECEIPT, T.SEND_ERROR)


# ------------------------------------------------------------------------------ probes


@dataclass
class Probes:
    """The health probe and the probe producer, sampling until stopped."""

    health: list[tuple[float, float]] = field(default_factory=list)  # (sent, answered)
    receipts: list[float] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run_health(self, http: str) -> None:
        header = {"Authorization": "Basic " + base64.b64encode(good_auth()).decode()}
        async with aiohttp.ClientSession(headers=header) as session:
            while not self.stop.is_set():
                sent = time.monotonic()
                async with session.get(f"{http}/admin/v2/brokers/health") as reply:
                    await reply.read()
                self.health.append((sent, time.monotonic()))
                await asyncio.sleep(PROBE_INTERVAL_S)

    async def run_producer(self, port: int) -> None:
        wire = await new_producer(port, TOPIC + "probe", "probe")
        wire.on_receipt = self.receipts.append
        sequence_id = 0
        while not self.stop.is_set():
            # At most one message in flight: a gap between receipts is the broker's, not ours.
            wire.write(commands.send(1, sequence_id, probe_entry_named("probe", sequence_id)))
            sequence_id += 1
            await wire.wait(functools.partial(self._received, sequence_id), 30)
            await asyncio.sleep(PROBE_INTERVAL_S)
        wire.close()

    def _received(self, count: int) -> bool:
        return len(self.receipts) >= count

    def worst(self, start: float, end: float) -> dict[str, Any]:
        health = [done - sent for sent, done in self.health if done >= start and sent <= end]
        times = [t for t in self.receipts if start <= t] + [end]
        before = [t for t in self.receipts if t < start]
        if before:
            times.insert(0, max(before[-1], start))
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return {
            "worst_health_ms": round(max(health, default=float("nan")) * 1000, 1),
            "health_checks": len(health),
            "worst_receipt_gap_ms": round(max(gaps, default=float("nan")) * 1000, 1),
        }


# ------------------------------------------------------------------------------ the shapes
# Each prepares its connections and bytes, then returns "fire": write, wait for the answers.


Fire = Callable[[], Awaitable[str]]


async def large_batch(port: int, round_no: int) -> Fire:
    name = f"dedup-{round_no}"
    wire = await new_producer(port, TOPIC + "large-batch", name)
    for seq in range(10):  # the high-water mark: 9
        wire.write(commands.send(1, seq, probe_entry_named(name, seq)))
    await wire.wait(lambda: answers(wire) >= 10, 30)
    entry, count = empty_record_batch(name, 5)
    frame = commands.send(1, 5, entry, num_messages=count)

    async def fire() -> str:
        wire.write(frame)
        await wire.wait(lambda: answers(wire) >= 11, 120)
        wire.close()
        return outcome(wire)

    return fire


async def zstd_bomb(port: int, round_no: int) -> Fire:
    name = f"keys-{round_no}"
    wire = await new_producer(port, TOPIC + "zstd-bomb", name)
    entry, count = zstd_key_bomb(name, 0, f"bomb-{round_no}-{uuid.uuid4()}")
    frame = commands.send(1, 0, entry, num_messages=count)

    async def fire() -> str:
        wire.write(frame)
        await wire.wait(lambda: answers(wire) >= 1 or wire.closed.is_set(), 120)
        wire.close()
        return outcome(wire) + f" ({len(entry)} bytes on the wire)"

    return fire


async def chunk_flood(port: int, round_no: int, chunks: int = 4000) -> Fire:
    name = f"chunks-{round_no}"
    wire = await new_producer(port, TOPIC + "chunk-flood", name)
    message = str(uuid.uuid4())
    data = b"c" * 64
    frames = b"".join(
        commands.send(1, 0, chunk(name, 0, message, i, chunks, data), is_chunk=True)
        for i in range(chunks)
    )

    async def fire() -> str:
        wire.write(frames)
        await wire.wait(lambda: answers(wire) >= chunks, 120)
        wire.close()
        return outcome(wire) + f" ({chunks} chunks, {len(frames)} bytes in one write)"

    return fire


async def schema_flood(port: int, round_no: int, producers: int = 300) -> Fire:
    wire = Wire()
    await wire.open(port, good_auth())
    topic = TOPIC + "schema-flood"
    frames = []
    for i in range(producers):
        definition = json.dumps(
            {"type": "record", "name": f"R{round_no}x{i}", "fields": [], "doc": "d" * 2000}
        ).encode()
        schema = pb.Schema(name=f"s{i}", schema_data=definition, type=pb.Schema.Type.Json)
        frames.append(commands.producer(topic, i + 1, i + 1, schema=schema))
    payload = b"".join(frames)

    async def fire() -> str:
        wire.write(payload)
        replies = (T.PRODUCER_SUCCESS, T.ERROR)
        await wire.wait(lambda: wire.count(*replies) >= producers, 120)
        wire.close()
        return f"{wire.count(T.PRODUCER_SUCCESS)} producers with distinct schemas"

    return fire


async def connect_flood(port: int, round_no: int, connects: int = 31) -> Fire:
    wire = Wire()
    await wire.open(port, None, handshake=False)
    payload = b"".join(connect_frame(f"{USER}:guess-{i}".encode()) for i in range(connects))

    async def fire() -> str:
        wire.write(payload)
        await wire.wait(lambda: wire.closed.is_set(), 120)
        wire.close()
        return (
            f"{wire.count(T.CONNECTED)} CONNECTED, {wire.count(T.ERROR)} ERROR "
            f"for {connects} CONNECTs in one write"
        )

    return fire


async def request_flood(
    port: int, frames: list[bytes], replies: tuple[int, ...], what: str
) -> Fire:
    """Many requests in one write, answered each by one of ``replies``."""
    wire = Wire()
    await wire.open(port, good_auth())
    payload = b"".join(frames)

    async def fire() -> str:
        wire.write(payload)
        await wire.wait(lambda: wire.count(*replies) >= len(frames), 120)
        wire.close()
        return f"{wire.count(*replies)} answers to {len(frames)} {what} in one write"

    return fire


async def producer_flood(port: int, round_no: int, producers: int = 1000) -> Fire:
    topic = f"{TOPIC}producer-flood-{round_no}-"
    frames = [commands.producer(f"{topic}{i % 8}", i + 1, i + 1) for i in range(producers)]
    return await request_flood(port, frames, (T.PRODUCER_SUCCESS, T.ERROR), "PRODUCERs")


async def subscribe_flood(port: int, round_no: int, consumers: int = 1000) -> Fire:
    topic = f"{TOPIC}subscribe-flood-{round_no}-"
    frames = [
        commands.subscribe(f"{topic}{i % 8}", f"s{i}", i + 1, i + 1, pb.CommandSubscribe.Shared)
        for i in range(consumers)
    ]
    return await request_flood(port, frames, (T.SUCCESS, T.ERROR), "SUBSCRIBEs")


async def lookup_flood(port: int, round_no: int, lookups: int = 4000) -> Fire:
    topic = f"{TOPIC}lookup-flood-{round_no}-"
    frames = [commands.lookup(f"{topic}{i}", i + 1) for i in range(lookups)]
    return await request_flood(port, frames, (T.LOOKUP_RESPONSE,), "LOOKUPs")


async def subscribed(port: int, topic: str) -> Wire:
    wire = Wire()
    await wire.open(port, good_auth())
    wire.write(commands.subscribe(topic, "sub", 1, 1, pb.CommandSubscribe.Shared))
    if not await wire.wait(lambda: wire.count(T.SUCCESS) > 0, 30):
        raise RuntimeError(f"no SUBSCRIBE SUCCESS on {topic}: {wire.frames[-1:]}")
    return wire


async def ack_flood(port: int, round_no: int, ids: int = 100_000) -> Fire:
    wire = await subscribed(port, f"{TOPIC}ack-flood")
    frame = commands.ack(1, [MessageId(0, i) for i in range(ids)], request_id=2)

    async def fire() -> str:
        wire.write(frame)
        await wire.wait(lambda: wire.count(T.ACK_RESPONSE) > 0, 120)
        wire.close()
        return f"{wire.count(T.ACK_RESPONSE)} ACK_RESPONSE to {ids} ids ({len(frame)} bytes)"

    return fire


async def redeliver_flood(port: int, round_no: int, ids: int = 100_000) -> Fire:
    wire = await subscribed(port, f"{TOPIC}redeliver-flood")
    frame = commands.redeliver_unacknowledged_messages(1, [MessageId(0, i) for i in range(ids)])

    async def fire() -> str:
        wire.write(frame + commands.ping())  # the PONG comes after the whole REDELIVER
        await wire.wait(lambda: wire.count(T.PONG) > 0, 120)
        wire.close()
        return f"PONG after {ids} ids ({len(frame)} bytes)"

    return fire


async def flow_backlog(port: int, round_no: int, entries: int = 20_000) -> Fire:
    topic = f"{TOPIC}backlog-{round_no}"
    consumer = await subscribed(port, topic)  # the subscription exists before the backlog
    producer = await new_producer(port, topic, f"backlog-{round_no}")
    producer.write(
        b"".join(
            commands.send(1, i, probe_entry_named(f"backlog-{round_no}", i)) for i in range(entries)
        )
    )
    await producer.wait(lambda: answers(producer) >= entries, 120)
    producer.close()

    async def fire() -> str:
        consumer.write(commands.flow(1, 1 << 20))
        await consumer.wait(lambda: consumer.count(T.MESSAGE) >= entries, 120)
        consumer.close()
        return f"{consumer.count(T.MESSAGE)} of {entries} messages dispatched"

    return fire


def probe_entry_named(name: str, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)
    header = metadata.SerializeToString()
    return len(header).to_bytes(4, "big") + header + b"m"


def outcome(wire: Wire) -> str:
    last = [c for _, c in wire.frames if c.type in (T.SEND_RECEIPT, T.SEND_ERROR)][-1:]
    if not last:
        return "closed" if wire.closed.is_set() else "no answer"
    if last[0].type == T.SEND_ERROR:
        return (
            f"SEND_ERROR {pb.ServerError.Name(last[0].send_error.error)}: "
            + (last[0].send_error.message[:120])
        )
    receipt = last[0].send_receipt
    return f"receipt {receipt.message_id.ledgerId}:{receipt.message_id.entryId}"


BUILDERS: dict[str, Callable[[int, int], Awaitable[Fire]]] = {
    "large_batch": large_batch,
    "zstd_bomb": zstd_bomb,
    "chunk_flood": chunk_flood,
    "schema_flood": schema_flood,
    "connect_flood": connect_flood,
    "producer_flood": producer_flood,
    "subscribe_flood": subscribe_flood,
    "lookup_flood": lookup_flood,
    "ack_flood": ack_flood,
    "redeliver_flood": redeliver_flood,
    "flow_backlog": flow_backlog,
}


# ------------------------------------------------------------------------------ the run


async def measure(port: int, http: str, shapes: list[str], repeat: int) -> dict[str, Any]:
    probes = Probes()
    tasks = [
        asyncio.create_task(probes.run_health(http)),
        asyncio.create_task(probes.run_producer(port)),
    ]
    await asyncio.sleep(1.0)  # warm: topic loaded, connections made
    quiet_start = time.monotonic()
    await asyncio.sleep(1.0)
    results: dict[str, Any] = {"idle": probes.worst(quiet_start, time.monotonic())}
    for shape in shapes:
        runs = []
        for round_no in range(repeat):
            fire = await BUILDERS[shape](port, round_no)
            await asyncio.sleep(0.2)
            start = time.monotonic()
            what = await fire()
            answered = time.monotonic()
            await asyncio.sleep(SETTLE_S)
            run = probes.worst(start, time.monotonic())
            run["answered_ms"] = round((answered - start) * 1000, 1)
            run["outcome"] = what
            runs.append(run)
        results[shape] = {
            "worst_health_ms": max(r["worst_health_ms"] for r in runs),
            "worst_receipt_gap_ms": max(r["worst_receipt_gap_ms"] for r in runs),
            "runs": runs,
        }
    probes.stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--broker-src", type=Path, default=None, help="tree whose broker to run")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = set(shapes) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shapes {sorted(unknown)}; known: {', '.join(SHAPES)}")
    if args.broker_src is not None:
        # BrokerProcess runs ``python -m broker`` in REPO: point it at the other tree.
        helpers.REPO = args.broker_src.resolve()
    with tempfile.TemporaryDirectory(prefix="bench-stall-") as tmp:
        root = Path(tmp)
        htpasswd = root / "htpasswd"
        # Cost 10 (~60-90 ms a check here): the refused CONNECTs of the flood pay it each.
        htpasswd.write_text(f"{USER}:{bcrypt.using(rounds=10, ident='2y').hash(PASSWORD)}\n")
        broker = helpers.BrokerProcess(
            root / "data",
            "authenticationEnabled=true",
            "authenticationProviders=basic",
            f"basicAuthConf={htpasswd}",
            log_path=root / "broker.log",
        ).start()
        try:
            results = asyncio.run(measure(broker.port, broker.http, shapes, args.repeat))
        finally:
            broker.terminate()
        results["broker_src"] = str(helpers.REPO)
        results["goal"] = "worst health check < 100 ms, loop busy < 20 ms per request"
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
