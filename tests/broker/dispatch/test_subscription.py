"""Subscription (broker.dispatch.subscription): the rules it keeps as coordinator, over a real
ledger (``harness``): cumulative acks are refused on Shared subscriptions, and the cursor is the
only durable state (R9: restart, crash, close, the persist limit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import NotAllowed
from broker.storage import LedgerConfig
from protocol.enums import SubType
from tests.broker.dispatch.harness import Harness, ack_set

# --------------------------------------------------------------------------- cumulative


def test_cumulative_ack_is_refused_on_shared_subscriptions(world: Harness) -> None:
    (entry,) = world.publish(2)
    world.consumer(SubType.Shared)
    with pytest.raises(NotAllowed):
        world.sub.acknowledge_cumulative(None, entry, None)


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
