"""Dispatch never waits for the disk (broker.dispatch.entry_loader, dispatcher rule 2).

A real ledger holds the entries; ``GatedSource`` decides which of them count as cached and keeps
every disk read pending until the test completes (or fails) it, the way a slow read in a disk
thread would. The scheduler is manual, so each step of the event loop is explicit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.dispatch.consumer import Consumer
from broker.dispatch.entry_loader import DISK_READ_BATCHES, ON_DISK, RETRY_DELAY_S, EntryLoader
from broker.dispatch.subscription import DispatchLimits, Subscription
from broker.storage import Ledger, LedgerConfig, Position
from protocol.enums import InitialPosition, SubType
from tests.broker.dispatch.harness import FakeSink, Handle, LedgerSource, ManualScheduler
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

Entries = list[tuple[Position, bytes]]


@dataclass
class DiskRead:
    position: Position
    max_entries: int
    future: Future[Entries]


class GatedSource(LedgerSource):
    """Entries in ``cached`` are in memory; every other read waits in ``reads``."""

    def __init__(self, ledger: Ledger, scheduler: ManualScheduler) -> None:
        super().__init__(ledger, scheduler)
        self.cached: set[Position] = set()
        self.reads: list[DiskRead] = []

    def read_cached(self, position: Position, max_entries: int, max_bytes: int) -> Entries | None:
        found = self.ledger.read(position, max_entries, max_bytes)
        hits = 0
        while hits < len(found) and found[hits][0] in self.cached:
            hits += 1
        return found[:hits] if hits or not found else None

    def read_from_disk(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> Future[Entries]:
        future: Future[Entries] = Future()
        self.reads.append(DiskRead(position, max_entries, future))
        return future

    def complete(self) -> DiskRead:
        read = self.reads.pop(0)
        read.future.set_result(self.ledger.read(read.position, read.max_entries))
        return read


class DelayScheduler(ManualScheduler):
    """Also remembers the delay of every timer."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        self.delays.append(delay)
        return super().call_later(delay, callback)


class World:
    def __init__(self, directory: Path, entries: int) -> None:
        self.ledger = Ledger.open(
            directory,
            LedgerConfig(preallocate_bytes=0, max_entries_per_ledger=60),
            file_layer=NoSyncLayer(),
            preallocator=InlineExecutor(),
        )
        self.positions = [self.ledger.append(b"n=1") for _ in range(entries)]
        self.ledger.flush()
        self.scheduler = DelayScheduler()
        self.source = GatedSource(self.ledger, self.scheduler)
        cursor = self.ledger.open_cursor("sub", InitialPosition.Earliest)
        self.sub = Subscription("sub", cursor, self.source, self.scheduler, DispatchLimits())
        self.sink = FakeSink()

    def consumer(self, permits: int, sub_type: SubType = SubType.Exclusive) -> Consumer:
        consumer = Consumer(len(self.sub.consumers), "c", self.sink)
        self.sub.add_consumer(consumer, sub_type)
        self.sub.add_permits(consumer, permits)
        self.scheduler.run()
        return consumer

    def sent(self) -> list[Position]:
        return [s.position for s in self.sink.sent]

    def run(self) -> None:
        self.scheduler.run()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    created = World(tmp_path / "topic", entries=150)
    yield created
    created.sub.close()
    created.ledger.close()


def test_a_tailing_consumer_is_served_from_memory_without_any_disk_read(world: World) -> None:
    world.source.cached = set(world.positions)
    world.consumer(permits=1000)
    assert world.sent() == world.positions
    assert world.source.reads == []


def test_cold_entries_are_read_off_the_loop_one_read_at_a_time_and_sent_in_order(
    world: World,
) -> None:
    consumer = world.consumer(permits=120)
    assert world.sent() == []  # nothing waited for the disk: the read is pending
    assert [(r.position, r.max_entries) for r in world.source.reads] == [(world.positions[0], 120)]
    world.sub.add_permits(consumer, 1000)  # more dispatch passes while the read is in flight
    world.sub.schedule_dispatch()
    world.run()
    assert len(world.source.reads) == 1  # at most one read in flight
    world.source.complete()
    world.run()
    assert world.sent() == world.positions[:120]
    assert [r.position for r in world.source.reads] == [world.positions[120]]
    world.source.complete()
    world.run()
    assert world.sent() == world.positions
    assert world.source.reads == []


