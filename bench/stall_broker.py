"""The broker side of ``bench/bench_stall.py``: ``magnetar standalone`` with two recorders.

    python bench/stall_broker.py OUT.json standalone --set key=value ...

Runs the ``magnetar`` command line of whatever tree ``broker`` imports from (the bench sets
``PYTHONPATH`` to the tree under test), exactly as ``python -m broker`` does, with
``broker.server.run_standalone`` wrapped so that two recorders run in the broker process:

* a loop-gap sampler on the broker's own event loop: it sleeps ``INTERVAL_S`` again and again and
  records the time between consecutive wake-ups, and the CPU time the loop's thread used in
  between (``time.thread_time``). A gap is at least the longest stretch the loop was kept from
  running callbacks in it, and at most that stretch plus one interval: the broker's stall measured
  where it happens, not through a client's loop. Its CPU time tells the loop's own work from
  time it spent waiting (for the GIL held by the broker's disk threads, or preempted by the OS on
  a loaded machine);
* a ``gc.callbacks`` timer: every collection's generation and duration (the CPU time of the
  thread that collected: the loop's, or a disk thread's holding the GIL).

At exit (SIGTERM, after the broker's own drain) both go to OUT.json as ``{"gaps": [[wake_time,
gap_s, loop_cpu_s], ...], "gc": [[end_time, generation, duration_s], ...]}`` with
``time.monotonic()`` stamps, the clock the bench process reads too (CLOCK_MONOTONIC is
system-wide).
Only gaps over ``KEEP_OVER_S`` are kept: the rest say nothing a window's maximum needs.

This file does not put its own tree on ``sys.path``: ``broker`` is the tree under test.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import os
import sys
import time
from array import array
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

INTERVAL_S = 0.002
KEEP_OVER_S = 0.004

# wake_time, gap, loop_cpu, wake_time, ...: floats only, nothing for gc to track
_gaps = array("d")
_collections = array("d")  # end_time, generation, duration, ...
_gc_started = [0.0]


async def _sample_gaps() -> None:
    last, last_cpu = time.monotonic(), time.thread_time()
    while True:
        await asyncio.sleep(INTERVAL_S)
        now, cpu = time.monotonic(), time.thread_time()
        if now - last > KEEP_OVER_S:
            _gaps.extend((now, now - last, cpu - last_cpu))
        last, last_cpu = now, cpu


def _time_collection(phase: str, info: dict[str, Any]) -> None:
    # CPU time of the collecting thread: a collection preempted on a loaded machine is not
    # longer for it. Collections in a disk thread hold the GIL too, so they count.
    now = time.thread_time()
    if phase == "start":
        _gc_started[0] = now
    else:
        _collections.extend((time.monotonic(), float(info["generation"]), now - _gc_started[0]))


def _with_recorders(
    run_standalone: Callable[[Any], Coroutine[Any, Any, None]],
) -> Callable[[Any], Coroutine[Any, Any, None]]:
    async def recorded(config: Any) -> None:
        sampler = asyncio.create_task(_sample_gaps())
        gc.callbacks.append(_time_collection)
        try:
            await run_standalone(config)
        finally:
            gc.callbacks.remove(_time_collection)
            sampler.cancel()

    return recorded


def _pairs(values: array[float], width: int) -> list[list[float]]:
    return [list(values[i : i + width]) for i in range(0, len(values), width)]


def _use_gc_thresholds(server: Any, thresholds: str) -> None:
    """``bench_stall.py --gc-thresholds``: the policy's thresholds replaced, to compare them."""
    gen0, gen1, gen2 = (int(t) for t in thresholds.split(","))
    server.apply_gc_policy = functools.partial(server.apply_gc_policy, gen0, gen1, gen2)


def _use_debug_loop(cli: Any, slow_s: float) -> None:
    """``bench_stall.py --debug-loop``: asyncio's own loop in debug mode instead of uvloop, which
    logs every callback that ran over ``slow_s`` with its name (slower: to find, not measure)."""

    def debug_loop() -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = slow_s
        return loop

    cli._loop_factory = lambda: debug_loop


def main() -> None:
    out = Path(sys.argv[1])
    import broker.cli
    import broker.server

    if os.environ.get("STALL_GC_THRESHOLDS"):
        _use_gc_thresholds(broker.server, os.environ["STALL_GC_THRESHOLDS"])
    if os.environ.get("STALL_DEBUG_LOOP"):
        _use_debug_loop(broker.cli, float(os.environ["STALL_DEBUG_LOOP"]))
    server: Any = broker.server
    server.run_standalone = _with_recorders(server.run_standalone)
    try:
        broker.cli.main(sys.argv[2:], prog_name="magnetar")
    finally:
        out.write_text(json.dumps({"gaps": _pairs(_gaps, 3), "gc": _pairs(_collections, 3)}))


if __name__ == "__main__":
    main()
