"""The one way broker code on the event loop waits for the disk: a bounded pool of disk threads.

Rule: a coroutine or callback on the event loop never calls anything that may touch a file (a
read that misses the entry cache, the first read of a sealed segment, which builds its offset
index, a cursor or metadata write with its fsyncs). It hands the call to ``run_blocking`` (to
await the result) or ``submit_blocking`` (a future, for callback-driven code such as dispatch),
and the loop keeps serving every other connection meanwhile. Storage itself stays synchronous
(``broker/storage`` imports no asyncio); this module is the seam between the two.

Why one pool, and a bounded one: two cores and one disk are shared by every topic, so more
threads than that buys nothing but contention (each worker competes with the event-loop thread
for the GIL). A hundred consumers catching up at once queue here instead of spawning threads.

One deliberate exception: the group-commit flush (``Topic._flush_loop``) runs on asyncio's
default executor, not here. A send receipt waits for exactly one flush, and that flush must
never queue behind cold reads (up to ``dispatcherMaxReadSizeBytes`` each) of consumers that are
catching up; a separate path keeps publish latency independent of read load.

Why not ``aiofiles``: it sends every single file call (open, write, close) to the loop's default
executor as its own round trip and has no ``fsync``, ``pread`` or ``mmap``; our writes go through
``FileLayer`` (the fault-injection seam) and must run as one unit (temp + fsync + rename + dir
fsync). A whole synchronous operation per hop, on one pool, is both simpler and faster.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: Threads doing disk work for the whole process (all brokers and topics in it).
DISK_THREADS = 4


class LazyPool:
    """A process-wide thread pool created on first use (a broker that never needs it, or a
    process that only imports the module, starts no threads)."""

    def __init__(self, threads: int, name: str) -> None:
        self._threads = threads
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __call__(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(
                        self._threads, thread_name_prefix=self._name
                    )
                executor = self._executor
        return executor


#: The process-wide pool for disk work.
disk_executor = LazyPool(DISK_THREADS, "magnetar-disk")


def submit_blocking(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[R]:
    """Start ``fn(*args, **kwargs)`` on a disk thread; the future resolves on the running loop
    (its callbacks run on the loop thread). Call from the event-loop thread."""
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(disk_executor(), functools.partial(fn, *args, **kwargs))


async def run_blocking(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` run on a disk thread, awaited.

    Cancelling the awaiting task does not stop the call (a thread cannot be interrupted): it
    completes, and its result is dropped, exactly as with ``asyncio.to_thread``.
    """
    return await submit_blocking(fn, *args, **kwargs)


async def run_to_completion(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``run_blocking``, except that a cancelled caller still waits for the thread to finish.

    For writes made under a lock that ``close()`` also takes: with ``run_blocking``, a caller
    cancelled there (its connection closed) releases the lock while the thread still writes,
    possibly after the ledger was closed and while a reloaded instance recovers the same folder
    (the session fuzzer saw reloads fail on temp files that vanished under them).
    """
    future = submit_blocking(fn, *args, **kwargs)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise
