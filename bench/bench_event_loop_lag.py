"""Event-loop lag while a consumer catches up on cold data and a producer keeps publishing.

The catch-up topic is written straight into a data directory through the storage API (sealed
segments, a dedup cursor at the end so loading replays nothing), then evicted from the page cache
(``posix_fadvise(DONTNEED)``), so the broker starts with nothing in memory: every read of it is a
cold read, and the first read of each sealed segment builds its offset index. The broker runs in
a subprocess (``--serve``, pinned to CPU 0) with a sampler that sleeps 10 ms on its event loop and
records how late it wakes up. The official client (CPU 1) catches up on the topic from the
earliest position while another producer publishes at a fixed rate to a second topic.

Prints one JSON object: loop lag p50/p99/max over the catch-up window (goal: p99 <= 20 ms,
max <= 50 ms), the catch-up rate, and the publish latency of the other producer.

    .venv/bin/python bench/bench_event_loop_lag.py [--gib 0.25] [--entry-kib 8] [--rate 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.config import BrokerConfig, load_config
from broker.publish.dedup_snapshot import DEDUP_CURSOR
from broker.server import Broker
from broker.storage import Ledger
from broker.storage.paths import topic_directory
from broker.topics.topic import ledger_config_from
from protocol import pb
from protocol.enums import InitialPosition
from protocol.metadata import encode_entry
from protocol.topic_name import TopicName

CATCH_UP_TOPIC = "persistent://public/default/cold-catch-up"
PUBLISH_TOPIC = "persistent://public/default/live-publish"
SAMPLE_INTERVAL_S = 0.010


def serve_overrides(data_dir: Path) -> dict[str, str]:
    return {
        "dataDir": str(data_dir),
        "brokerServicePort": "0",
        "webServicePort": "0",
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
    }


# ------------------------------------------------------------------------------ broker side


async def sample_lag(samples: list[tuple[float, float]]) -> None:
    """Sleep 10 ms again and again; record (when, how late in ms) for every wake-up."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(SAMPLE_INTERVAL_S)
        woke = time.monotonic()
        samples.append((woke, max(0.0, (woke - before - SAMPLE_INTERVAL_S) * 1000)))


async def serve(config: BrokerConfig) -> list[tuple[float, float]]:
    """Run a broker with the lag sampler until SIGTERM; return the samples."""
    broker = Broker(config)
    await broker.start()
    samples: list[tuple[float, float]] = []
    sampler = asyncio.create_task(sample_lag(samples))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(f"READY {broker.port} {broker.web_port}", flush=True)
    await stop.wait()
    sampler.cancel()
    await broker.shutdown()
    return samples


def run_server(data_dir: Path, samples_path: Path) -> None:
    import uvloop

    config = load_config(None, serve_overrides(data_dir))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        samples = runner.run(serve(config))
    samples_path.write_text(json.dumps(samples))


# ------------------------------------------------------------------------------ data


