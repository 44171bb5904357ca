"""``Housekeeping``: one task per event loop runs the periodic chores of every loaded topic.

A task per topic that wakes every second costs a Task, a coroutine frame and a timer per topic,
and 100,000 wake-ups (and, before, 200,000 hops to a disk thread) per second for 100,000 idle
topics. Here one task ticks for all of them:

* Each topic whose turn has come runs its in-memory chores on the loop (``Topic.housekeep``:
  rates, dedup snapshot by time, purge of inactive producers, compaction trigger); only a topic
  with disk work (a dirty cursor due for persistence, a segment to trim) gets a hop to a disk
  thread (``Topic.housekeep_disk``), a few at a time.
* A *quiet* topic (no producer, no consumer, no disk work: nothing can change its counters or
  cursors) has its period doubled, up to ``QUIET_PERIOD_MAX``; any other answer, or a ``poke``
  (a producer or consumer arrived), brings it back to its own period. An idle topic therefore
  costs a few microseconds every quarter of a minute. What a quiet topic may still have due (a dedup
  snapshot by time, a retention trim, the purge of producers inactive for hours) waits at most
  that long, and its rates read zero growth, which is what they are.

Turns are kept in a heap; the task wakes once per base period (the shortest registered), runs
the topics due by then, and ends with the last topic of its loop, so a loop with no topic (a
test's, a broker's after shutdown) has no task.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
import weakref
from typing import Protocol

log = logging.getLogger(__name__)

#: Disk chores of different topics run concurrently up to this many (the disk pool is bounded
#: anyway; this keeps one tick from queueing thousands of jobs in front of cold reads).
DISK_CONCURRENCY = 8
#: The longest period of a quiet topic (seconds).
QUIET_PERIOD_MAX = 16.0


class Chores(Protocol):
    """What the housekeeper needs of a topic."""

    @property
    def housekeeping_period(self) -> float: ...

    def housekeep(self, now: float) -> bool | None:
        """The in-memory chores: True if there is disk work for ``housekeep_disk``, None if
        the topic is quiet (see the module docstring), False otherwise."""
        ...

    async def housekeep_disk(self) -> None: ...


class Housekeeping:
    """The chores of every topic registered on one event loop (``for_loop``)."""

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Housekeeping] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self) -> None:
        # id(topic) -> (topic, when its turn comes, its current period); the heap holds
        # (due, n, id(topic)) and may hold stale turns (removed topics, pokes): a popped turn
        # counts only if it is the topic's current one. The heap names topics by id, not by
        # reference: a stale turn must not keep a closed topic (and through its producers,
        # their connections) alive until it is popped.
        self._turns: dict[int, tuple[Chores, float, float]] = {}
        self._heap: list[tuple[float, int, int]] = []
        self._order = itertools.count()
        self._task: asyncio.Task[None] | None = None
        # The shortest own period of any topic registered since the task started.
        self._tick_s = float("inf")

    @classmethod
    def for_loop(cls, loop: asyncio.AbstractEventLoop) -> Housekeeping:
        keeper = cls._by_loop.get(loop)
        if keeper is None:
            keeper = cls._by_loop[loop] = cls()
        return keeper

    def __len__(self) -> int:
        return len(self._turns)

    def period_of(self, topic: Chores) -> float | None:
        """The topic's current period (None: not registered)."""
        turn = self._turns.get(id(topic))
        return None if turn is None else turn[2]

    def add(self, topic: Chores) -> None:
        period = topic.housekeeping_period
        self._schedule(topic, time.monotonic(), period)
        if self._task is None or self._task.done():
            self._tick_s = period
            self._task = asyncio.get_running_loop().create_task(self._run(), name="housekeeping")
        else:
            self._tick_s = min(self._tick_s, period)

    def poke(self, topic: Chores) -> None:
        """Something happened on ``topic``: its chores are back to its own period."""
        turn = self._turns.get(id(topic))
        period = topic.housekeeping_period
        if turn is not None and turn[2] != period:
            self._schedule(topic, time.monotonic(), period)

    def remove(self, topic: Chores) -> None:
        self._turns.pop(id(topic), None)

    def _schedule(self, topic: Chores, now: float, period: float) -> None:
        due, key = now + period, id(topic)  # one int object for both (32 B per topic)
        self._turns[key] = (topic, due, period)
        heapq.heappush(self._heap, (due, next(self._order), key))

    async def _run(self) -> None:
        while self._turns:
            tick = self._tick_s
            await asyncio.sleep(tick)
            # Half a tick of slack: a topic due just after this tick runs now, not a tick late.
            await self._tick(time.monotonic(), tick / 2)
            if len(self._heap) > 2 * len(self._turns) + 64:
                self._compact()

    async def _tick(self, now: float, slack: float) -> None:
        disk_work = []
        heap, turns = self._heap, self._turns
        while heap and heap[0][0] <= now + slack:
            due, _, key = heapq.heappop(heap)
            turn = turns.get(key)
            if turn is None or turn[1] != due:
                continue  # removed, or rescheduled since
            topic = turn[0]
            try:
                answer = topic.housekeep(now)
            except Exception:
                log.exception("%r: housekeeping failed", topic)
                answer = False
            own = topic.housekeeping_period
            period = min(turn[2] * 2, max(QUIET_PERIOD_MAX, own)) if answer is None else own
            self._schedule(topic, now, period)
            if answer:
                disk_work.append(topic)
        if disk_work:
            gate = asyncio.Semaphore(DISK_CONCURRENCY)
            await asyncio.gather(*(self._disk(topic, gate) for topic in disk_work))

    async def _disk(self, topic: Chores, gate: asyncio.Semaphore) -> None:
        async with gate:
            if id(topic) not in self._turns:
                return  # closed meanwhile: its close persists what it must
            try:
                await topic.housekeep_disk()
            except Exception:
                log.exception("%r: housekeeping (disk) failed", topic)

    def _compact(self) -> None:
        """Drop stale turns from the heap (after many pokes and removals)."""
        self._heap = [
            entry for entry in self._heap if self._turns.get(entry[2], (None, None))[1] == entry[0]
        ]
        heapq.heapify(self._heap)
