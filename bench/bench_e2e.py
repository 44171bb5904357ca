"""End-to-end benchmark with the official pulsar-client against a Magnetar subprocess.

The broker is pinned to CPU 0 and this client to CPU 1 (one core each, as performance.md
recommends). Prints one JSON object: produce msgs/s batched and unbatched, consume msgs/s, publish
latency p50/p99 at a fixed rate, and broker CPU microseconds per message for each phase.

    .venv/bin/python bench/bench_e2e.py [--messages 100000] [--size 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pinned_broker import cpu_seconds
from tests.helpers import BrokerProcess


def produce(client: pulsar.Client, topic: str, count: int, payload: bytes, batching: bool) -> float:
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=1,
        max_pending_messages=4000,
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    done = threading.Event()
    remaining = [count]
    lock = threading.Lock()

    def callback(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    started = time.perf_counter()
    for _ in range(count):
        producer.send_async(payload, callback)
    producer.flush()
    done.wait(300)
    elapsed = time.perf_counter() - started
    producer.close()
    return elapsed


def consume(client: pulsar.Client, topic: str, count: int) -> float:
    consumer = client.subscribe(
        topic,
        "bench",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=5000,
    )
    started = time.perf_counter()
    for _ in range(count):
        msg = consumer.receive(30_000)
        consumer.acknowledge(msg)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def latency(client: pulsar.Client, topic: str, rate: int, seconds: float, payload: bytes) -> dict:
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    samples: list[float] = []
    lock = threading.Lock()
    total = int(rate * seconds)
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(total):
        target = start + i * interval
        now = time.perf_counter()
        if target > now:
            time.sleep(target - now)
        sent_at = time.perf_counter()

        def callback(result: pulsar.Result, msg_id: pulsar.MessageId, t0: float = sent_at) -> None:
            with lock:
                samples.append(time.perf_counter() - t0)

        producer.send_async(payload, callback)
    producer.flush()
    producer.close()
    samples.sort()
    return {
        "rate_msgs_s": rate,
        "messages": len(samples),
        "p50_ms": round(samples[len(samples) // 2] * 1000, 3),
        "p99_ms": round(samples[int(len(samples) * 0.99)] * 1000, 3),
        "max_ms": round(samples[-1] * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        os.sched_setaffinity(0, {1})
    payload = os.urandom(args.size)
    results: dict[str, object] = {"messages": args.messages, "payload_bytes": args.size}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(pid, {0})
            client = pulsar.Client(
                broker.url, io_threads=1, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
            )
            for name, batching, count in (
                ("produce_batched", True, args.messages),
                ("produce_unbatched", False, max(1, args.messages // 5)),
            ):
                cpu0 = cpu_seconds(pid)
                elapsed = produce(client, f"bench-{name}", count, payload, batching)
                cpu = cpu_seconds(pid) - cpu0
                results[name] = {
                    "msgs_s": round(count / elapsed),
                    "MB_s": round(count * args.size / elapsed / 1e6, 2),
                    "broker_cpu_us_per_msg": round(cpu / count * 1e6, 2),
                }
            cpu0 = cpu_seconds(pid)
            elapsed = consume(client, "bench-produce_batched", args.messages)
            results["consume_batched"] = {
                "msgs_s": round(args.messages / elapsed),
                "broker_cpu_us_per_msg": round((cpu_seconds(pid) - cpu0) / args.messages * 1e6, 2),
            }
            results["publish_latency"] = latency(client, "bench-latency", args.rate, 5.0, payload)
            client.close()
        finally:
            broker.terminate()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
