"""PIP-6 dedup benchmark: its cost on the hot path, topic load time, memory per producer.

Prints one JSON document:

* ``hot_path``: in-process nanoseconds per entry that dedup adds (check + persisted mark).
* ``throughput``: the same workload (official client, fixed producer name, explicit ids) on a
  topic with dedup on and one with dedup off (topic policy), batched and unbatched, alternating
  rounds; medians of msgs/s and broker CPU microseconds per message, and the on/off ratios (goal:
  throughput ratio >= 0.95). Also the rate at which re-sent ids are rejected as duplicates.
  Broker on CPU 0, client on CPU 1.
* ``load``: time to load a topic (``Ledger.open`` + ``recover_dedup``, what the broker does) whose
  ledger holds 1M entries from 10k producers, with a snapshot 999 entries behind the end (the
  worst case with brokerDeduplicationEntriesInterval=1000; goal <= 0.5 s) and with no snapshot at
  all (full replay). The ledger is built directly with ``broker.storage.Ledger`` and
  ``protocol.metadata.encode_entry``. Each load runs in a fresh interpreter (page cache warm).
* ``snapshot``: time to take and persist one snapshot of 10k producers.
* ``memory``: RSS growth per 100k producer names tracked by ``MessageDeduplication`` (both
  maps), measured in a fresh interpreter.

Usage: ``.venv/bin/python bench/bench_dedup.py [--messages 200000] [--entries 1000000]
[--producers 10000] [--rounds 3] [--skip-throughput] [--skip-load]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.config import BrokerConfig
from broker.publish.dedup import MessageDeduplication
from broker.publish.dedup_snapshot import DEDUP_CURSOR, dedup_config_from, recover_dedup
from broker.storage import Ledger, LedgerConfig, Position
from broker.topics.topic import ledger_config_from
from protocol import pb
from protocol.enums import InitialPosition
from protocol.metadata import encode_entry

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAYLOAD = b"x" * 100


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------- throughput


def _produce(client: Any, topic: str, count: int, batching: bool, name: str) -> float:
    """Send ids 1..count (0 is ignored by the Python wrapper); seconds until the last receipt."""
    producer = client.create_producer(
        topic,
        producer_name=name,
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

    def callback(_result: Any, _msg_id: Any) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    started = time.perf_counter()
    for seq in range(1, count + 1):
        producer.send_async(PAYLOAD, callback, sequence_id=seq)
    done.wait(600)
    elapsed = time.perf_counter() - started
    producer.close()
    return elapsed


def _set_topic_dedup(web_port: int, topic: str, enabled: bool) -> None:
    path = "/admin/v2/persistent/public/default/" + topic + "/deduplicationEnabled"
    request = urllib.request.Request(
        f"http://127.0.0.1:{web_port}{path}", data=str(enabled).lower().encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def bench_throughput(messages: int, rounds: int) -> dict[str, Any]:
    import pulsar

    from tests.helpers import BrokerProcess

    results: dict[str, Any] = {"messages_batched": messages, "rounds": rounds}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            if (os.cpu_count() or 1) > 1:
                os.sched_setaffinity(pid, {0})
                os.sched_setaffinity(0, {1})
            client = pulsar.Client(
                broker.url, io_threads=1, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
            )
            for batching, count in ((True, messages), (False, max(1, messages // 5))):
                label = "batched" if batching else "unbatched"
                samples: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
                # On and off alternate within a round, so each ratio compares neighbours in time.
                for index in range(rounds):
                    for dedup in (True, False):
                        topic = f"{label}-{'on' if dedup else 'off'}-{index}"
                        client.create_producer(topic).close()  # load the topic first
                        _set_topic_dedup(broker.web_port, topic, dedup)
                        cpu0 = _cpu_seconds(pid)
                        elapsed = _produce(client, topic, count, batching, "bench")
                        cpu = _cpu_seconds(pid) - cpu0
                        samples[dedup].append((count / elapsed, cpu / count * 1e6))
                on_rate = statistics.median(s[0] for s in samples[True])
                off_rate = statistics.median(s[0] for s in samples[False])
                on_cpu = statistics.median(s[1] for s in samples[True])
                off_cpu = statistics.median(s[1] for s in samples[False])
                ratios = [a[0] / b[0] for a, b in zip(samples[True], samples[False], strict=True)]
                results[label] = {
                    "messages": count,
                    "dedup_on_msgs_s": round(on_rate),
                    "dedup_off_msgs_s": round(off_rate),
                    "throughput_ratio_on_off": round(on_rate / off_rate, 3),
                    "throughput_ratio_per_round_min_max": [
                        round(min(ratios), 3),
                        round(max(ratios), 3),
                    ],
                    "dedup_on_broker_cpu_us_per_msg": round(on_cpu, 2),
                    "dedup_off_broker_cpu_us_per_msg": round(off_cpu, 2),
                    "broker_cpu_ratio_on_off": round(on_cpu / off_cpu, 3),
                }
                # W2-dup: the same producer name re-sends every id of the first dedup-on round.
                cpu0 = _cpu_seconds(pid)
                elapsed = _produce(client, f"{label}-on-0", count, batching, "bench")
                results[label]["duplicate_rejection_msgs_s"] = round(count / elapsed)
                results[label]["duplicate_rejection_broker_cpu_us_per_msg"] = round(
                    (_cpu_seconds(pid) - cpu0) / count * 1e6, 2
                )
            client.close()
        finally:
            broker.terminate()
    return results


def bench_hot_path(entries: int = 1_000_000) -> dict[str, Any]:
    """In-process cost per entry of what dedup adds to publishing and group commit:
    ``may_be_duplicate`` + ``check`` on the publish path, ``on_persisted`` after the fsync."""
    dedup: MessageDeduplication[Position] = MessageDeduplication()
    names = [f"producer-{i}" for i in range(16)]
    position = Position(1, 0)
    started = time.perf_counter()
    for index in range(entries):
        name = names[index & 15]
        seq = index >> 4
        dedup.may_be_duplicate(name, seq)
        dedup.check(name, seq, seq)
        dedup.on_persisted(name, seq, position)
    elapsed = time.perf_counter() - started
    return {"entries": entries, "ns_per_entry": round(elapsed / entries * 1e9)}


# --------------------------------------------------------------------------- load time


def _entry(name: str, seq: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
    return encode_entry(metadata, PAYLOAD)


def build_ledger(directory: Path, entries: int, producers: int) -> dict[str, Any]:
    """``entries`` entries, producer names round robin, each producer's ids 0, 1, 2, ...

    Leaves the dedup cursor with a snapshot 999 entries before the end, as a topic running
    with brokerDeduplicationEntriesInterval=1000 would at worst. Returns what it built.
    """
    config = LedgerConfig(sync_data=False, preallocate_bytes=0)
    ledger = Ledger.open(directory, config)
    cursor = ledger.open_cursor(DEDUP_CURSOR, InitialPosition.Earliest)
    names = [f"producer-{i}" for i in range(producers)]
    started = time.perf_counter()
    marks: dict[str, int] = {}
    snapshot_at = entries - 1000
    snapshot: dict[str, int] = {}
    snapshot_position: Position | None = None
    for index in range(entries):
        name = names[index % producers]
        seq = index // producers
        position = ledger.append(_entry(name, seq))
        marks[name] = seq
        if index == snapshot_at:
            ledger.flush()
            snapshot, snapshot_position = dict(marks), position
        elif index % 10_000 == 9_999:
            ledger.flush()
    ledger.flush()
    assert snapshot_position is not None
    cursor.mark_delete(snapshot_position, properties=snapshot)
    cursor.persist()
    ledger.close()
    return {
        "entries": entries,
        "producers": producers,
        "segments": len(list(directory.glob("*.seg"))),
        "bytes": sum(p.stat().st_size for p in directory.glob("*.seg")),
        "build_seconds": round(time.perf_counter() - started, 1),
    }


def drop_snapshot(directory: Path) -> None:
    """Put the dedup cursor back to "before the first entry" with no properties."""
    config = LedgerConfig(sync_data=False, preallocate_bytes=0)
    ledger = Ledger.open(directory, config)
    ledger.delete_cursor(DEDUP_CURSOR)
    ledger.open_cursor(DEDUP_CURSOR, InitialPosition.Earliest)
    ledger.close()


def load_once(directory: Path) -> dict[str, float | int]:
    """What the broker does on load, timed: open the ledger, recover dedup."""
    broker_config = BrokerConfig()
    started = time.perf_counter()
    ledger = Ledger.open(directory, ledger_config_from(broker_config))
    opened = time.perf_counter()
    dedup = recover_dedup(ledger, dedup_config_from(broker_config))
    finished = time.perf_counter()
    tracked = len(dedup.highest_persisted)
    replayed = dedup.stats()["replayed_entries"]
    assert isinstance(replayed, int)
    ledger.close()
    return {
        "seconds": finished - started,
        "ledger_open_seconds": opened - started,
        "dedup_recovery_seconds": finished - opened,
        "tracked_producers": tracked,
        "replayed_entries": replayed,
    }


def _load_in_child(directory: Path) -> dict[str, float | int]:
    done = subprocess.run(
        [sys.executable, __file__, "--load-once", str(directory)],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded: dict[str, float | int] = json.loads(done.stdout)
    return loaded


def _median_load(directory: Path, repeats: int) -> dict[str, float | int]:
    runs = [_load_in_child(directory) for _ in range(repeats)]
    return {
        key: round(statistics.median(run[key] for run in runs), 3)
        if key.endswith("seconds")
        else runs[0][key]
        for key in runs[0]
    }


def bench_load(entries: int, producers: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        directory = Path(tmp) / "topic"
        built = build_ledger(directory, entries, producers)
        with_snapshot = _median_load(directory, repeats)
        drop_snapshot(directory)
        full_replay = _median_load(directory, repeats)
    return {
        "ledger": built,
        "with_snapshot": with_snapshot,
        "no_snapshot_full_replay": full_replay,
    }


# --------------------------------------------------------------------------- snapshot, memory


def bench_snapshot(producers: int) -> dict[str, Any]:
    """One snapshot of ``producers`` names: build the map, mark-delete, persist (fsync)."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger.open(Path(tmp) / "topic", LedgerConfig(preallocate_bytes=0))
        dedup: MessageDeduplication[Position] = MessageDeduplication()
        position = Position(0, 0)
        for i in range(producers):
            position = ledger.append(_entry(f"producer-{i}", 1000 + i))
            dedup.check(f"producer-{i}", 1000 + i, 1000 + i)
        ledger.flush()
        for i in range(producers):
            dedup.on_persisted(f"producer-{i}", 1000 + i, position)
        cursor = ledger.open_cursor(DEDUP_CURSOR)
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            snapshot = dedup.snapshot()
            cursor.mark_delete(position, properties=snapshot)
            dedup.on_snapshot_taken(position, 0.0)
            taken = time.perf_counter()
            cursor.persist()
            timings.append((taken - started, time.perf_counter() - taken))
        ledger.close()
    return {
        "producers": producers,
        "take_ms": round(statistics.median(t[0] for t in timings) * 1000, 2),
        "persist_ms": round(statistics.median(t[1] for t in timings) * 1000, 2),
    }


