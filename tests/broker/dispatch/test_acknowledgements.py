"""Acknowledgements (broker.dispatch.acknowledgements): PIP-54 batch-index acks, cumulative acks
and the batch-index flag off (B5), through a subscription over a real ledger (``harness``)."""

from __future__ import annotations

from pathlib import Path

from broker.dispatch.acknowledgements import unacked_indexes
from broker.storage import Position
from protocol.enums import SubType
from tests.broker.dispatch.harness import Harness, ack_set

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


# --------------------------------------------------------------------------- ack sets


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
