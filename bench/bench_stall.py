"""How long one heavy request stalls the broker's event loop, per request shape (issue #24).

Three processes, so that no measurement waits on another's work:

* the broker (``bench/stall_broker.py``: ``magnetar standalone`` of the tree under test, basic
  authentication on, as the CONNECT flood needs), which records its own event loop's gaps (a 2 ms
  sampler on that loop) and every garbage collection's duration;
* the probes (this file with ``--probes``): a health check ``GET /admin/v2/brokers/health`` every
  5 ms, one at a time (its latency), and a probe producer, one 100-byte message every 5 ms on its
  own topic (the gap between consecutive receipts);
* this process: the shape itself, on its own connection, its bytes built before the clock starts.
  Its connections parse only what they need (a MESSAGE's type, not its command).

Shapes: ``large_batch`` (a 4 MiB batch of empty records below the dedup high-water mark),
``zstd_bomb`` (an 851-byte zstd batch declaring 8 MiB of records, with an idempotency key),
``chunk_flood`` (thousands of small chunks in one write), ``schema_flood`` (hundreds of PRODUCERs
with distinct schemas in one write), ``connect_flood`` (31 CONNECTs with wrong basic-auth passwords
in one write), ``producer_flood`` / ``subscribe_flood`` / ``lookup_flood`` (1000 PRODUCERs, 1000
SUBSCRIBEs, 4000 LOOKUPs in one write), ``ack_flood`` / ``redeliver_flood`` (one ACK or
REDELIVER_UNACKNOWLEDGED_MESSAGES naming 100,000 message ids) and ``flow_backlog`` (one FLOW of a
million permits on a subscription 20,000 entries behind). For each, within
the time it was in flight (from its first byte until its answers and 0.3 s more): the broker
loop's longest gap (the goal: under 20 ms; a gap is at most 2 ms more than the longest busy
stretch), the slowest garbage collection, the worst health-check latency (under 100 ms) and
receipt gap, and how long the shape's own answers took. A table on stderr, JSON on stdout.

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
import os
import re
import shutil
import signal
import subprocess
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
from protocol.ids import MessageId
from tests.heavy_sends import chunk, empty_record_batch, zstd_key_bomb

REPO = Path(__file__).resolve().parent.parent
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
    """One connection: frames out, frames in; receipts and replies observed.

    Frames are split by their size prefixes and only the command's type is read from its first
    bytes (a serialized ``BaseCommand`` starts with field 1, ``type``); a command is parsed only
    when it is not a MESSAGE. A consumer dispatched 20,000 messages then costs this process a
    fraction of what decoding each would, CPU the broker shares with it on a 2-core machine."""

    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None
        self.frames: list[tuple[float, int, pb.BaseCommand | None]] = []
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
        buffer = bytearray()
        try:
            while data := await reader.read(1 << 16):
                buffer += data
                consumed = self._take_frames(buffer, time.monotonic())
                del buffer[:consumed]
                self.changed.set()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            self.changed.set()

    def _take_frames(self, buffer: bytearray, now: float) -> int:
        """Record every whole frame in ``buffer``; return how many bytes they took."""
        offset = 0
        while len(buffer) - offset >= 8:
            total = int.from_bytes(buffer[offset : offset + 4], "big")
            if len(buffer) - offset - 4 < total:
                break
            size = int.from_bytes(buffer[offset + 4 : offset + 8], "big")
            raw = bytes(buffer[offset + 8 : offset + 8 + size])
            kind = command_type(raw)
            command = None if kind == T.MESSAGE else pb.BaseCommand.FromString(raw)
            if kind == T.PING:
                self.write(commands.pong())
            elif kind == T.SEND_RECEIPT and self.on_receipt is not None:
                self.on_receipt(now)
            self.frames.append((now, kind, command))
            offset += 4 + total
        return offset

    def count(self, *kinds: int) -> int:
        return sum(1 for _, kind, _ in self.frames if kind in kinds)

    def commands_of(self, *kinds: int) -> list[pb.BaseCommand]:
        return [c for _, kind, c in self.frames if kind in kinds and c is not None]

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


def command_type(raw: bytes) -> int:
    """The ``type`` of a serialized ``BaseCommand``: tag 0x08, then a varint."""
    if not raw or raw[0] != 0x08:
        return pb.BaseCommand.FromString(raw).type
    value, shift = 0, 0
    for byte in raw[1:6]:
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    return value


def connect_frame(auth_data: bytes | None) -> bytes:
    return commands.connect("magnetar-bench-stall", auth_method_name="basic", auth_data=auth_data)


def good_auth() -> bytes:
    return f"{USER}:{PASSWORD}".encode()


async def new_producer(port: int, topic: str, name: str) -> Wire:
    wire = Wire()
    await wire.open(port, good_auth())
    wire.write(commands.producer(topic, 1, 1, producer_name=name))
    if not await wire.wait(lambda: wire.count(T.PRODUCER_SUCCESS) > 0, 30):
        raise RuntimeError(f"no PRODUCER_SUCCESS for {name}: {wire.commands_of(T.ERROR)[-1:]}")
    return wire


def answers(wire: Wire) -> int:
    return wire.count(T.SEND_RECEIPT, T.SEND_ERROR)


# ------------------------------------------------------------------------------ probes


@dataclass
class Probes:
    """The health probe and the probe producer, sampling until stopped. They run in a process
    of their own (``--probes``), so nothing the shapes' clients do delays their timers."""

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


