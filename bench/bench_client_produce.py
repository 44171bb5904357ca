"""Produce throughput: our client (``client``) against the official ``pulsar-client``, same broker.

One broker subprocess (default settings: dedup on, fsync before every receipt), then for each
client a producer on a fresh topic sends ``--count`` messages of ``--size`` bytes, pipelined
(``send_async`` with ``block_if_queue_full`` and 1000 pending), unbatched and batched. Reported
per run: messages per second (first send to last receipt) and the client's CPU time per message
(this process's CPU time; the broker runs in another process). Prints one JSON document.

    .venv/bin/python bench/bench_client_produce.py --count 50000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pulsar  # noqa: E402

from client import AsyncClient, Client  # noqa: E402
from tests.helpers import BrokerProcess  # noqa: E402


def measure(run: Callable[[], None], count: int) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"msgs_per_s": round(count / wall), "client_cpu_us_per_msg": round(cpu / count * 1e6, 1)}


def official(url: str, count: int, payload: bytes, batched: bool) -> dict[str, float]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(
        f"bench-{uuid.uuid4().hex}",
        batching_enabled=batched,
        block_if_queue_full=True,
        max_pending_messages=1000,
    )
    done = threading.Event()
    acked = [0]

    def callback(_result: Any, _message_id: Any) -> None:
        acked[0] += 1
        if acked[0] == count:
            done.set()

    def run() -> None:
        for _ in range(count):
            producer.send_async(payload, callback)
        done.wait()

    try:
        return measure(run, count)
    finally:
        client.close()


def ours_blocking(url: str, count: int, payload: bytes, batched: bool) -> dict[str, float]:
    with Client(url) as client:
        producer = client.create_producer(
            f"bench-{uuid.uuid4().hex}",
            batching_enabled=batched,
            block_if_queue_full=True,
            max_pending_messages=1000,
        )
        done = threading.Event()
        acked = [0]

        def callback(_result: Any, _message_id: Any) -> None:
            acked[0] += 1
            if acked[0] == count:
                done.set()

        def run() -> None:
            for _ in range(count):
                producer.send_async(payload, callback)
            done.wait()

        return measure(run, count)


def ours_async(url: str, count: int, payload: bytes, batched: bool) -> dict[str, float]:
    async def main() -> dict[str, float]:
        async with AsyncClient(url) as client:
            producer = await client.create_producer(
                f"bench-{uuid.uuid4().hex}",
                batching_enabled=batched,
                block_if_queue_full=True,
                max_pending_messages=1000,
            )
            wall, cpu = time.perf_counter(), time.process_time()
            futures = [await producer.send_async(payload) for _ in range(count)]
            await asyncio.gather(*futures)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            return {
                "msgs_per_s": round(count / wall),
                "client_cpu_us_per_msg": round(cpu / count * 1e6, 1),
            }

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:  # pragma: no cover
        return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    payload = b"x" * args.size
    results: dict[str, Any] = {"count": args.count, "size": args.size}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            for batched in (False, True):
                mode = "batched" if batched else "unbatched"
                for name, run in (
                    ("official", official),
                    ("ours_blocking_client", ours_blocking),
                    ("ours_async_client", ours_async),
                ):
                    results[f"{mode}/{name}"] = run(broker.url, args.count, payload, batched)
        finally:
            broker.terminate()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
