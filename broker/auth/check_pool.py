"""Credential checks that cost CPU (bcrypt, APR1) run here, never on the event loop.

A bcrypt check costs 50-250 ms of CPU: on the loop, every producer, consumer, health check and
(in cluster mode) the etcd lease refresh would wait for it, and a flood of CONNECTs with wrong
passwords would stall the broker. So checks go to a small process-wide pool (bcrypt releases
the GIL while it hashes, so the loop keeps running), and each broker admits a bounded number of
checks at once: past ``MAX_PENDING_CHECKS`` queued or running, a new one is refused at once
(``CheckQueueFull``, an authentication failure) instead of queueing without end. A check whose
requester went away (connection closed) still counts until its thread is done with it, so
abandoned checks cannot pile up behind the limit either.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from broker.auth.identity import AuthenticationFailure
from broker.blocking import LazyPool

__all__ = ["CHECK_THREADS", "MAX_PENDING_CHECKS", "CheckQueue", "CheckQueueFull"]

R = TypeVar("R")

#: Threads for password checks, for the whole process: two cores are shared with the loop.
CHECK_THREADS = 2
#: Checks one broker admits at once (queued or running); beyond it, refused at once.
MAX_PENDING_CHECKS = 16

_check_executor = LazyPool(CHECK_THREADS, "magnetar-auth")


class CheckQueueFull(AuthenticationFailure):
    """Too many password checks are pending: refused without checking."""


class CheckQueue:
    """One broker's bounded share of the check pool."""

    def __init__(self, limit: int = MAX_PENDING_CHECKS) -> None:
        self.limit = limit
        self._pending = 0
        self._lock = threading.Lock()  # released from pool threads

    @property
    def pending(self) -> int:
        return self._pending

    async def run(self, fn: Callable[..., R], /, *args: Any) -> R:
        """``fn(*args)`` on a check thread.

        Raises:
            CheckQueueFull: ``limit`` checks are already pending.
        """
        with self._lock:
            if self._pending >= self.limit:
                raise CheckQueueFull(f"{self._pending} password checks pending; refused unchecked")
            self._pending += 1
        job = _check_executor().submit(functools.partial(fn, *args))
        job.add_done_callback(self._release)  # when the thread is done, or the job cancelled
        return await asyncio.wrap_future(job)

    def _release(self, _job: Future[Any]) -> None:
        with self._lock:
            self._pending -= 1
