"""Subscription dispatch and PIP-54 batch-index acks over a real ledger, with a fake sink.

The harness here (``Harness``: a real ``Ledger`` in ``tmp_path``, an ``EntrySource`` over it,
a manual scheduler and list-backed sinks) is shared with ``test_subscription_props.py``.
Entries are opaque to the subscription except through ``EntrySource.entry_metadata``, so the
stored bytes simply name their batch size (``b"n=10"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.dispatch.consumer import Consumer
from broker.dispatch.subscription import DispatchLimits, Subscription, SubType, unacked_indexes
from broker.errors import NotAllowed
from broker.storage import InitialPosition, Ledger, LedgerConfig, Position
from broker.storage.cursor_file import decode_cursor_state
from broker.storage.cursor_registry import CURSOR_DIR, cursor_file_stem
from broker.storage.files import read_file
from protocol.metadata import EntryMetadata
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

SUB = "sub"
_U64 = 1 << 64

# --------------------------------------------------------------------------- bit sets


def ack_set(size: int, unacked: Iterable[int]) -> list[int]:
    """Java BitSet words (signed int64, as on the wire) with the ``unacked`` bits set."""
    words = [0] * ((size + 63) // 64)
    for index in unacked:
        words[index // 64] |= 1 << (index % 64)
    return [w - _U64 if w >= 1 << 63 else w for w in words]


def clearing(size: int, acked: Iterable[int]) -> list[int]:
    """The ack set a client sends after acknowledging ``acked`` of a batch of ``size``."""
    done = set(acked)
    return ack_set(size, (i for i in range(size) if i not in done))


def indexes_of(words: list[int] | None, size: int) -> set[int]:
    """Indexes a client delivers for a MESSAGE with ``words`` (None/empty = all of them)."""
    if not words:
        return set(range(size))
    return {i for i in range(size) if i // 64 < len(words) and (words[i // 64] >> (i % 64)) & 1}


# --------------------------------------------------------------------------- harness


@dataclass
class Sent:
    consumer_id: int
    position: Position
    redelivery_count: int
    ack_set: list[int] | None


@dataclass
class FakeSink:
    """A connection that records what the dispatcher sends."""

    sent: list[Sent] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    writable: bool = True

    def send_message(
        self,
        consumer_id: int,
        position: Position,
        entry: bytes,
        redelivery_count: int,
        ack_set: list[int] | None,
    ) -> None:
        self.sent.append(
            Sent(consumer_id, position, redelivery_count, None if ack_set is None else ack_set)
        )

    def is_writable(self) -> bool:
        return self.writable

    def close_consumer(self, consumer_id: int) -> None:
        self.closed.append(consumer_id)

    def active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        pass


class _Handle:
    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """``call_later`` queues; ``run`` executes everything queued (delays are ignored)."""

    def __init__(self) -> None:
        self.queue: list[_Handle] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Handle:
        handle = _Handle(callback)
        self.queue.append(handle)
        return handle

    def run(self) -> None:
        while self.queue:
            handle = self.queue.pop(0)
            if not handle.cancelled:
                handle.callback()


class LedgerSource:
    """``EntrySource`` over a real ledger; an entry ``b"n=N"`` is a batch of N messages.

    A disk read completes in a later scheduler turn, as a read in a worker thread would."""

    def __init__(self, ledger: Ledger, scheduler: ManualScheduler) -> None:
        self.ledger = ledger
        self.scheduler = scheduler

    def read_cached(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> list[tuple[Position, bytes]] | None:
        return self.ledger.read_cached(position, max_entries, max_bytes)

    def read_from_disk(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> Future[list[tuple[Position, bytes]]]:
        future: Future[list[tuple[Position, bytes]]] = Future()
        self.scheduler.call_later(
            0, lambda: future.set_result(self.ledger.read(position, max_entries, max_bytes))
        )
        return future

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata:
        size = int(entry.decode().removeprefix("n="))
        return EntryMetadata(
            producer_name="p",
            sequence_id=position.entry_id,
            highest_sequence_id=None,
            num_messages=size,
            is_batch=size > 1,
            publish_time=0,
            partition_key=None,
            ordering_key=None,
            deliver_at_time=None,
            event_time=None,
        )

    def next_position(self, position: Position) -> Position:
        return self.ledger.next_position(position)

    def last_confirmed_position(self) -> Position:
        last = self.ledger.last_confirmed_position
        return last if last is not None else self.ledger.before_first_position()


class Harness:
    """A ledger, one durable subscription over it, and helpers to drive it like a client."""

    def __init__(
        self,
        directory: Path,
        *,
        batch_index_ack: bool = True,
        config: LedgerConfig | None = None,
    ) -> None:
        self.directory = directory
        self.config = config or LedgerConfig(preallocate_bytes=0)
        self.limits = DispatchLimits(batch_index_ack=batch_index_ack)
        self.scheduler = ManualScheduler()
        self.sizes: dict[Position, int] = {}
        self._open()

    def _open(self) -> None:
        self.ledger = Ledger.open(
            self.directory, self.config, file_layer=NoSyncLayer(), preallocator=InlineExecutor()
        )
        cursor = self.ledger.open_cursor(SUB, InitialPosition.EARLIEST)
        source = LedgerSource(self.ledger, self.scheduler)
        self.sub = Subscription(SUB, cursor, source, self.scheduler, self.limits)

    def publish(self, *sizes: int) -> list[Position]:
        positions = [self.ledger.append(f"n={size}".encode()) for size in sizes]
        self.ledger.flush()
        for position, size in zip(positions, sizes, strict=True):
            self.sizes[position] = size
        self.sub.schedule_dispatch()
        self.run()
        return positions

    def consumer(
        self,
        sub_type: SubType = SubType.Shared,
        permits: int = 1000,
        *,
        returns_permits_for_skipped: bool = True,
        consumer_id: int = 0,
    ) -> tuple[Consumer, FakeSink]:
        sink = FakeSink()
        consumer = Consumer(
            consumer_id,
            f"c{consumer_id}",
            sink,
            returns_permits_for_skipped=returns_permits_for_skipped,
        )
        self.sub.add_consumer(consumer, sub_type)
        self.sub.add_permits(consumer, permits)
        self.run()
        return consumer, sink

    def run(self) -> None:
        self.scheduler.run()

    def ack(self, position: Position, acked: Iterable[int] | None = None) -> None:
        """Individual ack of the whole entry, or (PIP-54) of the ``acked`` indexes."""
        words = None if acked is None else clearing(self.sizes[position], acked)
        self.sub.acknowledge(None, [(position, words)])
        self.run()

    def ack_cumulative(self, position: Position, index: int | None = None) -> None:
        """Cumulative ack through ``position`` (through its ``index`` if given, PIP-54)."""
        size = self.sizes[position]
        words = None
        if index is not None and index < size - 1:
            words = clearing(size, range(index + 1))
        self.sub.acknowledge_cumulative(None, position, words)
        self.run()

    def restart(self) -> None:
        """Clean restart: the ledger closes (persisting the cursor) and everything reopens."""
        self.sub.close()
        self.ledger.close()
        self._open()

    def crash(self) -> None:
        """SIGKILL: nothing is persisted beyond what already was; everything reopens."""
        self.scheduler.queue.clear()  # the dead process's pending dispatches die with it
        self.ledger._abandon()
        self._open()

    def cursor_file_batches(self) -> dict[Position, list[int]]:
        path = self.directory / CURSOR_DIR / (cursor_file_stem(SUB) + ".cursor")
        return decode_cursor_state(read_file(path), path).batch

    def delivered(self, sent: Sent) -> set[int]:
        return indexes_of(sent.ack_set, self.sizes[sent.position])

    def close(self) -> None:
        self.sub.close()
        self.ledger.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterable[Harness]:
    harness = Harness(tmp_path / "topic")
    yield harness
    harness.close()


def consumer_stats(sub: Subscription, name: str) -> dict[str, object]:
    consumers = sub.describe()["consumers"]
    assert isinstance(consumers, list)
    found = [c for c in consumers if c["consumerName"] == name]
    assert len(found) == 1
    result: dict[str, object] = found[0]
    return result


# --------------------------------------------------------------------------- unacked_indexes


def test_unacked_indexes_counts_set_bits_within_the_batch_only() -> None:
    assert unacked_indexes(ack_set(10, {1, 5, 9}), 10) == 3
    assert unacked_indexes(ack_set(70, {0, 63, 64, 69}), 70) == 4
    # Bit 63 makes the first word negative on the wire; it still counts.
    assert ack_set(64, {63})[0] < 0
    assert unacked_indexes(ack_set(64, {63}), 64) == 1
    # Stray bits past the batch size are ignored (a client cannot enlarge an entry).
    assert unacked_indexes(ack_set(128, {3, 100}), 10) == 1
    assert unacked_indexes([], 10) == 0


# --------------------------------------------------------------------------- dispatch with ack_set


def test_partially_acked_batch_is_redelivered_with_its_ack_set_to_another_consumer(
    world: Harness,
) -> None:
    (entry,) = world.publish(10)
    first, first_sink = world.consumer(consumer_id=1)
    assert [s.ack_set for s in first_sink.sent] == [None]
    world.ack(entry, range(7))
    world.sub.remove_consumer(first)
    second, second_sink = world.consumer(consumer_id=2)
    (redelivered,) = second_sink.sent
    assert redelivered.position == entry
    assert redelivered.ack_set == ack_set(10, {7, 8, 9})
    assert redelivered.redelivery_count == 1
    assert second.unacked_messages == 3


def test_redelivery_after_negative_ack_carries_ack_set_and_count(world: Harness) -> None:
    (entry,) = world.publish(4)
    consumer, sink = world.consumer()
    world.ack(entry, [0, 2])
    world.sub.redeliver(consumer, [entry])
    world.run()
    assert [(s.ack_set, s.redelivery_count) for s in sink.sent] == [
        (None, 0),
        (ack_set(4, {1, 3}), 1),
    ]


def test_acked_indexes_are_never_resurrected_by_an_older_ack_set(world: Harness) -> None:
    """Pulsar #18042: a late, less complete ack set must not roll the held one back."""
    (entry,) = world.publish(8)
    consumer, sink = world.consumer()
    world.ack(entry, [0, 1, 2])
    world.ack(entry, [0])  # stale: only index 0 cleared
    assert world.sub.cursor.batch_ack_set(entry) == ack_set(8, range(3, 8))
    world.sub.redeliver(consumer, None)
    world.run()
    assert world.delivered(sink.sent[-1]) == set(range(3, 8))


def test_fully_acked_batch_becomes_an_entry_ack_and_moves_the_mark_delete(world: Harness) -> None:
    first, second = world.publish(3, 3)
    world.consumer()
    world.ack(first, [0, 2])
    assert world.sub.cursor.mark_delete_position < first
    world.ack(first, [1])
    assert world.sub.cursor.mark_delete_position == first
    assert world.sub.cursor.batch_ack_set(first) is None
    world.ack(second)
    assert world.sub.cursor.mark_delete_position == second
    assert world.sub.backlog() == 0


def test_stray_bits_past_the_batch_do_not_keep_an_acked_entry_alive(world: Harness) -> None:
    (entry,) = world.publish(3)
    consumer, _ = world.consumer()
    world.sub.acknowledge(None, [(entry, ack_set(64, {40}))])
    world.run()
    assert world.sub.cursor.is_deleted(entry)
    assert consumer.unacked_messages == 0


def test_acks_of_positions_past_the_end_are_ignored(world: Harness) -> None:
    (entry,) = world.publish(2)
    world.consumer(SubType.Exclusive)
    beyond = Position(entry.ledger_id, entry.entry_id + 5)
    world.sub.acknowledge(None, [(beyond, None), (beyond, ack_set(2, {1}))])
    world.sub.acknowledge_cumulative(None, beyond, None)
    world.run()
    assert world.sub.cursor.mark_delete_position < entry


