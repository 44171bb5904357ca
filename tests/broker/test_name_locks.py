"""broker.name_locks.NameLocks, and the broker's topic load locks under 10k names (issue #24).

A lookup or producer for a topic that does not exist takes the topic's load lock; the locks of
names nobody works on any more must not stay behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.name_locks import NameLocks
from protocol import commands, pb
from tests.helpers import BrokerThread, broker_config
from tests.raw_client import RawSession

T = pb.BaseCommand.Type
NAMES = 10_000
WINDOW = 500  # requests per write: replies are read before the next window is sent


def test_one_holder_per_name_and_nothing_kept_after() -> None:
    async def scenario() -> None:
        locks = NameLocks()
        inside: list[str] = []
        entered = {tag: asyncio.Event() for tag in ("a1", "a2", "b1")}
        release = asyncio.Event()

        async def work(name: str, tag: str) -> None:
            async with locks.hold(name):
                inside.append(tag)
                entered[tag].set()
                await release.wait()
                inside.remove(tag)

        # Started in this order in one loop turn: a2 queues on a's lock before b1 enters.
        tasks = [
            asyncio.create_task(work("a", "a1")),
            asyncio.create_task(work("a", "a2")),
            asyncio.create_task(work("b", "b1")),
        ]
        await entered["a1"].wait()
        await entered["b1"].wait()
        assert sorted(inside) == ["a1", "b1"]  # a2 waits for a1; b does not wait for a
        assert len(locks) == 2
        release.set()
        await asyncio.gather(*tasks)
        assert len(locks) == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    async def scenario() -> None:
        locks = NameLocks()
        async with locks.hold("a"):
            waiter = asyncio.create_task(_enter(locks, "a"))
            await asyncio.sleep(0)  # the waiter queues on the held lock
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert len(locks) == 1  # only the holder
        assert len(locks) == 0
        with pytest.raises(RuntimeError):
            async with locks.hold("b"):
                raise RuntimeError("work failed")
        assert len(locks) == 0

    asyncio.run(scenario())


async def _enter(locks: NameLocks, name: str) -> None:
    async with locks.hold(name):
        pass


@pytest.fixture
def no_auto_creation(tmp_path: Path) -> Iterator[BrokerThread]:
    running = BrokerThread(
        broker_config(tmp_path / "data", allow_auto_topic_creation=False)
    ).start()
    try:
        yield running
    finally:
        running.stop()


def _load_lock_count(running: BrokerThread) -> int:
    async def count() -> int:
        assert running.broker is not None
        assert running.broker.service is not None
        return len(running.broker.service._load_locks)

    return running.call(count)


def test_ten_thousand_unknown_topics_leave_no_load_locks(no_auto_creation: BrokerThread) -> None:
    session = RawSession(no_auto_creation.port, timeout=30)
    try:
        for first in range(0, NAMES, WINDOW):
            ids = range(first, first + WINDOW)
            frames = [
                frame
                for i in ids
                for frame in (
                    commands.lookup(f"persistent://public/default/missing-{i}", 2 * i),
                    commands.producer(f"persistent://public/default/missing-{i}", i, 2 * i + 1),
                    commands.producer(f"persistent://nope/nope/missing-{i}", i, 3 * NAMES + i),
                )
            ]
            session.send(b"".join(frames))
            for i in ids:
                assert session.reply_to(2 * i + 1).type == T.ERROR  # TopicNotFound
                assert session.reply_to(3 * NAMES + i).type == T.ERROR
                session.reply_to(2 * i)
    finally:
        session.close()
    assert _load_lock_count(no_auto_creation) == 0
