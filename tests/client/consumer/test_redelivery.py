"""``RedeliveryTimers``: negative acks and unacked timeouts come due in time order, one timer
armed for the earliest; acknowledged entries never come due."""

from __future__ import annotations

import asyncio

from client.consumer.redelivery import RedeliveryTimers


async def test_entries_come_due_on_one_timer_armed_for_the_earliest() -> None:
    loop = asyncio.get_running_loop()
    fired = asyncio.Event()
    timers = RedeliveryTimers(loop, fired.set)
    now = loop.time()
    timers.track_unacked((1, 1), now + 60)
    timers.track_unacked((1, 1), now + 120)  # the first deadline stays
    timers.nack((1, 2), [(1, 2), (1, 3)], now + 0.01)  # a chunked message: every chunk
    timers.track_unacked((1, 4), now + 0.02)
    timers.forget((1, 3))  # acknowledged
    await asyncio.wait_for(fired.wait(), 5)
    assert timers.pop_due(loop.time() + 0.05) == [(1, 2), (1, 4)]
    assert timers.pop_due(now + 59) == []
    assert timers.pop_due(now + 60) == [(1, 1)]
    timers.cancel()


async def test_a_nack_ends_the_unacked_timeout_and_cumulative_acks_forget_earlier_entries() -> None:
    loop = asyncio.get_running_loop()
    timers = RedeliveryTimers(loop, lambda: None)
    now = loop.time()
    for entry in range(4):
        timers.track_unacked((1, entry), now + 1)
    timers.nack((1, 3), [(1, 3)], now + 2)
    timers.forget_unacked_up_to((1, 1))
    assert timers.pop_due(now + 1) == [(1, 2)]
    assert timers.pop_due(now + 2) == [(1, 3)]
    timers.track_unacked((2, 0), now + 1)
    timers.clear()
    assert timers.pop_due(now + 10) == []
    timers.cancel()
