"""``Housekeeping``: one task per loop runs every topic's chores; quiet topics back off.

The chores here are stand-ins that record their calls (the scheduler is what is tested; the
broker-level behaviour is in ``test_idle_topics.py``)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from broker.topics.housekeeping import Housekeeping
from tests.helpers import wait_until_async

PERIOD = 0.02


class Chores:
    """Answers ``housekeep`` with ``answer`` (True: disk work, None: quiet, False: busy)."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.ticks = 0
        self.disk_runs = 0

    @property
    def housekeeping_period(self) -> float:
        return PERIOD

    def housekeep(self, now: float) -> bool | None:
        self.ticks += 1
        return self.answer

    async def housekeep_disk(self) -> None:
        self.disk_runs += 1


def _housekeeping_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "housekeeping"]


async def test_one_task_runs_the_chores_of_every_topic_and_ends_with_the_last() -> None:
    keeper = Housekeeping.for_loop(asyncio.get_running_loop())
    topics = [Chores(False) for _ in range(200)]
    for topic in topics:
        keeper.add(topic)
    assert len(_housekeeping_tasks()) == 1
    await wait_until_async(lambda: all(t.ticks >= 3 for t in topics))
    assert all(t.disk_runs == 0 for t in topics)
    for topic in topics:
        keeper.remove(topic)
    await wait_until_async(lambda: not _housekeeping_tasks())
    assert len(keeper) == 0


async def test_only_a_topic_with_disk_work_gets_a_disk_run() -> None:
    keeper = Housekeeping.for_loop(asyncio.get_running_loop())
    busy, idle = Chores(True), Chores(False)
    keeper.add(busy)
    keeper.add(idle)
    try:
        await wait_until_async(lambda: busy.disk_runs >= 2 and idle.ticks >= 2)
        assert idle.disk_runs == 0
    finally:
        keeper.remove(busy)
        keeper.remove(idle)


async def test_a_quiet_topic_backs_off_and_a_poke_brings_it_back() -> None:
    keeper = Housekeeping.for_loop(asyncio.get_running_loop())
    quiet, busy = Chores(None), Chores(False)
    keeper.add(quiet)
    keeper.add(busy)
    try:
        await wait_until_async(lambda: (keeper.period_of(quiet) or 0) >= 8 * PERIOD)
        assert keeper.period_of(busy) == PERIOD
        ticks = quiet.ticks
        await wait_until_async(lambda: busy.ticks >= 10)
        assert quiet.ticks <= ticks + 2  # backed off: far fewer turns than the busy one
        quiet.answer = False
        keeper.poke(quiet)
        assert keeper.period_of(quiet) == PERIOD
        seen = quiet.ticks
        await wait_until_async(lambda: quiet.ticks >= seen + 3)
    finally:
        keeper.remove(quiet)
        keeper.remove(busy)


async def test_a_removed_topic_is_not_kept_alive_by_its_pending_turns() -> None:
    """A closed topic holds its producers and, through them, their connections: turns left in
    the heap must not keep it reachable until they come up (the session fuzz counts this)."""
    keeper = Housekeeping.for_loop(asyncio.get_running_loop())
    staying, leaving = Chores(False), Chores(None)
    gone = weakref.ref(leaving)
    keeper.add(staying)
    keeper.add(leaving)
    del leaving

    def ticked() -> bool:
        topic = gone()
        return topic is not None and topic.ticks >= 2

    try:
        await wait_until_async(ticked)
        topic = gone()
        keeper.remove(topic)  # type: ignore[arg-type]  # alive: it just ticked
        del topic
        gc.collect()
        assert gone() is None
    finally:
        keeper.remove(staying)
