"""The garbage collector's policy for a broker process (issue #24).

CPython's cycle collector runs on whatever thread allocates when a generation's count passes its
threshold, so in a broker it mostly runs on the event loop. With the default thresholds (700, 10,
10) a flood of requests allocates fast enough to trigger full (gen2) collections, and a full
collection walks every tracked object the process holds, start-up included (modules, protobuf
descriptors, aiohttp's routes: ~54,000 objects) and everything the broker keeps: 20-45 ms of CPU
with the loop stopped in the PRODUCER, SUBSCRIBE, ACK and REDELIVER floods of
bench/bench_stall.py, more than the 20 ms a turn of the loop may take.

The policy, applied once the broker serves:

* ``gc.collect()`` then ``gc.freeze()``: everything alive after start-up moves to the permanent
  generation, which no later collection walks. Those objects live as long as the process, so
  nothing is lost by not collecting them (a cycle among them that dies later stays: a few
  start-up objects at most).
* gen0 threshold 10,000 allocations instead of 700: young collections ~14 times rarer, each
  still walking at most ~10,000 young objects (at most 3-6 ms of CPU during the floods).
* gen1 10: a middle collection walks the survivors of at most 10 young ones (100,000 objects:
  up to 14 ms when a flood's objects all survive, as a thousand consumers' do).
* gen2 100: a full collection waits for 1,000 young collections (and CPython's own rule that
  the objects pending since the last full one exceed 25 % of the long-lived ones): rare; cycles
  are still collected, later.

Measured with ``bench_stall.py --gc-thresholds`` (the CPU time of each collection, 6 flood
shapes x 4 runs, bench/README.md): (700, 10, 10) after the freeze still collects gen2 in every
SUBSCRIBE, ACK and FLOW flood, 11-26 ms; (10,000, 10, 100) none, worst 14 ms (a gen1), gen0
3-6 ms; (50,000, 50, 100) no gen1 seen but gen0 collections of 10-12 ms in every SUBSCRIBE
flood. Throughput and memory of the SEND path: bench/README.md.

Library code never calls this: an in-process ``Broker`` (the tests', an embedding application's)
keeps its host's collector settings. ``run_standalone`` (``magnetar standalone``) applies it, since
the whole process is then the broker's.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

GEN0_THRESHOLD = 10_000
GEN1_THRESHOLD = 10
GEN2_THRESHOLD = 100


@dataclass(frozen=True)
class GcPolicy:
    """What ``apply_gc_policy`` did: how many objects it froze, the thresholds it set."""

    frozen: int
    thresholds: tuple[int, int, int]


def apply_gc_policy(
    gen0: int = GEN0_THRESHOLD, gen1: int = GEN1_THRESHOLD, gen2: int = GEN2_THRESHOLD
) -> GcPolicy:
    """Collect once, freeze what survives, raise the thresholds; log and return what was done.

    Call it once the process's long-lived start-up objects exist (after the broker has started),
    from the process's own entry point only."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, gen1, gen2)
    policy = GcPolicy(frozen=gc.get_freeze_count(), thresholds=(gen0, gen1, gen2))
    # "gc: froze N start-up objects" is read by the tests of the broker process.
    log.info(
        "gc: froze %d start-up objects; collection thresholds %s", policy.frozen, policy.thresholds
    )
    return policy
