"""Issue #26's side-by-side and scale figures: pulsar-lite (``peer``), 10,000 active topics
(``topics``) and 100,000 idle ones (``idle``). Wired into ``run_all.py`` like P1-P8.

* ``peer``: the official ``pulsar-client`` (3.13), unbatched 100 B messages with 1000 pending
  (P2's and P8's shape), against Magnetar and pulsar-lite in turn, run by run, each broker
  pinned to CPU 0 and the client to CPU 1; broker CPU per message from /proc. pulsar-lite does
  not fsync before acknowledging (``pulsar_lite_peer``), so Magnetar runs twice: its default
  (``journalSyncData=true``) and ``journalSyncData=false``, the same durability as the peer.
* ``topics``: 10,000 topics, one raw producer and one raw consumer each, all over a few
  connections (``many_topics``; the raw generator's producers share one connection), durable
  unbatched 100 B entries; aggregate entries/s and p99 publish latency against the same run on
  one topic (fresh broker), broker RSS after.
* ``idle``: 100,000 topics loaded by a producer that attaches and closes; the time to load them
  all, broker RSS before and after (the difference per topic), descriptors, idle CPU.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from bench.bench_client_produce import official
from bench.many_topics import ConsumerPool, open_idle_topics
from bench.pinned_broker import cpu_seconds, pid_of, rss_bytes, start_pinned
from bench.pulsar_lite_peer import PulsarLite
from bench.scenarios import MIB, broker_on, spread
from client.perf.options import PerfOptions
from client.perf.raw import run_raw_produce
from client.perf.report import Recorder

KIB = 1024
_IDLE_TOPIC_GOAL_KIB = 10
_DELIVERY_TIMEOUT_S = 300.0
_SHUTDOWN_TIMEOUT_S = 1800.0  # a broker unloads 100,000 topics before it exits


@dataclass(frozen=True)
class ScaleSizes:
    runs: int = 3
    peer_messages: int = 100_000  # per run and broker: P8's unbatched count
    topics: int = 10_000
    topic_entries: int = 200_000  # per run, over all the topics (20 each)
    idle_topics: int = 100_000
    idle_seconds: float = 10.0  # idle CPU is measured over this long
    keys: int = 200_000  # idempotency keys in the window (bench_idempotency.py)
    key_messages: int = 20_000  # per throughput round
    cluster_messages: int = 16_000_000  # per ingest run (bench_cluster.py)


FULL_SIZES = ScaleSizes()
QUICK_SIZES = ScaleSizes(
    peer_messages=5_000,
    topics=200,
    topic_entries=10_000,
    idle_topics=2_000,
    idle_seconds=2.0,
    keys=2_000,
    key_messages=2_000,
    cluster_messages=200_000,
)


# --- peer: pulsar-lite side by side --------------------------------------------------------


def _official_unbatched(pid: int, url: str, count: int) -> tuple[float, float]:
    """Broker CPU microseconds per message and messages per second of one run."""
    cpu = cpu_seconds(pid)
    result = official(url, count, bytes(100), False)
    return (cpu_seconds(pid) - cpu) / count * 1e6, result["msgs_per_s"]


def peer_comparison(root: Path, sizes: ScaleSizes) -> dict[str, Any]:
    try:
        peer = PulsarLite(Path(tempfile.mkdtemp(prefix="pulsar-lite-", dir=root))).start()
    except (ImportError, OSError, RuntimeError, TimeoutError) as exc:
        return {"error": f"pulsar-lite could not run here: {exc!r}"}
    cpu: dict[str, list[float]] = {"magnetar": [], "magnetar_nosync": [], "pulsar_lite": []}
    rate: dict[str, list[float]] = {name: [] for name in cpu}
    count = sizes.peer_messages
    try:
        with broker_on(root) as synced, broker_on(root, "journalSyncData=false") as unsynced:
            targets = {
                "magnetar": (pid_of(synced), synced.url),
                "magnetar_nosync": (pid_of(unsynced), unsynced.url),
                "pulsar_lite": (peer.pid, peer.url),
            }
            for _ in range(sizes.runs):  # interleaved: disk and neighbours drift for all three
                for name, (pid, url) in targets.items():
                    micros, per_second = _official_unbatched(pid, url, count)
                    cpu[name].append(micros)
                    rate[name].append(per_second)
    finally:
        peer.stop()
    ratio = statistics.median(cpu["magnetar"]) / statistics.median(cpu["pulsar_lite"])
    nosync = statistics.median(cpu["magnetar_nosync"]) / statistics.median(cpu["pulsar_lite"])
    return {
        "what": "official pulsar-client 3.13 on CPU 1, unbatched 100 B, 1000 pending, against "
        "Magnetar (fsync before each receipt, the default), Magnetar with "
        "journalSyncData=false, and pulsar-lite 0.2.0 (acknowledges without fsync), each "
        "pinned to CPU 0, run by run; broker CPU from /proc/<pid>/stat",
        "messages_per_run": count,
        **{f"{name}_broker_cpu_us_per_msg": spread(values, 2) for name, values in cpu.items()},
        **{f"{name}_msgs_per_s": spread(values, 0) for name, values in rate.items()},
        "cpu_ratio_magnetar_to_pulsar_lite": round(ratio, 2),
        "cpu_ratio_magnetar_nosync_to_pulsar_lite": round(nosync, 2),
        "goal": "broker CPU per message, Magnetar / pulsar-lite <= 1.0",
        "goal_met": ratio <= 1.0,
    }


# --- topics: 10,000 active topics ------------------------------------------------------------


def _topic_names(prefix: str, count: int) -> list[str]:
    return [f"persistent://public/default/{prefix}-{i}" for i in range(count)]


async def _produce_and_deliver(
    url: str, pool: ConsumerPool, topics: list[str], entries: int
) -> dict[str, float]:
    """One raw produce run over ``topics``; returns once every consumer got its entries."""
    options = PerfOptions(
        url=url, topics=tuple(topics), raw=True, window=1000, count=entries, size=100
    )
    delivered = pool.received + entries
    recorder = Recorder()
    extra = await run_raw_produce(options, recorder)
    if recorder.errors or recorder.mismatched_receipts or recorder.entries != entries:
        raise RuntimeError(f"raw run failed: {recorder}")
    await asyncio.wait_for(pool.wait_for_total(delivered), _DELIVERY_TIMEOUT_S)
    histogram = recorder.histogram
    return {
        "entries_per_s": recorder.entries / recorder.elapsed,
        "p99_ms": histogram.get_value_at_percentile(99) / 1000,
        "p50_ms": histogram.get_value_at_percentile(50) / 1000,
        "generator_cpu_us_per_entry": extra["generator_cpu_us_per_entry"],
    }


async def _topics_session(
    port: int, url: str, topics: list[str], sizes: ScaleSizes
) -> tuple[float, list[dict[str, float]]]:
    """Subscribe one consumer per topic (this loads them), then ``runs`` produce runs."""
    pool = ConsumerPool(port, topics, "scale")
    started = time.perf_counter()
    await pool.subscribe()
    loaded = time.perf_counter() - started
    try:
        runs = [
            await _produce_and_deliver(url, pool, topics, sizes.topic_entries)
            for _ in range(sizes.runs)
        ]
    finally:
        await pool.close()
    return loaded, runs


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def many_topics(root: Path, sizes: ScaleSizes) -> dict[str, Any]:
    prefix = f"scale-{uuid.uuid4().hex[:6]}"
    with broker_on(root) as broker:
        pid = pid_of(broker)
        idle_rss = rss_bytes(pid)
        topics = _topic_names(prefix, sizes.topics)
        load_s, many = uvloop.run(_topics_session(broker.port, broker.url, topics, sizes))
        rss = rss_bytes(pid)
        descriptors = _descriptors(pid)
    with broker_on(root) as broker:
        _, one = uvloop.run(
            _topics_session(broker.port, broker.url, _topic_names(prefix, 1), sizes)
        )
    aggregate = statistics.median(r["entries_per_s"] for r in many)
    single = statistics.median(r["entries_per_s"] for r in one)
    return {
        "what": f"{sizes.topics} topics, one raw producer and one raw consumer each (producers "
        "on one connection, consumers on four), durable unbatched 100 B entries, dedup on, "
        "1000 in flight; against the same run on one topic (fresh broker)",
        "topics": sizes.topics,
        "entries_per_run": sizes.topic_entries,
        "load_with_consumers_s": round(load_s, 1),
        "aggregate_entries_per_s": spread([r["entries_per_s"] for r in many], 0),
        "one_topic_entries_per_s": spread([r["entries_per_s"] for r in one], 0),
        "aggregate_to_one_topic": round(aggregate / single, 3),
        "p99_ms": spread([r["p99_ms"] for r in many], 2),
        "one_topic_p99_ms": spread([r["p99_ms"] for r in one], 2),
        "generator_cpu_us_per_entry": spread([r["generator_cpu_us_per_entry"] for r in many], 2),
        "broker_rss_mib": round(rss / MIB, 1),
        "broker_rss_delta_mib": round((rss - idle_rss) / MIB, 1),
        "broker_descriptors": descriptors,
    }


# --- idle: 100,000 idle loaded topics --------------------------------------------------------


def idle_topics(root: Path, sizes: ScaleSizes) -> dict[str, Any]:
    """One run (loading 100,000 topics takes minutes): RSS, load time, descriptors, idle CPU."""
    count = sizes.idle_topics
    topics = _topic_names(f"idle-{uuid.uuid4().hex[:6]}", count)
    broker = start_pinned(Path(tempfile.mkdtemp(prefix="data-", dir=root)))
    try:
        pid = pid_of(broker)
        before = rss_bytes(pid)
        started = time.perf_counter()
        uvloop.run(open_idle_topics(broker.port, topics))
        load_s = time.perf_counter() - started
        after = rss_bytes(pid)
        cpu = cpu_seconds(pid)
        time.sleep(sizes.idle_seconds)  # the measured interval itself, not a wait for a state
        idle_cpu = (cpu_seconds(pid) - cpu) / sizes.idle_seconds
        settled = rss_bytes(pid)
        descriptors = _descriptors(pid)
    finally:
        stopping = time.perf_counter()
        broker.terminate(timeout=_SHUTDOWN_TIMEOUT_S)  # closes (unloads) every topic first
        shutdown_s = time.perf_counter() - stopping
    per_topic = (settled - before) / count / KIB
    return {
        "what": f"{count} topics loaded by a raw producer that attaches and closes (4 "
        "connections, 256 requests in flight each), then idle; RSS from /proc VmRSS, the "
        "per-topic figure is the growth over the empty broker divided by the topics",
        "topics": count,
        "runs": 1,
        "load_s": round(load_s, 1),
        "load_ms_per_topic": round(load_s / count * 1000, 3),
        "rss_before_mib": round(before / MIB, 1),
        "rss_after_load_mib": round(after / MIB, 1),
        "rss_idle_mib": round(settled / MIB, 1),
        "kib_per_idle_topic": round(per_topic, 2),
        "broker_descriptors": descriptors,
        "idle_cpu_share": round(idle_cpu, 3),
        "shutdown_s": round(shutdown_s, 1),
        "goal": f"<= {_IDLE_TOPIC_GOAL_KIB} KiB per idle topic",
        "goal_met": per_topic <= _IDLE_TOPIC_GOAL_KIB,
    }
