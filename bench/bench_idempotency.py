"""Issue #16 figures: memory per key, snapshot and recovery time of a big window, and publish
throughput with keys vs without.

* memory: ``--keys`` keys (``req-<uuid4>``, 40 chars, as an HTTP handler would use) accepted
  and persisted one per entry; tracemalloc (live Python allocations, exact) and RSS growth, in a
  fresh interpreter;
* recovery: a real ledger whose ``magnetar.idempotency`` cursor holds a ``--keys`` snapshot,
  followed by ``--replay`` keyed entries; the time of ``Ledger.open`` + ``recover_window`` (what
  a topic load adds), the snapshot's time on the loop (``take_snapshot``), its cursor write's
  (``Cursor.persist``) and the cursor file's size;
* throughput: ``Topic.publish`` of ``--messages`` single-message entries on a real ledger
  (group commit, no fsync), with a key each vs without; the ratio is the cost of the window
  (``msgs_per_s_no_window``: keyless entries on a topic without a window at all, for reference).

  Runs of each kind alternate within a round until each kind has published ``--round-seconds``;
  the figure is the median of ``--rounds`` rounds' ratios, their spread beside it;
* steady-state throughput (issue #26 item 6): the same, but every keyed run starts on a window
  already holding ``--keys`` keys (its ``idempotencyWindowMaxKeys``), so each new key evicts
  one, and is long enough for ``--steady-snapshots`` snapshots of the full window (one per
  ``--keys`` entries) inside the timed part; the keyless run beside it publishes as many
  entries. Snapshots and cursor writes are counted and timed as they happen (the event loop's
  ``take_snapshot`` and the worker thread's cursor save); a keyed run with fewer snapshots or
  no cursor write in its timed part makes the figure an error, not a pass.

With ``--check`` the exit status is 1 when a goal is missed.

Usage: ``python bench/bench_idempotency.py [--keys N] [--replay N] [--messages N] [--rounds N]
[--round-seconds S] [--steady-rounds N] [--steady-snapshots N] [--skip-memory] [--skip-fresh]
[--skip-steady] [--check]``; prints JSON.
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
from broker.publish import publisher as publisher_module
from broker.publish.idempotency_snapshot import recover_window, take_snapshot, window_config_from
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
from broker.storage.cursor_store import CursorStore
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
        live = IdempotencyWindow.restore(
            records,
            {},
            config=WindowConfig(window_seconds=3600, max_keys=keys),
            clock=time.time,
            snapshot_position=last,
        )
        cursor = ledger.open_cursor(IDEMPOTENCY_CURSOR, InitialPosition.Latest)
        # The broker's path: the snapshot on the loop, then the cursor write (a worker thread).
        started = time.perf_counter()
        take_snapshot(ledger, live)
        encode_s = time.perf_counter() - started
        started = time.perf_counter()
        cursor.persist()
        persist_s = time.perf_counter() - started
        properties = cursor.snapshot().properties
        assert len(properties) == keys + 1  # the keys and the format
        for sequence_id, key in enumerate(names[keys:], start=1):
            ledger.append(_keyed_entry(key, sequence_id))
        ledger.flush()
        ledger.close()
        cursor_bytes = cursor_file(directory, IDEMPOTENCY_CURSOR).stat().st_size
        del records, properties, live
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


class _Snapshots:
    """What the idempotency snapshots cost while a run is timed: ``take_snapshot`` on the event
    loop and the window cursor's saves (in a worker thread, by the topic's housekeeping), each
    counted and timed from `start` until ``timing`` is cleared (a save still running then is
    not counted; nor are the topic's set-up and close)."""

    def __init__(self) -> None:
        self.timing = False
        self.taken: list[float] = []
        self.saved: list[float] = []
        # Replaced in the publisher's module: it calls the function through that global.
        take = publisher_module.take_idempotency_snapshot  # type: ignore[attr-defined]
        save = CursorStore.save

        def timed_take(ledger: Ledger, window: IdempotencyWindow) -> None:
            started = time.perf_counter()
            take(ledger, window)
            if self.timing:
                self.taken.append(time.perf_counter() - started)

        def timed_save(store: CursorStore, state: object) -> None:
            started = time.perf_counter()
            save(store, state)  # type: ignore[arg-type]
            if self.timing and getattr(state, "name", None) == IDEMPOTENCY_CURSOR:
                self.saved.append(time.perf_counter() - started)

        publisher_module.take_idempotency_snapshot = timed_take  # type: ignore[attr-defined]
        CursorStore.save = timed_save  # type: ignore[assignment,method-assign]

    def start(self) -> None:
        self.taken.clear()
        self.saved.clear()
        self.timing = True

    def results(self) -> tuple[list[float], list[float]]:
        return list(self.taken), list(self.saved)


_SNAPSHOTS: _Snapshots | None = None


def _snapshots() -> _Snapshots:
    global _SNAPSHOTS
    if _SNAPSHOTS is None:
        _SNAPSHOTS = _Snapshots()
    return _SNAPSHOTS


def _full_window(config: BrokerConfig, keys: int) -> IdempotencyWindow:
    """A window holding ``keys`` durable keys stamped now (none of the runs' keys), as a topic
    that has been receiving keys for a while holds them."""
    now = time.time()
    records = [
        (digest_of(key), pack_location(Position(0, i), -1, now))
        for i, key in enumerate(_keys(keys))
    ]
    window = IdempotencyWindow.restore(records, {}, config=window_config_from(config))
    window.finish_replay()
    return window


async def _publish_seconds(
    entries: list[bytes],
    window_on: bool = True,
    full_window: int = 0,
    probe: _Snapshots | None = None,
) -> tuple[float, float]:
    """Seconds to ``Topic.publish`` ``entries`` on a fresh topic (its own ledger and window,
    empty or holding ``full_window`` keys, then also its maximum), in waves of 1000 awaited
    together, and the event loop thread's CPU seconds meanwhile (the flush thread's are not
    counted); the topic's set-up and close are not counted."""
    config = replace(
        BrokerConfig(), journal_max_group_wait_msec=1, broker_deduplication_enabled=True
    )
    if full_window:
        config = replace(config, idempotency_window_max_keys=full_window)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger.open(Path(tmp) / "t", LEDGER)
        window = recover_window(ledger, window_config_from(config))
        if full_window:
            window = _full_window(config, full_window)
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
        if probe is not None:
            probe.start()
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
        if probe is not None:
            probe.timing = False
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
    return {
        "messages": messages,
        "rounds": rounds,
        "round_seconds": round_seconds,
        "msgs_per_s_no_window": statistics.median(no_window),
        **_rounds_summary(per_round),
    }


def _rounds_summary(per_round: list[dict[str, float]]) -> dict[str, object]:
    """Medians of interleaved keyed/keyless rounds (rates, their ratio with its spread, and the
    event loop's CPU per message: a shared machine's other load weighs less on it)."""
    ratios = sorted(r["with_keys"] / r["without_keys"] for r in per_round)
    return {
        "msgs_per_s_without_keys": statistics.median(r["without_keys"] for r in per_round),
        "msgs_per_s_with_keys": statistics.median(r["with_keys"] for r in per_round),
        "ratio": statistics.median(ratios),
        "ratio_per_round_min_median_max": [ratios[0], statistics.median(ratios), ratios[-1]],
        "ratio_per_round": [r["with_keys"] / r["without_keys"] for r in per_round],
        "loop_cpu_us_per_msg_without_keys": statistics.median(
            r["cpu_us_without_keys"] for r in per_round
        ),
        "loop_cpu_us_per_msg_with_keys": statistics.median(
            r["cpu_us_with_keys"] for r in per_round
        ),
    }


def steady_throughput(keys: int, rounds: int = 5, snapshots: int = 3) -> dict[str, object]:
    """Keyed / keyless with the window full (module docstring): ``rounds`` rounds of one keyed
    and one keyless run of ``snapshots * keys + keys // 2`` entries each (which goes first
    alternates), the keyed one on a window pre-filled to ``keys`` keys."""
    messages = snapshots * keys + keys // 2
    keyless = _entries(messages, keyed=False)
    keyed = _entries(messages, keyed=True)
    probe = _snapshots()
    asyncio.run(_publish_seconds(keyed[: keys // 2], full_window=keys))  # warm-up
    per_round: list[dict[str, float]] = []
    snapshot_ms: list[float] = []
    save_ms: list[float] = []
    for number in range(rounds):
        rates: dict[bool, float] = {}
        cpu: dict[bool, float] = {}
        for kind in (number % 2 == 1, number % 2 == 0):
            elapsed, loop_cpu = asyncio.run(
                _publish_seconds(
                    keyed if kind else keyless, full_window=keys if kind else 0, probe=probe
                )
            )
            taken, saved = probe.results()
            rates[kind], cpu[kind] = messages / elapsed, loop_cpu / messages * 1e6
            if kind:
                if len(taken) < snapshots or not saved:
                    raise RuntimeError(
                        f"steady state not reached: {len(taken)} snapshots and {len(saved)} "
                        f"cursor writes in a timed run (want >= {snapshots} and >= 1: raise "
                        "--steady-snapshots or --keys)"
                    )
                snapshot_ms += [t * 1e3 for t in taken]
                save_ms += [t * 1e3 for t in saved]
        per_round.append(
            {
                "with_keys": rates[True],
                "without_keys": rates[False],
                "cpu_us_with_keys": cpu[True],
                "cpu_us_without_keys": cpu[False],
            }
        )
    return {
        "window_keys": keys,
        "messages_per_run": messages,
        "rounds": rounds,
        **_rounds_summary(per_round),
        # Per keyed run: snapshots taken on the loop and window-cursor writes in a worker
        # thread (holding the GIL while it encodes), with their median times.
        "snapshots_per_keyed_run": len(snapshot_ms) / rounds,
        "snapshot_ms_on_loop_median": statistics.median(snapshot_ms),
        "cursor_writes_per_keyed_run": len(save_ms) / rounds,
        "cursor_write_ms_median": statistics.median(save_ms),
    }


def _goal(measured: float, goal: str, met: bool) -> dict[str, object]:
    return {"measured": measured, "goal": goal, "met": met}


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
    parser.add_argument("--skip-fresh", action="store_true", help="no fresh-window throughput")
    parser.add_argument("--skip-steady", action="store_true", help="no full-window throughput")
    parser.add_argument("--steady-rounds", type=int, default=5)
    parser.add_argument(
        "--steady-snapshots", type=int, default=3, help="full-window snapshots per keyed run"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory(args.keys)))
        return
    report: dict[str, object] = {}
    goals: dict[str, dict[str, object]] = {}  # issue #26 item 6, beside this run's figures
    if not args.skip_fresh:
        fresh = throughput(args.messages, args.rounds, args.round_seconds)
        ratio = float(fresh["ratio"])  # type: ignore[arg-type]
        goals["keyed_over_unkeyed_throughput"] = _goal(ratio, ">= 0.9", ratio >= 0.9)
        report["throughput"] = fresh
    if not args.skip_steady:
        steady = steady_throughput(args.keys, args.steady_rounds, args.steady_snapshots)
        ratio = float(steady["ratio"])  # type: ignore[arg-type]
        goals["keyed_over_unkeyed_throughput_full_window"] = _goal(ratio, ">= 0.9", ratio >= 0.9)
        report["throughput_full_window"] = steady
    if not args.skip_memory:
        child = subprocess.run(
            [sys.executable, __file__, "--memory-child", "--keys", str(args.keys)],
            check=True,
            capture_output=True,
            text=True,
        )
        memory_figures = json.loads(child.stdout)
        per_key = memory_figures["traced_bytes_per_key"]
        goals["bytes_per_key_in_the_window"] = _goal(per_key, "<= 100", per_key <= 100)
        report["memory"] = memory_figures
        report["recovery"] = recovery(args.keys, args.replay)
    print(json.dumps({"goals": goals, **report}, indent=2))
    if args.check and not all(goal["met"] for goal in goals.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
