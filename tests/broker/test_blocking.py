"""broker.blocking: disk work runs on the bounded disk pool while the event loop keeps going."""

from __future__ import annotations

import asyncio
import threading

import pytest

from broker.blocking import DISK_THREADS, run_blocking, submit_blocking


def _thread_name() -> str:
    return threading.current_thread().name


async def test_run_blocking_runs_the_call_on_a_disk_thread() -> None:
    name = await run_blocking(_thread_name)
    assert name.startswith("magnetar-disk")
    assert name != threading.current_thread().name
    assert await run_blocking(divmod, 7, 2) == (3, 1)
    assert await run_blocking(int, "ff", base=16) == 255


async def test_errors_reach_the_awaiting_coroutine() -> None:
    def fail() -> None:
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        await run_blocking(fail)


async def test_the_loop_keeps_running_while_the_disk_is_busy() -> None:
    """The blocked call can only finish because the loop keeps running: the loop itself opens
    the gate it waits on."""
    gate = threading.Event()
    blocked = submit_blocking(gate.wait, 10)
    ticks = 0
    while not blocked.done():
        ticks += 1
        if ticks == 3:
            asyncio.get_running_loop().call_soon(gate.set)
        await asyncio.sleep(0.001)
    assert blocked.result() is True
    assert ticks >= 3


async def test_at_most_disk_threads_calls_run_at_once() -> None:
    running, peak = 0, 0
    lock = threading.Lock()
    release = threading.Event()

    def job() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(10)
        with lock:
            running -= 1

    jobs = [submit_blocking(job) for _ in range(DISK_THREADS + 3)]
    while True:
        with lock:
            if running == DISK_THREADS:
                break
        await asyncio.sleep(0.001)
    release.set()
    await asyncio.gather(*jobs)
    assert peak == DISK_THREADS
