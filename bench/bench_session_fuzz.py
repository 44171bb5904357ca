"""Session fuzzer (R11), long run: >= 200k well-framed commands with random fields.

The same fuzzer and invariants as ``tests/integration/test_session_fuzz.py`` (read it first),
run longer and with a fresh random seed unless one is given. The broker runs in-process on its
own thread (uvloop), so its exception handler and logs can be watched. Prints one JSON object:
frames/s, the problems found (exception-handler calls, ERROR logs, wire anomalies), resident
memory growth, what fuzzing connections left behind, the healthy producer's throughput before
and during the fuzzing, and the longest gap of the broker's loop (heavy shapes of issue #24
included; the fuzzing client shares the broker's process and GIL, so this is an upper bound).

    .venv/bin/python bench/bench_session_fuzz.py [--frames 200000] [--seed N] [--connections 4]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.broker_watch import HealthyPair, LoopWatch, rss_bytes
from tests.heavy_sends import LoopGap
from tests.helpers import BrokerThread, wait_until
from tests.integration.test_session_fuzz import StallMeter, fuzz_config, leftovers
from tests.session_fuzzer import run_session_fuzz

BASELINE_SECONDS = 3.0


class RssByQuarter:
    """Resident memory when each quarter of the frames has been sent: a leak keeps climbing,
    caches and allocator pools level off."""

    def __init__(self, frames: int, meter: StallMeter, rss_before: int) -> None:
        self.frames = frames
        self.meter = meter
        self.rss_before = rss_before
        self.growth_mib: list[float] = []

    def sample(self, frames_sent: int) -> None:
        self.meter.sample(frames_sent)
        if frames_sent >= self.frames * (len(self.growth_mib) + 1) / 4:
            self.growth_mib.append(round((rss_bytes() - self.rss_before) / 2**20, 1))


def healthy_rate(healthy: HealthyPair, seconds: float) -> float:
    """Receipts per second the healthy producer gets over ``seconds``."""
    before, started = healthy.progress()[0], time.monotonic()
    time.sleep(seconds)
    return (healthy.progress()[0] - before) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--garbage", type=float, default=0.05, help="share of bad metadata")
    parser.add_argument("--no-topic-deletes", action="store_true")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    print(f"session fuzz seed: {seed}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerThread(fuzz_config(Path(tmp) / "data")).start()
        try:
            with LoopWatch(broker) as watch, HealthyPair(broker.url) as healthy:
                healthy.wait_for_progress()
                baseline = healthy_rate(healthy, BASELINE_SECONDS)
                acked_before = healthy.progress()[0]
                gc.collect()
                rss_before = rss_bytes()
                meter = StallMeter(healthy)
                quarters = RssByQuarter(args.frames, meter, rss_before)
                assert broker.loop is not None
                loop_gap = LoopGap(broker.loop)
                report = asyncio.run(
                    run_session_fuzz(
                        "127.0.0.1",
                        broker.port,
                        seed=seed,
                        frames=args.frames,
                        connections=args.connections,
                        garbage=args.garbage,
                        web_port=broker.web_port,
                        topic_deletes=not args.no_topic_deletes,
                        on_progress=quarters.sample,
                    )
                )
                during = (healthy.progress()[0] - acked_before) / report.seconds
                worst_loop_gap = loop_gap.stop()
                gc.collect()
                rss_growth = rss_bytes() - rss_before
                wait_until(lambda: leftovers(broker, healthy.topic)["open_connections"] == 1, 30)
                left = leftovers(broker, healthy.topic)
                healthy_errors: list[str] = []
                try:
                    healthy.stop_and_check()
                except AssertionError as exc:
                    healthy_errors.append(str(exc))
            problems = watch.problems() + report.anomalies + healthy_errors
            summary = report.summary()
            result = {
                "seed": seed,
                "frames": report.frames_sent,
                "seconds": summary["seconds"],
                "frames_per_s": summary["frames_per_second"],
                "errors": len(problems),
                "first_errors": [p[:300] for p in problems[:10]],
                "rss_growth_mib": round(rss_growth / 2**20, 1),
                "rss_growth_mib_by_quarter": quarters.growth_mib,
                "leftovers": left,
                "healthy_msgs_s_before": round(baseline),
                "healthy_msgs_s_during": round(during),
                "healthy_longest_stall_s": round(meter.longest, 3),
                "longest_loop_gap_ms": round(worst_loop_gap * 1000, 1),
                "heavy_shapes_sent": {
                    kind: report.sent_by_label[kind]
                    for kind in ("LARGE_BATCH", "ZSTD_BOMB", "CHUNK_FLOOD", "ACK_FLOOD")
                },
                "closed_by_broker": report.closed_by_broker,
                "reconnects": report.reconnects,
                "unanswered": summary["unanswered"],
                "never_answered": summary["never_answered"][:10],
                "admin": summary["admin"],
                "received": summary["received"],
            }
        finally:
            broker.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
