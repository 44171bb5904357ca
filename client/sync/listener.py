"""Message listeners of the blocking facade: the official ``message_listener`` and
``reader_listener`` options.

The official client calls ``listener(consumer, message)`` from a listener thread of its C++
core. Here each consumer or reader given a listener gets a thread of its own that receives
through the facade's blocking path and calls the listener with each message, in order. So a
listener may block, acknowledge and call any blocking method of the client (it is not on the
loop thread), and a slow listener holds up only its own consumer.

* an exception raised by the listener is logged and delivery goes on (as the C++ core does);
* ``pause()`` stops calls to the listener until ``resume()``; messages stay queued (at most
  the one already received is held back), as ``pause_message_listener`` does;
* the thread ends when its consumer or the client is closed; ``stop()`` also ends a paused one.

``Listeners`` keeps a client's threads, so closing the client ends every one of them.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from client.errors import AlreadyClosed, ClientUsedAfterFork
from client.message import Message

__all__ = ["ListenerThread", "Listeners"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class ListenerThread:
    """Calls ``deliver(message)`` for every message ``receive()`` returns, on its own thread."""

    def __init__(
        self, name: str, receive: Callable[[], Message], deliver: Callable[[Message], None]
    ) -> None:
        self._receive = receive
        self._deliver = deliver
        self._unpaused = threading.Event()
        self._unpaused.set()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ListenerThread:
        self._thread.start()
        return self

    def pause(self) -> None:
        self._unpaused.clear()

    def resume(self) -> None:
        self._unpaused.set()

    def stop(self) -> None:
        """End the thread after the current call (its consumer is closed or closing)."""
        self._stopped = True
        self._unpaused.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end, unless called from it (a listener closing its consumer).
        A listener still busy after ``timeout`` seconds is left to finish on its own."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped:
            self._unpaused.wait()
            try:
                message = self._receive()
            except (AlreadyClosed, ClientUsedAfterFork, concurrent.futures.CancelledError):
                return  # closed: the consumer, the client, or the loop under a pending receive
            except Exception:
                logger.exception("%s: receiving for the message listener failed", self._thread.name)
                return
            self._unpaused.wait()  # paused while waiting for this message: hold it back
            if self._stopped:
                return
            try:
                self._deliver(message)
            except Exception:
                logger.exception("%s: the message listener raised", self._thread.name)


class Listeners:
    """The listener threads of one client."""

    def __init__(self, join_timeout: float) -> None:
        self._threads: set[ListenerThread] = set()
        self._join_timeout = join_timeout

    def start(
        self,
        name: str,
        receive: Callable[[], Message],
        listener: Callable[[T, Message], None] | None,
        owner: T,
    ) -> ListenerThread | None:
        """A thread calling ``listener(owner, message)`` (None without a listener)."""
        if listener is None:
            return None
        thread = ListenerThread(name, receive, functools.partial(listener, owner))
        self._threads.add(thread)
        return thread.start()

    def stop(self, thread: ListenerThread | None) -> None:
        """After its consumer (or the client) is closed: receiving raises AlreadyClosed there,
        so the thread ends once its listener returns."""
        if thread is not None:
            thread.stop()
            thread.join(self._join_timeout)
            self._threads.discard(thread)

    def stop_all(self) -> None:
        for thread in list(self._threads):  # each ends: its consumer is closed
            self.stop(thread)
