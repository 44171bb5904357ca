"""Memory per tracked producer in broker.publish.dedup.MessageDeduplication.

For each name style, 100k producers each publish one entry (``check`` + ``on_persisted``,
both given the same name and id objects, as the topic does), so every name is in both the
pushed and the persisted map. The "idle" variant then connects and disconnects every
producer, adding the inactivity-purge bookkeeping a disconnected name carries until purged.

Each figure is measured in a fresh interpreter: tracemalloc (Python allocations still alive,
exact) and the RSS growth from /proc/self/statm (what the OS sees, without tracemalloc's own
overhead). The names themselves are counted: the dedup maps are what keeps them alive.

Usage: ``python bench/bench_dedup_memory.py [--producers N]``; prints one JSON document.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import string
import subprocess
import sys
import tracemalloc
from collections.abc import Callable

from broker.publish.dedup import MessageDeduplication

NAME_STYLES: dict[str, Callable[[int, random.Random], str]] = {
    # What Java generates: <cluster>-<broker id>-<counter>.
    "standalone-0-<n>": lambda i, _rng: f"standalone-0-{i}",
    # A user-chosen 20-character name.
    "random-20-chars": lambda _i, rng: "".join(rng.choices(string.ascii_lowercase, k=20)),
}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _fill(producers: int, style: str, idle: bool) -> MessageDeduplication[tuple[int, int]]:
    make_name = NAME_STYLES[style]
    rng = random.Random(42)
    dedup: MessageDeduplication[tuple[int, int]] = MessageDeduplication()
    for i in range(producers):
        # A fresh str per producer, like a name parsed out of MessageMetadata, and a sequence
        # id beyond CPython's small-int cache, like a producer that has been running a while.
        name = make_name(i, rng)
        sequence_id = rng.randrange(1_000, 1_000_000_000)
        dedup.check(name, sequence_id, sequence_id)
        dedup.on_persisted(name, sequence_id, (1, i))
        if idle:
            dedup.producer_connected(name)
            dedup.producer_disconnected(name, now=float(i))
    return dedup


def measure_one(producers: int, style: str, idle: bool, method: str) -> int:
    """Bytes retained by a MessageDeduplication tracking ``producers`` names."""
    gc.collect()
    if method == "tracemalloc":
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        dedup = _fill(producers, style, idle)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        before = _rss_bytes()
        dedup = _fill(producers, style, idle)
        gc.collect()
        after = _rss_bytes()
    assert len(dedup.highest_persisted) == producers
    return after - before


def _measure_in_child(producers: int, style: str, idle: bool, method: str) -> int:
    argv = [sys.executable, __file__, "--producers", str(producers), "--child", style, method]
    if idle:
        argv.append("--idle")
    result = subprocess.run(argv, check=True, capture_output=True, text=True)
    return int(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=100_000)
    parser.add_argument("--child", nargs=2, metavar=("STYLE", "METHOD"), help=argparse.SUPPRESS)
    parser.add_argument("--idle", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        style, method = args.child
        print(measure_one(args.producers, style, args.idle, method))
        return

    results = []
    for style in NAME_STYLES:
        for idle in (False, True):
            row: dict[str, object] = {"names": style, "disconnected": idle}
            for method in ("tracemalloc", "rss"):
                total = _measure_in_child(args.producers, style, idle, method)
                row[f"{method}_bytes"] = total
                row[f"{method}_bytes_per_producer"] = round(total / args.producers, 1)
            results.append(row)
    print(
        json.dumps(
            {"producers": args.producers, "python": sys.version.split()[0], "results": results},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