def prefill(data_dir: Path, total_bytes: int, entry_bytes: int) -> int:
    """Write ``total_bytes`` of entries to the catch-up topic; return the entry count."""
    config = load_config(None, serve_overrides(data_dir))
    directory = topic_directory(data_dir, TopicName.parse(CATCH_UP_TOPIC))
    ledger = Ledger.open(directory, ledger_config_from(config))
    payload = os.urandom(entry_bytes)
    count = max(1, total_bytes // entry_bytes)
    group = max(1, (4 << 20) // entry_bytes)
    now_ms = int(time.time() * 1000)
    for first in range(0, count, group):
        for sequence_id in range(first, min(count, first + group)):
            metadata = pb.MessageMetadata(
                producer_name="prefill", sequence_id=sequence_id, publish_time=now_ms
            )
            ledger.append(encode_entry(metadata, payload))
        ledger.flush()
    # Loading then replays nothing for dedup: the snapshot cursor sits at the end.
    ledger.open_cursor(DEDUP_CURSOR, InitialPosition.Latest)
    ledger.close()
    evict_from_page_cache(directory)
    return count


def evict_from_page_cache(directory: Path) -> None:
    """Drop the (clean, synced) pages of every file under ``directory`` from the page cache."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# ------------------------------------------------------------------------------ client side


class Publisher(threading.Thread):
    """Publishes ``rate`` messages per second and records each receipt's latency."""

    def __init__(self, client: Any, rate: int) -> None:
        super().__init__(name="publisher", daemon=True)
        self.producer = client.create_producer(
            PUBLISH_TOPIC, producer_name="live", batching_enabled=False, send_timeout_millis=0
        )
        self.rate = rate
        self.latencies_ms: list[float] = []
        self.failures = 0
        self.halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        payload = b"x" * 1024
        interval = 1.0 / self.rate
        start = time.perf_counter()
        sent = 0
        while not self.halt.is_set():
            target = start + sent * interval
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent_at = time.perf_counter()
            self.producer.send_async(payload, self._callback(sent_at))
            sent += 1

    def _callback(self, sent_at: float) -> Any:
        def done(result: Any, _message_id: Any) -> None:
            import pulsar

            with self._lock:
                if result == pulsar.Result.Ok:
                    self.latencies_ms.append((time.perf_counter() - sent_at) * 1000)
                else:
                    self.failures += 1

        return done

    def finish(self) -> None:
        self.halt.set()
        self.join(30)
        self.producer.flush()
        self.producer.close()


def catch_up(client: Any, count: int) -> float:
    """Read every entry of the catch-up topic from the earliest; return the elapsed seconds."""
    import pulsar

    consumer = client.subscribe(
        CATCH_UP_TOPIC,
        "catch-up",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=1000,
    )
    started = time.monotonic()
    for index in range(count):
        message = consumer.receive(60_000)
        if index % 1000 == 999 or index == count - 1:
            consumer.acknowledge_cumulative(message)
    elapsed = time.monotonic() - started
    consumer.close()
    return elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else 0.0


def summary(values: list[float]) -> dict[str, float | int]:
    return {
        "samples": len(values),
        "p50_ms": round(percentile(values, 0.50), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
        "max_ms": round(max(values, default=0.0), 2),
    }


def start_broker(data_dir: Path, samples_path: Path) -> tuple[subprocess.Popen[str], int]:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(data_dir), str(samples_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline().split()
    if not line or line[0] != "READY":
        server.kill()
        raise RuntimeError("broker did not start")
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(server.pid, {0})
    return server, int(line[1])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import pulsar

    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    entry_bytes = args.entry_kib * 1024
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        samples_path = Path(tmp) / "lag.json"
        started = time.monotonic()
        count = prefill(data_dir, int(args.gib * (1 << 30)), entry_bytes)
        prefill_s = time.monotonic() - started
        server, port = start_broker(data_dir, samples_path)
        try:
            client = pulsar.Client(
                f"pulsar://127.0.0.1:{port}",
                operation_timeout_seconds=60,
                logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            )
            publisher = Publisher(client, args.rate)
            publisher.start()
            window_start = time.monotonic()
            elapsed = catch_up(client, count)
            window_end = time.monotonic()
            publisher.finish()
            client.close()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(120)
        samples = json.loads(samples_path.read_text())
    lags = [lag for when, lag in samples if window_start <= when <= window_end]
    return {
        "gib": args.gib,
        "entries": count,
        "entry_bytes": entry_bytes,
        "prefill_s": round(prefill_s, 2),
        "catch_up_s": round(elapsed, 2),
        "catch_up_MB_s": round(count * entry_bytes / elapsed / 1e6, 1),
        "loop_lag": {
            **summary(lags),
            "over_20_ms": sum(1 for lag in lags if lag > 20),
            "over_50_ms": sum(1 for lag in lags if lag > 50),
            "goal": "p99 <= 20 ms, max <= 50 ms",
        },
        "publish": {
            "rate_msgs_s": args.rate,
            "failures": publisher.failures,
            **summary(publisher.latencies_ms),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=0.25, help="size of the cold topic")
    parser.add_argument("--entry-kib", type=int, default=8, help="size of one entry")
    parser.add_argument("--rate", type=int, default=500, help="publish rate of the producer")
    parser.add_argument("--serve", nargs=2, metavar=("DATA_DIR", "SAMPLES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        run_server(Path(args.serve[0]), Path(args.serve[1]))
        return
    print(json.dumps(measure(args), indent=2))


if __name__ == "__main__":
    main()
