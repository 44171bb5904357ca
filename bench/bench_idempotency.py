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

  Runs of each kind alternate within a round until each kind has published ``--round-seconds``;
  the figure is the median of ``--rounds`` rounds' ratios, their spread beside it.

Usage: ``python bench/bench_idempotency.py [--keys N] [--replay N] [--messages N] [--rounds N]
[--round-seconds S] [--skip-memory]``; prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
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


async def _publish_seconds(entries: list[bytes], window_on: bool = True) -> tuple[float, float]:
    """Seconds to ``Topic.publish`` ``entries`` on a fresh topic (its own ledger and window),
    in waves of 1000 awaited together, and the event loop thread's CPU seconds meanwhile (the
    flush thread's are not counted); the topic's set-up and close are not counted."""
    config = replace(
        BrokerConfig(), journal_max_group_wait_msec=1, broker_deduplication_enabled=True
    )
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
        cpu_started = time.thread_time()
        pending = []
        for sequence_id, entry in enumerate(entries):
            pending.append(topic.publish(producer, sequence_id, sequence_id, entry))
            if len(pending) >= 1000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
        elapsed = time.perf_counter() - started
        cpu = time.thread_time() - cpu_started
        await topic.close()
    return elapsed, cpu


def _entries(messages: int, keyed: bool) -> list[bytes]:
    """Single-message entries, each with a distinct key (``keyed``) or none. Every run is a
    fresh topic with an empty window, so one list serves every run of a kind."""
    return [_keyed_entry(f"req-{uuid.uuid4()}" if keyed else None, i) for i in range(messages)]


def _round(
    keyless: list[bytes], keyed: list[bytes], seconds: float, keyed_first: bool
) -> dict[str, float]:
    """One round: pairs of runs (a keyless and a keyed one, back to back; a run publishes every
    entry on a fresh topic) until each kind has published for ``seconds``; each kind's rate is
    over its total time in the round."""
    spent = {False: 0.0, True: 0.0}
    cpu = {False: 0.0, True: 0.0}
    pairs = 0
    while pairs == 0 or min(spent.values()) < seconds:
        for kind in (keyed_first, not keyed_first):
            elapsed, loop_cpu = asyncio.run(_publish_seconds(keyed if kind else keyless))
            spent[kind] += elapsed
            cpu[kind] += loop_cpu
        pairs += 1
    return {
        "without_keys": pairs * len(keyless) / spent[False],
        "with_keys": pairs * len(keyed) / spent[True],
        "cpu_us_without_keys": cpu[False] / (pairs * len(keyless)) * 1e6,
        "cpu_us_with_keys": cpu[True] / (pairs * len(keyed)) * 1e6,
    }


def throughput(messages: int, rounds: int = 9, round_seconds: float = 1.0) -> dict[str, object]:
    """``rounds`` rounds (`_round`), each run on a fresh topic of ``messages`` entries; which
    kind goes first alternates from round to round (a drift of the shared machine weighs on both
    alike). The figure is the median of the rounds' keyed / keyless ratios, with their spread;
    the rates are the medians of the rounds'. ``msgs_per_s_no_window``: keyless entries on a
    topic without a window at all (one run per round), for reference."""
    keyless = _entries(messages, keyed=False)
    keyed = _entries(messages, keyed=True)
    asyncio.run(_publish_seconds(keyed))  # warm-up (imports, first allocations): not counted
    per_round = []
    no_window = []
    for number in range(rounds):
        per_round.append(_round(keyless, keyed, round_seconds, keyed_first=number % 2 == 1))
        no_window.append(messages / asyncio.run(_publish_seconds(keyless, window_on=False))[0])
    ratios = sorted(r["with_keys"] / r["without_keys"] for r in per_round)
    return {
        "messages": messages,
        "rounds": rounds,
        "round_seconds": round_seconds,
        "msgs_per_s_no_window": statistics.median(no_window),
        "msgs_per_s_without_keys": statistics.median(r["without_keys"] for r in per_round),
        "msgs_per_s_with_keys": statistics.median(r["with_keys"] for r in per_round),
        "ratio": statistics.median(ratios),
        "ratio_per_round_min_median_max": [ratios[0], statistics.median(ratios), ratios[-1]],
        "ratio_per_round": [r["with_keys"] / r["without_keys"] for r in per_round],
        # The event loop's CPU per message (a shared machine's other load weighs less on it).
        "loop_cpu_us_per_msg_without_keys": statistics.median(
            r["cpu_us_without_keys"] for r in per_round
        ),
        "loop_cpu_us_per_msg_with_keys": statistics.median(
            r["cpu_us_with_keys"] for r in per_round
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--replay", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=20_000, help="entries per run")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--round-seconds", type=float, default=1.0, help="publishing time per kind per round"
    )
    parser.add_argument(
        "--skip-memory", action="store_true", help="the throughput figures only (faster)"
    )
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory(args.keys)))
        return
    if args.skip_memory:
        print(json.dumps(throughput(args.messages, args.rounds, args.round_seconds), indent=2))
        return
    child = subprocess.run(
        [sys.executable, __file__, "--memory-child", "--keys", str(args.keys)],
        check=True,
        capture_output=True,
        text=True,
    )
    memory_figures = json.loads(child.stdout)
    throughput_figures = throughput(args.messages, args.rounds, args.round_seconds)
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
