"""The event loop of a blocking ``Client``, on a daemon thread of its own, fed through a FIFO.

Work from application threads goes through one FIFO inbox, drained by the loop in order, so
calls made by one thread happen in the order it made them (a ``send_async`` before a ``flush``
is flushed) and many threads can share a client and its producers. The loop is woken once per
batch of submissions rather than once per call, which keeps ``send_async`` cheap; work nobody
waits on (acknowledgements) may wait a moment for company (``call_deferred``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

logger = logging.getLogger(__name__)
R = TypeVar("R")


# Deferred submissions reach the loop at most this late, or as soon as this many are queued.
# Half a millisecond (was 2): a consumer at 160k messages/s still sends ~80 acknowledgements
# per wake-up, and the broker gets them in small bites between its dispatch reads instead of
# bursts that hold its loop (bench_client_consume, blocking: ~158k -> ~166k msg/s, noisy).
_DEFER_SECONDS = 0.0005
_DEFER_MAX_QUEUED = 512
# ``call_soon_and_yield`` waits at most this long for the loop (it is busy: go on meanwhile).
_YIELD_SECONDS = 0.001


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we run
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """An event loop on a daemon thread, fed through a FIFO inbox."""

    def __init__(self) -> None:
        self._inbox: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._wakeup_pending = False
        self._deferred_drain_armed = False
        self._started = threading.Event()
        self.loop: asyncio.AbstractEventLoop = _new_event_loop()
        self._thread = threading.Thread(target=self._run, name="magnetar-client", daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def call_soon(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` on the loop, after everything submitted before it."""
        self._inbox.append((function, args))
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self.loop.call_soon_threadsafe(self._drain_inbox)

    def call_soon_and_yield(self, function: Callable[..., None], *args: Any) -> None:
        """``call_soon``, then let the loop run it before this thread goes on (waiting at most
        ``_YIELD_SECONDS``). For urgent work from a thread that keeps the GIL while it works:
        a blocking receiver going through its queued messages holds it for a millisecond and
        more, and the loop thread, woken to send a FLOW, cannot run before the receiver blocks
        (or CPython's 5 ms switch interval passes); by then the queue is empty and the broker
        has had nothing to do. Waiting on an event releases the GIL to the loop at once."""
        ran = threading.Event()

        def run_then_release() -> None:
            try:
                function(*args)
            finally:
                ran.set()

        self.call_soon(run_then_release)
        ran.wait(_YIELD_SECONDS)

    def call_deferred(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` on the loop within ``_DEFER_SECONDS``, in order with every
        other submission. For work nobody waits on (acknowledgements): waking the loop costs
        a pipe write and a switch of threads, and a consumer acknowledging 100k messages a
        second pays it once per window instead of once per message."""
        inbox = self._inbox
        inbox.append((function, args))
        if len(inbox) >= _DEFER_MAX_QUEUED:
            if not self._wakeup_pending:
                self._wakeup_pending = True
                self.loop.call_soon_threadsafe(self._drain_inbox)
        elif not self._deferred_drain_armed:
            self._deferred_drain_armed = True
            self.loop.call_soon_threadsafe(self._arm_deferred_drain)

    def _arm_deferred_drain(self) -> None:
        self.loop.call_later(_DEFER_SECONDS, self._deferred_drain)

    def _deferred_drain(self) -> None:
        # Disarmed before draining: a submission racing with the drain is either drained
        # now or arms the next one. An immediate drain's flag is left alone (its drain is
        # still scheduled; it then finds the inbox empty).
        self._deferred_drain_armed = False
        self._run_inbox()

    def _drain_inbox(self) -> None:
        self._wakeup_pending = False  # first: a submission from now on schedules a new drain
        self._run_inbox()

    def _run_inbox(self) -> None:
        inbox = self._inbox
        while inbox:
            function, args = inbox.popleft()
            try:
                function(*args)
            except Exception:
                logger.exception("error in work submitted to the client loop")

    def run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Run ``coroutine`` on the loop and wait for its result in this thread.

        Raises:
            RuntimeError: called from the loop thread itself (it would wait for itself).
        """
        try:
            self.refuse_to_block_the_loop()
        except RuntimeError:
            coroutine.close()
            raise
        done: concurrent.futures.Future[R] = concurrent.futures.Future()
        self.call_soon(self._start, coroutine, done)
        return done.result()

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def refuse_to_block_the_loop(self) -> None:
        """Raise if called on the loop thread, where waiting for the loop would deadlock.

        Raises:
            RuntimeError: this is the loop thread (a send callback calling ``send``?).
        """
        if self.on_loop_thread():
            raise RuntimeError(
                "a blocking client call from the client's own loop thread (a send callback?) "
                "would deadlock; use send_async or the AsyncClient there"
            )

    def _start(self, coroutine: Coroutine[Any, Any, R], done: concurrent.futures.Future[R]) -> None:
        task = self.loop.create_task(coroutine)
        task.add_done_callback(functools.partial(_copy_outcome, done))

    def stop(self) -> None:
        """Stop the loop and wait for the thread to end."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


def _copy_outcome(done: concurrent.futures.Future[R], task: asyncio.Future[R]) -> None:
    if task.cancelled():
        done.cancel()
        return
    error = task.exception()
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(task.result())
