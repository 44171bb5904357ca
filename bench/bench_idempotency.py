"""Issue #16 figures: memory per key, snapshot and recovery time of a big window, and publish
throughput with keys vs without.

* memory: ``--keys`` keys (``req-<uuid4>``, 40 chars, as an HTTP handler would use) accepted
  and persisted one per entry; tracemalloc (live Python allocations, exact) and RSS growth, in a
  fresh interpreter;
* recovery: a real ledger whose ``magnetar.idempotency`` cursor holds a ``--keys`` snapshot,
  followed by ``--replay`` keyed entries; the time of ``Ledger.open`` + ``recover_window`` (what
  a topic load adds), the snapshot's encode time and cursor file size;
* throughput: ``Topic.publish`` of ``--messages`` single-message entries on a real ledger
  (group commit, no fsync), with a key each vs without; the ratio is the cost of the window
  (``msgs_per_s_no_window``: keyless entries on a topic without a window at all, for reference).

Usage: ``python bench/bench_idempotency.py [--keys N] [--replay N] [--messages N]``; prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from dataclasses import replace
from pathlib import Path

from broker.config import BrokerConfig
from broker.errors import BrokerError
from broker.publish.idempotency_snapshot import encode_snapshot, recover_window, window_config_from
from broker.publish.idempotency_window import (
    IDEMPOTENCY_CURSOR,
    IDEMPOTENCY_KEY_PROPERTY,
    IdempotencyWindow,
    WindowConfig,
    digest_of,
    pack_location,
)
from broker.publish.producers import Producer
from broker.storage import Ledger, LedgerConfig, Position, cursor_file
from broker.topics.topic import Topic
from protocol import pb
from protocol.enums import InitialPosition, ProducerAccessMode
from protocol.metadata import encode_entry
from protocol.topic_name import TopicName

LEDGER = LedgerConfig(
    preallocate_bytes=0, sync_data=False, retention_time_minutes=-1, retention_size_mb=-1
)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _keys(count: int) -> list[str]:
    return [f"req-{uuid.UUID(int=i * 7919 + 1)}" for i in range(count)]


def memory(keys: int) -> dict[str, float]:
    """Run in a fresh interpreter (``--memory-child``)."""
    gc.collect()
    rss_before = _rss_bytes()
    tracemalloc.start()
    names = _keys(keys)  # counted: the window is what keeps the key strings alive
    window = IdempotencyWindow(WindowConfig(window_seconds=3600, max_keys=keys))
    for entry_id, key in enumerate(names):
        window.on_persisted(window.admit(window.check([key])), Position(7, entry_id))
    del names  # the window keeps its own references to the key strings
    gc.collect()
    traced, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = _rss_bytes()
    assert window.stats()["keys"] == keys
    return {
        "keys": keys,
        "traced_bytes_per_key": traced / keys,
        "rss_bytes_per_key": (rss_after - rss_before) / keys,
        "traced_mib_per_1m_keys": traced / keys * 1_000_000 / 2**20,
    }


def _keyed_entry(key: str | None, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="bench", sequence_id=sequence_id, publish_time=1)
    if key is not None:
        metadata.properties.add(key=IDEMPOTENCY_KEY_PROPERTY, value=key)
    return encode_entry(metadata, b"x" * 100)


def recovery(keys: int, replay: int) -> dict[str, float]:
    names = _keys(keys + replay)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "topic"
        ledger = Ledger.open(directory, LEDGER)
        last = ledger.append(_keyed_entry(None, 0))
        ledger.flush()
        stamp = time.time()
        records = [
            (digest_of(key), pack_location(Position(last.ledger_id, i), -1, stamp))
            for i, key in enumerate(names[:keys])
        ]
        started = time.perf_counter()
        properties = encode_snapshot(records, {})
        encode_s = time.perf_counter() - started
        cursor = ledger.open_cursor(IDEMPOTENCY_CURSOR, InitialPosition.Latest)
        cursor.mark_delete(last, properties=properties)
        started = time.perf_counter()
        cursor.persist()
        persist_s = time.perf_counter() - started
        for sequence_id, key in enumerate(names[keys:], start=1):
            ledger.append(_keyed_entry(key, sequence_id))
        ledger.flush()
        ledger.close()
        cursor_bytes = cursor_file(directory, IDEMPOTENCY_CURSOR).stat().st_size
        del records, properties
        gc.collect()
        started = time.perf_counter()
        ledger = Ledger.open(directory, LEDGER)
        opened_s = time.perf_counter() - started
        window = recover_window(ledger, WindowConfig(window_seconds=3600, max_keys=keys + replay))
        total_s = time.perf_counter() - started
        ledger.close()
    assert window.stats()["keys"] == keys + replay
    return {
        "snapshot_keys": keys,
        "replayed_entries": replay,
        "snapshot_encode_s": encode_s,
        "cursor_persist_s": persist_s,
        "cursor_file_bytes": cursor_bytes,
        "ledger_open_s": opened_s,
        "recovery_total_s": total_s,
    }


class _Sink:
    def close_producer(self, producer: Producer) -> None: ...
    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None: ...
    def producer_failed(self, producer: Producer, error: BrokerError) -> None: ...
    async def check_alive(self) -> bool:
        return True


async def _publish_rate(messages: int, keyed: bool, window_on: bool = True) -> float:
    config = replace(
        BrokerConfig(), journal_max_group_wait_msec=1, broker_deduplication_enabled=True
    )
    entries = [_keyed_entry(f"req-{uuid.uuid4()}" if keyed else None, i) for i in range(messages)]
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger.open(Path(tmp) / "t", LEDGER)
        window = recover_window(ledger, window_config_from(config))
        topic = Topic(
            TopicName.parse("persistent://public/default/bench"),
            ledger,
            config,
            dedup=None,
        )
        topic.idempotency = window if window_on else None
        producer = Producer(
            producer_id=1,
            name="bench",
            mode=ProducerAccessMode.Shared,
            sink=_Sink(),
            connection_key=object(),
            request_id=1,
        )
        await topic.add_producer(producer, None)
        started = time.perf_counter()
        pending = []
        for sequence_id, entry in enumerate(entries):
            pending.append(topic.publish(producer, sequence_id, sequence_id, entry))
            if len(pending) >= 1000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
        elapsed = time.perf_counter() - started
        await topic.close()
    return messages / elapsed


def throughput(messages: int, rounds: int = 5) -> dict[str, object]:
    """Rounds alternate keyless / keyed / no window, so a machine that slows down mid-run
    (it is shared) weighs on all three alike; each figure is the best round, and the ratio of
    each round pair gives the spread."""
    without: list[float] = []
    keyed: list[float] = []
    no_window: list[float] = []
    for _ in range(rounds):
        without.append(asyncio.run(_publish_rate(messages, keyed=False)))
        keyed.append(asyncio.run(_publish_rate(messages, keyed=True)))
        no_window.append(asyncio.run(_publish_rate(messages, keyed=False, window_on=False)))
    ratios = sorted(k / w for k, w in zip(keyed, without, strict=True))
    return {
        "messages": messages,
        "msgs_per_s_no_window": max(no_window),
        "msgs_per_s_without_keys": max(without),
        "msgs_per_s_with_keys": max(keyed),
        "ratio": max(keyed) / max(without),
        "ratio_per_round_min_median_max": [ratios[0], ratios[len(ratios) // 2], ratios[-1]],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--replay", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory(args.keys)))
        return
    child = subprocess.run(
        [sys.executable, __file__, "--memory-child", "--keys", str(args.keys)],
        check=True,
        capture_output=True,
        text=True,
    )
    memory_figures = json.loads(child.stdout)
    throughput_figures = throughput(args.messages)
    report = {
        "goals": {  # issue #26 item 6, side by side with this run's figures
            "keyed_over_unkeyed_throughput": {
                "measured": throughput_figures["ratio"],
                "goal": ">= 0.9",
            },
            "bytes_per_key_in_the_window": {
                "measured": memory_figures["traced_bytes_per_key"],
                "goal": "<= 100",
            },
        },
        "memory": memory_figures,
        "recovery": recovery(args.keys, args.replay),
        "throughput": throughput_figures,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
