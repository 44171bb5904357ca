"""Idle loaded topics are cheap (issue #26 item 5): no descriptor, no task, bounded memory.

A topic is loaded by a producer that attaches and closes, as ``bench/scenarios_scale.py``'s
``idle`` figure does with 100,000 of them. Measured in-process (``BrokerThread``): descriptors
from /proc/self/fd, Python memory with tracemalloc (what the topics allocate, not the RSS).
"""

from __future__ import annotations

import asyncio
import gc
import os
import tracemalloc
from pathlib import Path

from broker.topics.housekeeping import Housekeeping
from broker.topics.topic import Topic
from protocol import commands, pb
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY, SubType
from tests.helpers import BrokerThread, broker_config, close_client, new_client, wait_until
from tests.raw_client import RawConnection

T = pb.BaseCommand.Type
#: Python memory per idle topic (tracemalloc), held to the issue's RSS goal of 10 KiB (see
#: bench/README.md). Measured 7.0-7.3 KB, now and then ~9.0 KB (the broker thread runs
#: meanwhile, hence the spread; the bound leaves room for that); 9.7-11.7 KB before the
#: storage locks, cursor sets and maps, the cache's maps and the dedup chunk state became lazy,
#: 15.7 KB before the group commit, key table, locks and sets did.
MAX_BYTES_PER_IDLE_TOPIC = 10 * 1024


def load_idle_topics(port: int, prefix: str, count: int) -> None:
    """PRODUCER then CLOSE_PRODUCER on ``count`` topics, pipelined on one connection."""
    with RawConnection(port, timeout=60) as conn:
        conn.send(commands.connect("idle-test"))
        conn.read_until(lambda frames: any(f.type == T.CONNECTED for f in frames))
        topics = [f"persistent://public/default/{prefix}-{i}" for i in range(count)]
        conn.send(b"".join(commands.producer(t, i, i) for i, t in enumerate(topics)))
        conn.read_until(lambda fs: sum(f.type == T.PRODUCER_SUCCESS for f in fs) == count, 120)
        conn.send(b"".join(commands.close_producer(i, count + i) for i in range(count)))
        conn.read_until(lambda fs: sum(f.type == T.SUCCESS for f in fs) == count, 120)
        assert not [f for f in conn.frames if f.type == T.ERROR]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_idle_topics_hold_no_descriptor(broker: BrokerThread) -> None:
    load_idle_topics(broker.port, "warm", 5)  # the namespace's lock file, the disk pool
    before = open_descriptors()
    load_idle_topics(broker.port, "idle", 300)
    assert broker.broker is not None
    assert len(broker.broker.service.topics) == 305
    assert open_descriptors() - before <= 3  # not one per topic (the ledger lock was)


def test_one_housekeeping_task_for_all_topics(broker: BrokerThread) -> None:
    load_idle_topics(broker.port, "idle", 100)

    async def task_names() -> list[str]:
        return [task.get_name() for task in asyncio.all_tasks()]

    names = broker.call(task_names)
    assert names.count("housekeeping") == 1


def lazy_parts(topic: Topic) -> dict[str, bool]:
    """Which of the parts an idle topic must not hold exist (True: made)."""
    window = topic.idempotency
    assert window is not None
    return {
        "group commit": topic.publisher._commit is not None,
        "key table": not window._shared,  # still the shared empty table
        "cursor lock": topic.publisher._cursor_io is not None,
        "producer set": isinstance(topic.producers.producers, set),
    }


def test_an_idle_topic_holds_no_flush_task_key_table_lock_or_set(broker: BrokerThread) -> None:
    """Made by first use, not by loading: a SEND starts the group commit (and, with a key,
    makes the key table); the other idle topics stay as they were."""
    load_idle_topics(broker.port, "idle", 20)
    assert broker.broker is not None
    topics = broker.broker.service.topics
    idle = [topics[f"persistent://public/default/idle-{i}"] for i in range(20)]
    nothing = dict.fromkeys(("group commit", "key table", "cursor lock", "producer set"), False)
    assert all(lazy_parts(topic) == nothing for topic in idle)

    async def flush_tasks() -> list[str]:
        return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("flush ")]

    assert broker.call(flush_tasks) == []
    client = new_client(broker.url)
    try:
        producer = client.create_producer(idle[0].name.full_name, batching_enabled=False)
        producer.send(b"first", properties={IDEMPOTENCY_KEY_PROPERTY: "k-1"})
        assert lazy_parts(idle[0]) == {
            **nothing,
            "group commit": True,
            "key table": True,
            "producer set": True,
        }
        assert idle[0].idempotency is not None
        assert idle[0].idempotency.original_of("k-1") is not None
        producer.close()
    finally:
        close_client(client)
    assert broker.call(flush_tasks) == [f"flush {idle[0].name.full_name}"]
    assert not isinstance(idle[0].producers.producers, set)  # the last one left: no set
    assert all(lazy_parts(topic) == nothing for topic in idle[1:])


def test_memory_per_idle_topic_is_bounded(broker: BrokerThread) -> None:
    load_idle_topics(broker.port, "warm", 20)  # first-use allocations: caches, pools, imports
    count = 1000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        load_idle_topics(broker.port, "idle", count)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    per_topic = grown / count
    assert per_topic <= MAX_BYTES_PER_IDLE_TOPIC, f"{per_topic:.0f} bytes per idle topic"


def test_a_cursor_change_on_a_quiet_topic_brings_its_housekeeping_back(tmp_path: Path) -> None:
    """A quiet topic is visited every 16 s at most; an admin reset of a subscription without
    consumers must still be persisted within the cursor-persist interval."""
    config = broker_config(tmp_path / "data", managed_ledger_cursor_persist_interval_ms=50)
    running = BrokerThread(config).start()
    try:
        name = "persistent://public/default/quiet"
        with RawConnection(running.port) as conn:
            conn.send(commands.connect("quiet-test"))
            conn.read_until(lambda frames: any(f.type == T.CONNECTED for f in frames))
            conn.send(commands.subscribe(name, "sub", 1, 1, SubType.Exclusive))
            conn.read_until(lambda frames: any(f.type == T.SUCCESS for f in frames))
        assert running.broker is not None
        assert running.loop is not None
        topic = running.broker.service.topics[name]
        keeper = Housekeeping.for_loop(running.loop)
        wait_until(lambda: not topic.subscriptions["sub"].consumers)
        wait_until(lambda: (keeper.period_of(topic) or 0) >= 4 * topic.housekeeping_period)
        cursor = topic.subscriptions["sub"].cursor

        async def touch() -> float | None:
            cursor.mark_delete(cursor.mark_delete_position, {"touched": 1})
            return keeper.period_of(topic)

        assert running.call(touch) == topic.housekeeping_period
        wait_until(lambda: not cursor.dirty, timeout=2)
    finally:
        running.stop()
