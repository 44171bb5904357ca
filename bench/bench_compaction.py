"""Compaction benchmark: compactor throughput, and rebuilding a table from the compacted view
against reading the whole log. Prints one JSON object.

Defaults are the issue's size: a 1 GiB topic (``--entries 1000000`` entries of ``--value-bytes
1024``) over ``--keys 100000`` distinct keys; on the 2-core machine this was written on the whole
run, client part included, takes about a minute (writing the log 8 s, compacting it 15-18 s).
Figures:

* ``compaction``: ``broker.compaction.compactor.compact`` on the whole log (both phases and the
durable view
  file): seconds, MB/s of log bytes, keyed messages/s (every message is keyed here), distinct
  keys/s, entries kept.
* ``rebuild``: folding entries into a key -> value table from the compacted view (what a
  ``readCompacted`` reader reads up to the horizon) and from the whole log (a plain reader),
  page cache warm in both cases; seconds and speed-up.

* ``client_rebuild``: the same comparison end to end, with the official client against a broker
  subprocess: ``--client-messages 500000`` messages of 100 B over the same ``--keys`` (produced
  batched, then compacted through the REST API), read by a ``is_read_compacted`` reader and by a
  plain reader, each until ``has_message_available()`` is false (``--client-messages 0`` skips).

The first two are storage level (no network): the broker's part of the work.
Usage: ``python bench/bench_compaction.py [--dir DIR] [--entries N] [--keys K]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.compaction.compactor import compact
from broker.storage import Ledger, LedgerConfig, OsFileLayer
from broker.storage.compacted_view import CompactedView
from protocol import pb
from protocol.metadata import decode_entry, encode_entry
from tests.helpers import BrokerProcess

MB = 1_000_000


def entry(key: str, value: bytes, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="bench", sequence_id=sequence_id, publish_time=1, partition_key=key
    )
    return encode_entry(metadata, value)


def fill(ledger: Ledger, entries: int, keys: int, value_bytes: int) -> int:
    total = 0
    value = b"v" * value_bytes
    for i in range(entries):
        data = entry(f"key-{i % keys}", value, i)
        ledger.append(data)
        total += len(data)
        if i % 1000 == 999:
            ledger.flush()
    ledger.flush()
    return total


def fold(items: Any) -> int:
    table: dict[str, bytes] = {}
    for _position, data in items:
        metadata, payload = decode_entry(data)
        if payload:
            table[metadata.partition_key] = payload
        else:
            table.pop(metadata.partition_key, None)
    return len(table)


def read_table(client: pulsar.Client, topic: str, compacted: bool) -> tuple[int, int, float]:
    """(messages read, keys in the table, seconds) for one reader from the earliest message."""
    started = time.monotonic()
    reader = client.create_reader(
        topic, pulsar.MessageId.earliest, receiver_queue_size=5000, is_read_compacted=compacted
    )
    table: dict[str, bytes] = {}
    count = 0
    while reader.has_message_available():
        message = reader.read_next(30_000)
        count += 1
        if message.data():
            table[message.partition_key()] = message.data()
        else:
            table.pop(message.partition_key(), None)
    reader.close()
    return count, len(table), time.monotonic() - started


def client_rebuild(root: Path, messages: int, keys: int) -> dict[str, Any]:
    broker = BrokerProcess(root / "broker-data").start()
    topic = "persistent://public/default/bench-compaction"
    try:
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=5,
            max_pending_messages=5000,
            block_if_queue_full=True,
        )
        value = b"v" * 100
        for i in range(messages):
            producer.send_async(value, None, partition_key=f"key-{i % keys}")
        producer.flush()
        producer.close()
        url = f"{broker.http}/admin/v2/persistent/public/default/bench-compaction/compaction"
        started = time.monotonic()
        with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=30):
            pass
        while True:
            with urllib.request.urlopen(url, timeout=30) as reply:
                status = json.loads(reply.read())["status"]
            if status != "RUNNING":
                break
            time.sleep(0.05)
        compaction_seconds = time.monotonic() - started
        read_compacted, table_keys, compacted_seconds = read_table(client, topic, True)
        read_all, all_keys, log_seconds = read_table(client, topic, False)
        assert table_keys == all_keys == min(keys, messages)
        client.close()
        return {
            "messages": messages,
            "keys": keys,
            "compaction_status": status,
            "compaction_seconds_rest": round(compaction_seconds, 2),
            "compacted_reader": {
                "messages": read_compacted,
                "seconds": round(compacted_seconds, 2),
            },
            "whole_log_reader": {"messages": read_all, "seconds": round(log_seconds, 2)},
            "speedup": round(log_seconds / compacted_seconds, 1),
        }
    finally:
        broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--client-messages", type=int, default=500_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-", dir=args.dir))
    try:
        config = LedgerConfig(max_entries_per_ledger=50_000, sync_data=False)
        ledger = Ledger.open(root / "topic", config)
        started = time.monotonic()
        log_bytes = fill(ledger, args.entries, args.keys, args.value_bytes)
        fill_seconds = time.monotonic() - started
        horizon = ledger.last_confirmed_position
        assert horizon is not None

        started = time.monotonic()
        view, report = compact(ledger, OsFileLayer(), CompactedView.empty(), horizon)
        compaction_seconds = time.monotonic() - started

        started = time.monotonic()
        view_keys = fold(view.iter_entries())
        view_seconds = time.monotonic() - started
        first = ledger.next_position(ledger.before_first_position())
        started = time.monotonic()
        log_keys = fold(ledger.iter_entries(first))
        log_seconds = time.monotonic() - started
        assert view_keys == log_keys == min(args.keys, args.entries)
        ledger.close()
        result = {
            "entries": args.entries,
            "keys": args.keys,
            "value_bytes": args.value_bytes,
            "log_mb": round(log_bytes / MB, 1),
            "fill_seconds": round(fill_seconds, 2),
            "compaction": {
                "seconds": round(compaction_seconds, 2),
                "mb_per_s": round(log_bytes / MB / compaction_seconds, 1),
                "messages_per_s": round(args.entries / compaction_seconds),
                "distinct_keys_per_s": round(report.keys / compaction_seconds),
                "entries_kept": report.entries_written,
            },
            "rebuild": {
                "compacted_view_seconds": round(view_seconds, 3),
                "whole_log_seconds": round(log_seconds, 3),
                "speedup": round(log_seconds / view_seconds, 1),
            },
        }
        if args.client_messages > 0:
            shutil.rmtree(root / "topic", ignore_errors=True)  # room for the broker's copy
            result["client_rebuild"] = client_rebuild(root, args.client_messages, args.keys)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