# --------------------------------------------------------------------------- cumulative


def test_cumulative_ack_inside_a_batch_acks_earlier_entries_fully_and_the_batch_partially(
    world: Harness,
) -> None:
    """B2 at unit level: cumulative at index 49 of a 100-message batch."""
    before, batch = world.publish(5, 100)
    consumer, _ = world.consumer(SubType.Exclusive)
    world.ack_cumulative(batch, 49)
    assert world.sub.cursor.mark_delete_position == before
    assert consumer.unacked_messages == 50
    world.sub.remove_consumer(consumer)
    _, sink = world.consumer(SubType.Exclusive, consumer_id=1)
    (again,) = sink.sent
    assert again.position == batch
    assert world.delivered(again) == set(range(50, 100))


def test_cumulative_ack_is_refused_on_shared_subscriptions(world: Harness) -> None:
    (entry,) = world.publish(2)
    world.consumer(SubType.Shared)
    with pytest.raises(NotAllowed):
        world.sub.acknowledge_cumulative(None, entry, None)


def test_cumulative_acks_of_every_index_in_turn_end_fully_acked(world: Harness) -> None:
    """B3: a cumulative ack per message, as a 1 ms ack-grouping client sends them."""
    entries = world.publish(10, 10)
    world.consumer(SubType.Exclusive)
    for entry in entries:
        for index in range(10):
            world.ack_cumulative(entry, index)
    assert world.sub.cursor.mark_delete_position == entries[-1]
    assert world.sub.backlog() == 0
    assert world.sub.unacked_count() == 0