def test_a_disk_read_spans_several_dispatch_batches_yet_a_pass_sends_one_batch_in_one_run(
    world: World,
) -> None:
    world.consumer(permits=5000)
    assert [r.max_entries for r in world.source.reads] == [100 * DISK_READ_BATCHES]
    world.source.complete()
    world.run()
    assert world.sent() == world.positions
    assert world.sink.runs == [100, 50]  # one batch per turn (issue #24), one write each
    assert world.source.reads == []


def test_a_disk_read_asks_for_no_more_entries_than_the_consumer_has_permits(
    world: World,
) -> None:
    world.consumer(permits=7)
    assert [r.max_entries for r in world.source.reads] == [7]
    world.source.complete()
    world.run()
    assert world.sent() == world.positions[:7]
    assert world.source.reads == []  # no permits left: no read


def test_a_seek_during_a_cold_read_drops_its_result(world: World) -> None:
    world.consumer(permits=1000)
    stale = world.source.reads[0]
    world.sub.disconnect_all()
    target = world.positions[120]
    world.sub.reset_to(target)
    world.consumer(permits=1000)
    assert world.source.reads == [stale]  # the new read waits for the stale one to end
    world.source.complete()
    world.run()
    assert world.sent() == []  # entries 0..99 of the stale read were dropped
    assert [r.position for r in world.source.reads] == [target]
    world.source.complete()
    world.run()
    assert world.sent() == world.positions[120:]


def test_a_close_during_a_cold_read_sends_nothing_and_reads_no_more(world: World) -> None:
    world.consumer(permits=1000)
    world.sub.close()
    world.source.complete()
    world.run()
    assert world.sent() == []
    assert world.source.reads == []


def test_a_failed_read_is_logged_and_retried_and_nothing_is_skipped(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.consumer(permits=1000)
    with caplog.at_level(logging.ERROR, logger="broker.dispatch.entry_loader"):
        world.source.reads.pop(0).future.set_exception(OSError(5, "Input/output error"))
    assert "reading from 1:0 failed" in caplog.text
    assert world.scheduler.delays[-1] == RETRY_DELAY_S
    world.run()  # the retry timer fires
    assert [r.position for r in world.source.reads] == [world.positions[0]]
    world.source.complete()
    world.run()
    assert world.sent()[:100] == world.positions[:100]


def test_redelivered_cold_entries_go_out_before_newer_cached_ones(world: World) -> None:
    """Exclusive order (dispatcher rule 1): the replay waits for its disk read; nothing
    overtakes it."""
    world.source.cached = set(world.positions[:10])
    consumer = world.consumer(permits=10)
    assert world.sent() == world.positions[:10]
    world.source.cached = set(world.positions[10:])  # the first ten were evicted meanwhile
    world.sub.redeliver(consumer, None)
    world.sub.add_permits(consumer, 1000)
    world.run()
    assert world.sent() == world.positions[:10]  # waiting for the replay's read
    assert [r.position for r in world.source.reads] == [world.positions[0]]
    world.source.complete()
    world.run()
    assert world.sent() == world.positions[:10] + world.positions


def test_a_redelivered_entry_that_was_trimmed_is_dropped_without_another_read(
    world: World,
) -> None:
    world.source.cached = set(world.positions[:10])
    consumer = world.consumer(permits=10)
    world.source.cached = set()
    world.sub.redeliver(consumer, [world.positions[3]])
    world.sub.add_permits(consumer, 1)
    world.run()
    read = world.source.reads.pop(0)
    assert read.position == world.positions[3]
    # The disk read answers from the first entry still stored: position 3 is gone.
    read.future.set_result(world.ledger.read(world.positions[4], 1))
    world.run()
    assert world.sent() == world.positions[:10]  # nothing redelivered ...
    assert [r.position for r in world.source.reads] == [world.positions[10]]  # ... and onwards


def test_the_loader_keeps_nothing_of_a_read_that_ended_after_invalidate(world: World) -> None:
    loaded: list[str] = []
    loader = EntryLoader(
        "direct",
        world.source,
        world.scheduler,
        lambda: loaded.append("dispatch"),
        lambda: 50,
        max_entries=100,
        max_bytes=1 << 20,
    )
    assert loader.entry(world.positions[5]) is ON_DISK
    loader.invalidate()  # a seek
    assert loader.entry(world.positions[5]) is ON_DISK  # still the one read in flight
    assert len(world.source.reads) == 1
    world.source.complete()
    assert loaded == ["dispatch"]  # dispatch runs again, to read for the new position
    assert loader.entry(world.positions[5]) is ON_DISK  # the stale entries were not kept
    world.source.complete()
    assert loader.entry(world.positions[5]) == b"n=1"
    assert loader.batch(world.positions[5]) == [(p, b"n=1") for p in world.positions[5:55]]
