"""How the blocking facades of one ``Client`` reach its event loop, and the guard around it.

Every blocking call hands its work to the client's ``LoopThread`` and, if it needs an answer,
waits for it. The ``Runner`` refuses that work once the client is closed, and in a process
forked from the one that created the client (``ClientUsedAfterFork``): the loop thread and its
sockets stayed with the parent, so the child must create its own client (Spark's forked
workers do). It also owns the client's listener threads, which end when it closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from client.errors import AlreadyClosed, ClientUsedAfterFork, PulsarException
from client.process import current_pid
from client.sync.listener import Listeners
from client.sync.loop_thread import LoopThread

__all__ = ["Runner"]

R = TypeVar("R")


class Runner:
    """The loop thread of one client, refused after ``close`` or ``os.fork()``.

    ``operation_timeout``: how long closing waits for each listener thread to end.
    """

    def __init__(self, operation_timeout: float) -> None:
        self._pid = current_pid()
        self._closed = False
        self._close_lock = threading.Lock()
        self.loop_thread = LoopThread()
        self.listeners = Listeners(operation_timeout)

    def check_usable(self) -> None:
        """Raises:
        ClientUsedAfterFork: this process is a child of the one that created the client.
        AlreadyClosed: the client is closed.
        """
        if self._pid != current_pid():
            raise ClientUsedAfterFork(
                f"this Client was created in process {self._pid}, before os.fork(); "
                "create a new Client in the child process"
            )
        if self._closed:
            raise AlreadyClosed("the client is closed")

    def run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Run ``coroutine`` on the loop and wait for its result in this thread."""
        try:
            self.check_usable()
        except PulsarException:
            coroutine.close()
            raise
        return self.loop_thread.run(coroutine)

    def submit(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` on the loop, after everything submitted before it."""
        self.check_usable()
        self.loop_thread.call_soon(function, *args)

    def submit_urgent(self, function: Callable[..., None], *args: Any) -> None:
        """``submit``, and let the loop run it before this thread goes on (briefly): for work
        the broker waits on, such as a FLOW (``LoopThread.call_soon_and_yield``)."""
        self.check_usable()
        self.loop_thread.call_soon_and_yield(function, *args)

    def submit_deferred(self, function: Callable[..., None], *args: Any) -> None:
        """``submit`` for work nobody waits on: it may reach the loop a moment later."""
        self.check_usable()
        self.loop_thread.call_deferred(function, *args)

    def close(self, last: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``last()`` on the loop (closing the ``AsyncClient``), then stop the loop thread
        and end the listener threads; idempotent.

        In a process forked from the one that created the client, this only marks it closed.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            if self._pid != current_pid():
                return
            try:
                self.loop_thread.run(last())
            finally:
                self.loop_thread.stop()
            self.listeners.stop_all()