# --------------------------------------------------------------------------- flag off (B5)


def test_flag_off_ignores_partial_acks_and_redelivers_whole_batches(tmp_path: Path) -> None:
    world = Harness(tmp_path / "topic", batch_index_ack=False)
    try:
        (entry,) = world.publish(100)
        consumer, sink = world.consumer()
        world.ack(entry, range(0, 100, 2))
        assert world.sub.cursor.batch_ack_set(entry) is None
        world.sub.redeliver(consumer, None)
        world.run()
        assert [s.ack_set for s in sink.sent] == [None, None]
        assert world.delivered(sink.sent[-1]) == set(range(100))
        world.ack(entry)  # a whole-entry ack still counts
        assert world.sub.cursor.is_deleted(entry)
    finally:
        world.close()


def test_flag_off_cumulative_inside_a_batch_stops_before_it(tmp_path: Path) -> None:
    world = Harness(tmp_path / "topic", batch_index_ack=False)
    try:
        before, batch = world.publish(3, 100)
        consumer, _ = world.consumer(SubType.Exclusive)
        world.ack_cumulative(batch, 49)
        assert world.sub.cursor.mark_delete_position == before
        world.sub.remove_consumer(consumer)
        _, sink = world.consumer(SubType.Exclusive, consumer_id=1)
        assert [(s.position, s.ack_set) for s in sink.sent] == [(batch, None)]
    finally:
        world.close()


def test_flag_off_does_not_send_ack_sets_held_from_an_earlier_run(tmp_path: Path) -> None:
    directory = tmp_path / "topic"
    world = Harness(directory)
    (entry,) = world.publish(4)
    world.consumer()
    world.ack(entry, [0])
    world.close()
    world = Harness(directory, batch_index_ack=False)
    try:
        world.sizes[entry] = 4
        _, sink = world.consumer()
        assert [(s.position, s.ack_set) for s in sink.sent] == [(entry, None)]
    finally:
        world.close()


# --------------------------------------------------------------------------- permits (B4)


def _return_permits(world: Harness, consumer: Consumer, sink: FakeSink, start: int) -> None:
    """What the C++ client does: one permit per index of every batch, skipped ones included."""
    for sent in sink.sent[start:]:
        world.sub.add_permits(consumer, world.sizes[sent.position])
    world.run()


@pytest.mark.parametrize("remaining", [3, 1])
def test_partial_batch_redelivery_keeps_permits_and_unacked_balanced(
    world: Harness, remaining: int
) -> None:
    """B4 (testPartialBatchRedeliveryKeepsSharedPermitBalance) with a queue of 1."""
    (entry,) = world.publish(10)
    first, first_sink = world.consumer(permits=1, consumer_id=1)
    _return_permits(world, first, first_sink, 0)
    world.ack(entry, range(10 - remaining))
    world.sub.remove_consumer(first)
    replacement, sink = world.consumer(permits=1, consumer_id=2)
    (again,) = sink.sent
    assert world.delivered(again) == set(range(10 - remaining, 10))
    assert consumer_stats(world.sub, "c2")["unackedMessages"] == remaining
    _return_permits(world, replacement, sink, 0)
    acked = set(range(10 - remaining))
    for index in range(10 - remaining, 10):
        acked.add(index)
        world.ack(entry, acked)
    assert consumer_stats(world.sub, "c2")["availablePermits"] == 1
    assert consumer_stats(world.sub, "c2")["unackedMessages"] == 0
    (following,) = world.publish(1)
    assert sink.sent[-1].position == following


def test_java_style_client_is_charged_only_the_unacked_indexes(world: Harness) -> None:
    (entry,) = world.publish(10)
    first, _ = world.consumer(permits=10, consumer_id=1)
    world.ack(entry, range(6))
    world.sub.remove_consumer(first)
    java, sink = world.consumer(permits=4, returns_permits_for_skipped=False, consumer_id=2)
    assert len(sink.sent) == 1
    assert java.permits == 0
    assert java.unacked_messages == 4