async def run_probes(port: int, http: str) -> dict[str, Any]:
    """The ``--probes`` process: probe until SIGTERM; what was seen."""
    probes = Probes()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, probes.stop.set)
    tasks = [
        asyncio.create_task(probes.run_health(http)),
        asyncio.create_task(probes.run_producer(port)),
    ]
    print("READY", flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"health": probes.health, "receipts": probes.receipts}


@dataclass
class Recorded:
    """What the probe process and the broker process recorded, read once both have exited."""

    health: list[list[float]]
    receipts: list[float]
    gaps: list[list[float]]  # [wake_time, gap, loop CPU]: the broker loop's gaps over 4 ms
    collections: list[list[float]]  # [end_time, generation, CPU time of the collecting thread]

    def worst(self, start: float, end: float) -> dict[str, Any]:
        health = [done - sent for sent, done in self.health if done >= start and sent <= end]
        times = [t for t in self.receipts if start <= t <= end] + [end]
        before = [t for t in self.receipts if t < start]
        if before:
            times.insert(0, max(before[-1], start))
        receipt_gaps = [b - a for a, b in itertools.pairwise(times)]
        # A gap ending inside the window overlaps it; one ending after it may too, by its length.
        gaps = [(gap, cpu) for woke, gap, cpu in self.gaps if start < woke and woke - gap < end]
        collections = [c for c in self.collections if start <= c[0] <= end]
        slowest = max(collections, key=lambda c: c[2], default=None)
        return {
            "broker_loop_gap_ms": ms(max((g for g, _ in gaps), default=KEPT_GAPS_OVER_S)),
            "broker_loop_cpu_ms": ms(max((c for _, c in gaps), default=KEPT_GAPS_OVER_S)),
            "worst_health_ms": ms(max(health, default=float("nan"))),
            "worst_receipt_gap_ms": ms(max(receipt_gaps, default=float("nan"))),
            "health_checks": len(health),
            "worst_gc_cpu_ms": 0.0 if slowest is None else ms(slowest[2]),
            "worst_gc": "none" if slowest is None else f"gen{int(slowest[1])} {ms(slowest[2])} ms",
            "full_collections": sum(1 for c in collections if c[1] == 2),
        }


KEPT_GAPS_OVER_S = 0.004  # bench/stall_broker.py keeps only gaps over this: "< 4 ms" otherwise


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


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
        raise RuntimeError(f"no SUBSCRIBE SUCCESS on {topic}: {wire.commands_of(T.ERROR)[-1:]}")
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
    last = wire.commands_of(T.SEND_RECEIPT, T.SEND_ERROR)[-1:]
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


@dataclass
class Window:
    shape: str
    start: float
    end: float
    answered_ms: float
    outcome: str


async def fire_shapes(port: int, shapes: list[str], repeat: int) -> list[Window]:
    """Each shape ``repeat`` times, one at a time; the time window each was in flight."""
    windows = []
    await asyncio.sleep(1.0)  # the quiet window: probes only
    windows.append(Window("idle", time.monotonic() - 1.0, time.monotonic(), 0.0, ""))
    for shape in shapes:
        for round_no in range(repeat):
            fire = await BUILDERS[shape](port, round_no)
            await asyncio.sleep(0.2)
            start = time.monotonic()
            what = await fire()
            answered = time.monotonic()
            await asyncio.sleep(SETTLE_S)
            windows.append(Window(shape, start, time.monotonic(), ms(answered - start), what))
    return windows


def summarize(windows: list[Window], recorded: Recorded) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for window in windows:
        run = recorded.worst(window.start, window.end)
        run.update(answered_ms=window.answered_ms, outcome=window.outcome)
        results.setdefault(window.shape, {"runs": []})["runs"].append(run)
    for shape in results.values():
        runs = shape["runs"]
        for key in KEYS:
            shape[key] = max(r[key] for r in runs)
    return results


KEYS = (
    "broker_loop_gap_ms",
    "broker_loop_cpu_ms",
    "worst_gc_cpu_ms",
    "worst_health_ms",
    "worst_receipt_gap_ms",
)


def table(results: dict[str, Any]) -> str:
    lines = [
        "| shape | broker loop: worst gap ms | loop CPU in one gap, worst ms "
        "| slowest gc, CPU ms | worst health check ms | worst receipt gap ms |",
        "|---|---|---|---|---|---|",
    ]
    for shape, result in results.items():
        cells = [str(result[key]) for key in KEYS]
        lines.append(f"| {shape} | {' | '.join(cells)} |")
    return "\n".join(lines)


