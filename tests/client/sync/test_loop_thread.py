"""``LoopThread``: deferred submissions share wake-ups and keep their order; urgent ones let
the loop run them before the caller goes on."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from client.sync import loop_thread
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


def test_call_soon_and_yield_lets_the_loop_run_the_work_before_returning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A FLOW submitted by a blocking receiver reaches the loop while the receiver waits, in
    order after what was submitted before it (a long bound: the event decides, not a clock)."""
    monkeypatch.setattr(loop_thread, "_YIELD_SECONDS", 30.0)
    thread = LoopThread()
    try:
        ran: list[tuple[str, int]] = []
        thread.call_deferred(lambda: ran.append(("before", threading.get_ident())))
        thread.call_soon_and_yield(lambda: ran.append(("urgent", threading.get_ident())))
        assert ran == [("before", thread.thread.ident), ("urgent", thread.thread.ident)]
    finally:
        thread.stop()


def test_call_soon_and_yield_goes_on_when_the_loop_is_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait is bounded: with the loop held by a long callback the caller returns without
    the work done, and the loop runs it once free."""
    monkeypatch.setattr(loop_thread, "_YIELD_SECONDS", 0.05)
    thread = LoopThread()
    try:
        release, done = threading.Event(), threading.Event()
        ran: list[str] = []
        thread.call_soon(lambda: release.wait(30))
        thread.call_soon_and_yield(ran.append, "urgent")
        assert ran == []  # the loop is still held: the caller went on
        thread.call_soon(done.set)
        release.set()
        assert done.wait(30)
        assert ran == ["urgent"]
    finally:
        thread.stop()
