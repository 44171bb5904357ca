"""The password-check pool: checks run on pool threads, at most ``limit`` pending per broker,
beyond it refused at once; an abandoned check counts until its thread is done with it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from broker.auth.check_pool import CheckQueue, CheckQueueFull
from broker.auth.identity import AuthenticationFailure
from tests.helpers import wait_until_async


async def test_checks_run_off_the_loop_thread() -> None:
    queue = CheckQueue(limit=2)
    thread = await queue.run(lambda: threading.current_thread().name)
    assert thread.startswith("magnetar-auth")
    assert queue.pending == 0


async def test_past_the_limit_a_check_is_refused_at_once() -> None:
    queue = CheckQueue(limit=2)
    gate = threading.Event()
    running = [asyncio.ensure_future(queue.run(gate.wait, 10)) for _ in range(2)]
    await wait_until_async(lambda: queue.pending == 2)  # both submitted
    with pytest.raises(CheckQueueFull) as refused:
        await queue.run(gate.wait, 10)
    assert isinstance(refused.value, AuthenticationFailure)  # answered as a failed login
    gate.set()
    assert await asyncio.gather(*running) == [True, True]
    assert queue.pending == 0
    assert await queue.run(lambda: "again") == "again"


async def test_an_abandoned_check_holds_its_place_until_its_thread_is_done() -> None:
    queue = CheckQueue(limit=1)
    gate, started = threading.Event(), threading.Event()

    def check() -> bool:
        started.set()
        return gate.wait(10)

    task = asyncio.ensure_future(queue.run(check))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()  # the connection went away; the thread still hashes
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.pending == 1
    with pytest.raises(CheckQueueFull):
        await queue.run(check)
    gate.set()
    async with asyncio.timeout(10):
        while queue.pending:  # noqa: ASYNC110 - released from the pool thread, no event
            await asyncio.sleep(0.005)