class StallBroker:
    """``bench/stall_broker.py`` of this tree running ``magnetar standalone`` of ``src``."""

    def __init__(self, src: Path, root: Path, settings: list[str]) -> None:
        self.recorded = root / "broker-recorded.json"
        self.log_path = root / "broker.log"
        args = [sys.executable, str(Path(__file__).with_name("stall_broker.py"))]
        args += [str(self.recorded), "standalone"]
        for setting in [
            f"dataDir={root / 'data'}",
            "brokerServicePort=0",
            "webServicePort=0",
            "bindAddress=127.0.0.1",
            "advertisedAddress=127.0.0.1",
            *settings,
        ]:
            args += ["--set", setting]
        env = dict(os.environ, PYTHONPATH=str(src))
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd=src, env=env
            )
        self.port, self.web_port = self._wait_serving()

    def _wait_serving(self) -> tuple[int, int]:
        pattern = re.compile(rb"serving pulsar://[^:]+:(\d+) and http://[^:]+:(\d+)")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = pattern.search(self.log_path.read_bytes())
            if found:
                return int(found.group(1)), int(found.group(2))
            if self.proc.poll() is not None:
                raise RuntimeError(self.log_path.read_text(errors="replace")[-2000:])
            time.sleep(0.05)
        raise TimeoutError("the broker did not start")

    def stop(self) -> dict[str, Any]:
        """SIGTERM, wait for the drain; what the broker process recorded."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        recorded: dict[str, Any] = json.loads(self.recorded.read_text())
        return recorded


def start_probes(port: int, http: str, out: Path) -> subprocess.Popen[str]:
    args = [sys.executable, __file__, "--probes", f"{port},{http},{out}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "READY":
        raise RuntimeError("the probe process did not start")
    return proc


def run_bench(src: Path, shapes: list[str], repeat: int, keep_log: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-stall-") as tmp:
        root = Path(tmp)
        htpasswd = root / "htpasswd"
        # Cost 10 (~60-90 ms a check here): the refused CONNECTs of the flood pay it each.
        htpasswd.write_text(f"{USER}:{bcrypt.using(rounds=10, ident='2y').hash(PASSWORD)}\n")
        auth = ["authenticationEnabled=true", "authenticationProviders=basic"]
        broker = StallBroker(src, root, [*auth, f"basicAuthConf={htpasswd}"])
        probes: subprocess.Popen[str] | None = None
        try:
            probes = start_probes(broker.port, f"http://127.0.0.1:{broker.web_port}", root / "p")
            time.sleep(1.0)  # warm: the probe topic loaded, connections made
            windows = asyncio.run(fire_shapes(broker.port, shapes, repeat))
        finally:
            if probes is not None:
                probes.send_signal(signal.SIGTERM)
                probes.wait(60)
            in_broker = broker.stop()
            if keep_log is not None:
                shutil.copyfile(broker.log_path, keep_log)
        seen = json.loads((root / "p").read_text())
        recorded = Recorded(seen["health"], seen["receipts"], in_broker["gaps"], in_broker["gc"])
        return summarize(windows, recorded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--broker-src", type=Path, default=REPO, help="tree whose broker to run")
    parser.add_argument(
        "--gc-thresholds",
        default=None,
        help="GEN0,GEN1,GEN2: the broker's gc policy with these thresholds (broker/gc_policy.py)",
    )
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the broker's log here")
    parser.add_argument(
        "--debug-loop",
        type=float,
        default=None,
        help="SECONDS: run the broker on asyncio's debug loop, which logs each callback over "
        "SECONDS by name (see --keep-log); slower, to find a stall, not to measure it",
    )
    parser.add_argument("--probes", default=None, help=argparse.SUPPRESS)  # the probe process
    args = parser.parse_args()
    if args.probes is not None:
        port, http, out = args.probes.split(",")
        Path(out).write_text(json.dumps(asyncio.run(run_probes(int(port), http))))
        return
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = set(shapes) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shapes {sorted(unknown)}; known: {', '.join(SHAPES)}")
    src = args.broker_src.resolve()
    # Read by bench/stall_broker.py in the broker process.
    if args.gc_thresholds:
        os.environ["STALL_GC_THRESHOLDS"] = args.gc_thresholds
    if args.debug_loop is not None:
        os.environ["STALL_DEBUG_LOOP"] = str(args.debug_loop)
    results = run_bench(src, shapes, args.repeat, args.keep_log)
    print(table(results), file=sys.stderr)
    results["broker_src"] = str(src)
    results["gc_thresholds"] = args.gc_thresholds or "the tree's own"
    results["goal"] = "broker loop gap < 20 ms per request, worst health check < 100 ms"
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
