"""Session fuzzer (R11), bounded run: 20k well-framed commands with random fields.

Four connections play seeded scripts (``tests/session_fuzzer.py``) against an in-process broker
while an official-client producer/consumer pair works on a topic of its own. Afterwards:

* nothing reached the broker loop's exception handler and no ERROR (or "never retrieved",
  "Exception in callback", ...) was logged anywhere in the process;
* the broker never sent a frame our decoder refuses, always accepted a new connection and kept
  reading;
* the healthy pair never stalled, got every acknowledged message exactly once, in order, and its
  connection was never closed by the broker;
* once the fuzzing connections are gone, nothing of theirs is left: no producer, waiter or
  consumer on any topic, and at most one closed ``ServerConnection`` per topic still reachable
  (a topic's flush loop holds its last group commit, whose entries name their producers, until
  its next flush); anything more is a leak that grows with every client, as fenced producers
  did;
* resident memory grew by less than 50 MiB (R11) over the run;
* the broker's loop never stood still for long, heavy shapes (issue #24) included: its longest
  gap stays under ``MAX_LOOP_GAP_S``, generous for a shared 2-core machine whose broker shares
  its process (and GIL) with the fuzzing client, far below the seconds those shapes once cost.

Replay a failure with ``MAGNETAR_FUZZ_SEED=<seed printed> pytest tests/integration/...``; the
frames each connection sends depend on the seed only. The long run is
``bench/bench_session_fuzz.py``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.connection.core import ServerConnection
from tests.broker_watch import HealthyPair, LoopWatch, rss_bytes
from tests.heavy_sends import LoopGap
from tests.helpers import BrokerThread, broker_config, wait_until
from tests.session_fuzzer import run_session_fuzz

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.slow]

FRAMES = 20_000
CONNECTIONS = 4
DEFAULT_SEED = 0x5EED_0011
MAX_RSS_GROWTH = 50 * 1024 * 1024
MAX_HEALTHY_STALL_S = 5.0
MAX_LOOP_GAP_S = 0.5


def fuzz_config(data_dir: Path) -> BrokerConfig:
    """Small segments so fuzzed topics roll over (more ledgers, trimming) and cost little disk."""
    return broker_config(
        data_dir,
        managed_ledger_max_size_per_ledger_mbytes=1,
        managed_ledger_max_entries_per_ledger=200,
    )


class StallMeter:
    """Longest time the healthy pair's counters stood still, sampled while fuzzing."""

    def __init__(self, healthy: HealthyPair) -> None:
        self.healthy = healthy
        self.longest = 0.0
        self._last = healthy.progress()
        self._since = time.monotonic()

    def sample(self, _frames_sent: int) -> None:
        now = time.monotonic()
        progress = self.healthy.progress()
        if progress[0] > self._last[0] and progress[1] > self._last[1]:
            self._last, self._since = progress, now
        self.longest = max(self.longest, now - self._since)


def open_connections(broker: BrokerThread) -> set[ServerConnection]:
    async def connections() -> set[ServerConnection]:
        assert broker.broker is not None
        assert broker.broker.service is not None
        return set(broker.broker.service.connections)

    return broker.call(connections)


def leftovers(broker: BrokerThread, healthy_topic: str) -> dict[str, Any]:
    """What fuzzing connections left behind in the broker, once they are all closed."""

    async def probe() -> dict[str, Any]:
        assert broker.broker is not None
        service = broker.broker.service
        assert service is not None
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, ServerConnection)]
        producers: dict[str, int] = {}
        consumers: dict[str, int] = {}
        for name, topic in service.topics.items():
            if name == healthy_topic:
                continue
            if topic.producers.producers:
                producers[name] = len(topic.producers.producers)
            attached = sum(len(sub.consumers) for sub in topic.subscriptions.values())
            if attached:
                consumers[name] = attached
        return {
            "open_connections": len(service.connections),
            "closed_but_reachable": len(alive) - len(service.connections),
            "fuzzed_topics": len(service.topics) - 1,
            "producers": producers,
            "consumers": consumers,
        }

    return broker.call(probe)


def test_session_fuzz_keeps_the_broker_healthy(tmp_path: Path) -> None:
    seed = int(os.environ.get("MAGNETAR_FUZZ_SEED", DEFAULT_SEED))
    print(f"session fuzz seed: {seed} (replay with MAGNETAR_FUZZ_SEED={seed})")
    broker = BrokerThread(fuzz_config(tmp_path / "data")).start()
    try:
        with LoopWatch(broker) as watch, HealthyPair(broker.url) as healthy:
            healthy.wait_for_progress()
            healthy_connections = open_connections(broker)
            rss_before = rss_bytes()
            meter = StallMeter(healthy)
            assert broker.loop is not None
            loop_gap = LoopGap(broker.loop)
            report = asyncio.run(
                run_session_fuzz(
                    "127.0.0.1",
                    broker.port,
                    seed=seed,
                    frames=FRAMES,
                    connections=CONNECTIONS,
                    web_port=broker.web_port,
                    on_progress=meter.sample,
                )
            )
            rss_growth = rss_bytes() - rss_before
            worst_loop_gap = loop_gap.stop()
            summary = report.summary()
            print(summary, f"longest loop gap {worst_loop_gap * 1000:.0f} ms")
            healthy.wait_for_progress()

            # Only the healthy pair's connection is left (the official client shares one).
            wait_until(lambda: leftovers(broker, healthy.topic)["open_connections"] == 1, 15)
            left = leftovers(broker, healthy.topic)
            # ... and it is the very connection the pair had before the fuzzing began.
            assert open_connections(broker) == healthy_connections
            healthy.stop_and_check()

        context = f"seed {seed}: {summary}"
        assert not watch.problems(), f"{context}\n" + "\n".join(watch.problems()[:20])
        assert not report.anomalies, context
        assert report.frames_sent >= FRAMES
        # The fuzzer reached deep: producers and consumers were admitted and served.
        for kind in ("PRODUCER_SUCCESS", "SEND_RECEIPT", "MESSAGE", "SUCCESS"):
            assert report.received_by_type[kind] > 0, (kind, context)
        assert meter.longest < MAX_HEALTHY_STALL_S, (meter.longest, context)
        for kind in ("LARGE_BATCH", "ZSTD_BOMB", "CHUNK_FLOOD", "ACK_FLOOD"):
            assert report.sent_by_label[kind] > 0, (kind, context)
        assert worst_loop_gap < MAX_LOOP_GAP_S, (worst_loop_gap, context)
        assert (left["producers"], left["consumers"]) == ({}, {}), (left, context)
        assert left["closed_but_reachable"] <= left["fuzzed_topics"], (left, context)
        assert rss_growth < MAX_RSS_GROWTH, (rss_growth, context)
    finally:
        broker.stop()
