"""``LoopThread``: deferred submissions share wake-ups and keep their order."""

from __future__ import annotations

import threading
from typing import Any

from client.sync.loop_thread import LoopThread


def test_deferred_submissions_share_wakeups_and_keep_their_order_with_the_others() -> None:
    """Acknowledgements go to the loop deferred: thousands of them must wake the loop a few
    dozen times, not once each, and still run in submission order with the immediate ones."""
    thread = LoopThread()
    try:
        wakeups = 0
        original = thread.loop.call_soon_threadsafe

        def counting(*args: Any) -> Any:
            nonlocal wakeups
            wakeups += 1
            return original(*args)

        thread.loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        ran: list[int] = []
        done = threading.Event()
        for i in range(10_000):
            if i % 1000 == 999:
                thread.call_soon(ran.append, i)
            else:
                thread.call_deferred(ran.append, i)
        thread.call_deferred(lambda: done.set())
        assert done.wait(10)  # nothing submitted after it: the deferral alone delivers it
        assert ran == list(range(10_000))
        assert wakeups < 500, wakeups
    finally:
        thread.stop()
