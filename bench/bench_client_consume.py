"""Consume throughput: our client (``client``) against the official ``pulsar-client``, same broker.

One broker subprocess (default settings). For each mode (unbatched, batched) and each client,
the official producer first fills a fresh topic with ``--count`` messages of ``--size`` bytes
(not measured); then the client subscribes from the earliest message (receiver queue 1000) and
receives and acknowledges every message, one ``receive`` and one ``acknowledge`` per message.
Reported per run: messages per second (subscribe to last message), the client's CPU time per
message (this process's CPU time, the official client's C++ threads included) and the broker's
(its process, read from ``/proc``), since a client that makes the broker work harder per message
is slower even when its own CPU is idle. ``--repeat`` rounds run the three clients in turn
(fresh topics each time); each figure is the median round, with the range and the ratio to the
official client round by round. Prints one JSON document.

    .venv/bin/python bench/bench_client_consume.py --count 50000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pulsar  # noqa: E402

from client import AsyncClient, Client, InitialPosition  # noqa: E402
from tests.helpers import BrokerProcess  # noqa: E402

QUEUE = 1000


def quiet_official(url: str) -> pulsar.Client:
    return pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def fill(url: str, count: int, payload: bytes, batched: bool) -> str:
    """A fresh topic holding ``count`` messages from the official producer."""
    topic = f"bench-consume-{uuid.uuid4().hex}"
    client = quiet_official(url)
    try:
        producer = client.create_producer(
            topic, batching_enabled=batched, block_if_queue_full=True, max_pending_messages=1000
        )
        for _ in range(count):
            producer.send_async(payload, None)
        producer.flush()
    finally:
        client.close()
    return topic


def figures(wall: float, cpu: float, count: int) -> dict[str, float]:
    return {"msgs_per_s": round(count / wall), "client_cpu_us_per_msg": round(cpu / count * 1e6, 1)}


def measure(run: Callable[[], None], count: int) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return figures(time.perf_counter() - wall, time.process_time() - cpu, count)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of another process (Linux ``/proc/<pid>/stat``, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def official(url: str, topic: str, count: int, payload: bytes) -> dict[str, float]:
    client = quiet_official(url)

    def run() -> None:
        consumer = client.subscribe(
            topic,
            "bench",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=QUEUE,
        )
        for _ in range(count):
            message = consumer.receive(10_000)
            assert len(message.data()) == len(payload)
            consumer.acknowledge(message)

    try:
        return measure(run, count)
    finally:
        client.close()


def ours_blocking(url: str, topic: str, count: int, payload: bytes) -> dict[str, float]:
    with Client(url) as client:

        def run() -> None:
            consumer = client.subscribe(
                topic, "bench", initial_position=InitialPosition.Earliest, receiver_queue_size=QUEUE
            )
            for _ in range(count):
                message = consumer.receive(10_000)
                assert len(message.data()) == len(payload)
                consumer.acknowledge(message)

        return measure(run, count)


def ours_async(url: str, topic: str, count: int, payload: bytes) -> dict[str, float]:
    async def main() -> dict[str, float]:
        async with AsyncClient(url) as client:
            wall, cpu = time.perf_counter(), time.process_time()
            consumer = await client.subscribe(
                topic, "bench", initial_position=InitialPosition.Earliest, receiver_queue_size=QUEUE
            )
            for _ in range(count):
                message = await consumer.receive(10_000)
                assert len(message.data()) == len(payload)
                consumer.acknowledge(message)
            return figures(time.perf_counter() - wall, time.process_time() - cpu, count)

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:  # pragma: no cover
        return asyncio.run(main())


CLIENTS: tuple[tuple[str, Callable[[str, str, int, bytes], dict[str, float]]], ...] = (
    ("official", official),
    ("ours_blocking_client", ours_blocking),
    ("ours_async_client", ours_async),
)


def one_run(
    broker: BrokerProcess,
    run: Callable[..., dict[str, float]],
    count: int,
    payload: bytes,
    batched: bool,
) -> dict[str, float]:
    """One client on a freshly filled topic, with the broker's CPU time over the run."""
    topic = fill(broker.url, count, payload, batched)
    assert broker.proc is not None
    broker_cpu = process_cpu_seconds(broker.proc.pid)
    result = run(broker.url, topic, count, payload)
    broker_cpu = process_cpu_seconds(broker.proc.pid) - broker_cpu
    result["broker_cpu_us_per_msg"] = round(broker_cpu / count * 1e6, 1)
    return result


def summarize(runs: list[dict[str, float]]) -> dict[str, Any]:
    """The median run's figures (by rate), with the range of rates and every run."""
    ordered = sorted(runs, key=lambda run: run["msgs_per_s"])
    median: dict[str, Any] = dict(ordered[len(ordered) // 2])
    median["msgs_per_s_range"] = [ordered[0]["msgs_per_s"], ordered[-1]["msgs_per_s"]]
    median["runs"] = [run["msgs_per_s"] for run in runs]
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are reported")
    args = parser.parse_args()
    payload = b"x" * args.size
    results: dict[str, Any] = {"count": args.count, "size": args.size, "repeat": args.repeat}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            for batched in (False, True):
                mode = "batched" if batched else "unbatched"
                runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in CLIENTS}
                # Rounds interleave the clients, so a load change on the machine hits all three.
                for _ in range(args.repeat):
                    for name, run in CLIENTS:
                        runs[name].append(one_run(broker, run, args.count, payload, batched))
                for name, _ in CLIENTS:
                    results[f"{mode}/{name}"] = summarize(runs[name])
                official_rate = results[f"{mode}/official"]["msgs_per_s"]
                for name in ("ours_blocking_client", "ours_async_client"):
                    key = f"{mode}/{name}"
                    results[key]["vs_official"] = round(
                        results[key]["msgs_per_s"] / official_rate, 2
                    )
                    # Round by round (same minute of the machine's life): the spread of the ratio.
                    results[key]["vs_official_by_round"] = [
                        round(ours["msgs_per_s"] / theirs["msgs_per_s"], 2)
                        for ours, theirs in zip(runs[name], runs["official"], strict=True)
                    ]
        finally:
            broker.terminate()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