def memory_once(producers: int) -> int:
    gc.collect()
    before = _rss_bytes()
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    for i in range(producers):
        name = f"standalone-0-{i}"
        seq = 1_000_000 + i
        dedup.check(name, seq, seq)
        dedup.on_persisted(name, seq, (1, i))
    gc.collect()
    grown = _rss_bytes() - before
    assert len(dedup.highest_persisted) == producers
    return grown


def bench_memory(producers: int = 100_000) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--memory-once", str(producers)],
        capture_output=True,
        text=True,
        check=True,
    )
    grown = int(done.stdout)
    return {
        "producers": producers,
        "rss_bytes_per_100k_producers": round(grown * 100_000 / producers),
        "bytes_per_producer": round(grown / producers, 1),
        "name_style": "standalone-0-<n> (as Java generates)",
    }


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--producers", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--load-repeats", type=int, default=3)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--load-once", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--memory-once", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_once is not None:
        print(json.dumps(load_once(args.load_once)))
        return
    if args.memory_once is not None:
        print(memory_once(args.memory_once))
        return
    results: dict[str, Any] = {"hot_path": bench_hot_path()}
    if not args.skip_throughput:
        results["throughput"] = bench_throughput(args.messages, args.rounds)
    if not args.skip_load:
        results["load"] = bench_load(args.entries, args.producers, args.load_repeats)
    results["snapshot"] = bench_snapshot(args.producers)
    results["memory"] = bench_memory()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