def test_delivery_does_not_stall_when_every_batch_is_partially_acked(world: Harness) -> None:
    """Many partially acked batches, a queue of 2: all of them still reach the consumer."""
    entries = world.publish(*[5] * 20)
    helper, helper_sink = world.consumer(permits=1000, consumer_id=1)
    for entry in entries:
        world.ack(entry, [0, 2, 4])
    world.sub.remove_consumer(helper)
    consumer, sink = world.consumer(permits=2, consumer_id=2)
    seen = 0
    while seen < len(sink.sent):
        for sent in sink.sent[seen:]:
            assert world.delivered(sent) == {1, 3}
            world.ack(sent.position)
        seen_now = len(sink.sent)
        _return_permits(world, consumer, sink, seen)
        seen = seen_now
    assert sorted(s.position for s in sink.sent) == entries
    assert world.sub.backlog() == 0
    assert consumer.unacked_messages == 0
    assert consumer.permits == 2
    assert len(helper_sink.sent) == 20


# --------------------------------------------------------------------------- durability (R9)


def test_partial_acks_survive_a_clean_restart_from_the_cursor_file(world: Harness) -> None:
    """#20585/#26475: the bitmap must come back from storage, not from memory."""
    entries = world.publish(10, 70, 1)
    world.consumer()
    world.ack(entries[0], [1, 3, 5])
    world.ack(entries[1], [0, 63, 64, 69])
    world.restart()
    _, sink = world.consumer(consumer_id=1)
    delivered = {s.position: world.delivered(s) for s in sink.sent}
    assert delivered == {
        entries[0]: set(range(10)) - {1, 3, 5},
        entries[1]: set(range(70)) - {0, 63, 64, 69},
        entries[2]: {0},
    }


def test_a_partial_ack_alone_is_scheduled_for_persistence(world: Harness) -> None:
    """#26498: no whole-entry ack, only a batch-index one; it must still make the cursor dirty
    and be written, exactly (#9504: no stale bits)."""
    (entry,) = world.publish(10)
    world.consumer()
    world.sub.cursor.persist()
    world.ack(entry, [4])
    assert world.sub.cursor.dirty
    assert world.sub.cursor.maybe_persist(now=1e9)
    assert world.cursor_file_batches() == {entry: ack_set(10, set(range(10)) - {4})}


def test_after_a_crash_persisted_acks_hold_and_later_ones_are_redelivered(world: Harness) -> None:
    (entry,) = world.publish(6)
    world.consumer()
    world.ack(entry, [0, 1])
    world.sub.cursor.persist()
    world.ack(entry, [2])  # not persisted before the "SIGKILL"
    world.crash()
    _, sink = world.consumer(consumer_id=1)
    (again,) = sink.sent
    assert world.delivered(again) == {2, 3, 4, 5}


def test_close_persists_before_disconnecting_consumers(world: Harness) -> None:
    """#14982: after an unload the reloaded topic must see every ack at once."""
    (entry,) = world.publish(5)
    _, sink = world.consumer(consumer_id=7)
    world.ack(entry, [0, 1, 2])
    world.sub.close()
    assert sink.closed == [7]
    assert world.cursor_file_batches() == {entry: ack_set(5, {3, 4})}
    world.ledger.close()
    world._open()
    _, sink = world.consumer(consumer_id=8)
    assert world.delivered(sink.sent[0]) == {3, 4}


def test_batch_sets_beyond_the_persist_limit_are_redelivered_whole(tmp_path: Path) -> None:
    """managedLedgerMaxBatchDeletedIndexToPersist: the lowest N sets are kept; the others'
    messages come back (at-least-once, never loss)."""
    config = LedgerConfig(preallocate_bytes=0, max_batch_deleted_index_to_persist=2)
    world = Harness(tmp_path / "topic", config=config)
    try:
        entries = world.publish(4, 4, 4, 4)
        world.consumer()
        for entry in entries:
            world.ack(entry, [0])
        world.restart()
        _, sink = world.consumer(consumer_id=1)
        delivered = {s.position: world.delivered(s) for s in sink.sent}
        assert delivered == {
            entries[0]: {1, 2, 3},
            entries[1]: {1, 2, 3},
            entries[2]: {0, 1, 2, 3},
            entries[3]: {0, 1, 2, 3},
        }
    finally:
        world.close()
