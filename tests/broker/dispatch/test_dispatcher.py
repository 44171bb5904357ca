"""The dispatch loop (broker.dispatch.dispatcher): what goes out with which PIP-54 ack set and
redelivery count, and the permit and unacked accounting (B4), through a subscription over a real
ledger (``harness``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.dispatch.consumer import Consumer
from broker.dispatch.subscription import Subscription
from protocol.enums import SubType
from tests.broker.dispatch.harness import FakeSink, Harness, ack_set

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


def consumer_stats(sub: Subscription, name: str) -> dict[str, object]:
    consumers = sub.describe()["consumers"]
    assert isinstance(consumers, list)
    found = [c for c in consumers if c["consumerName"] == name]
    assert len(found) == 1
    result: dict[str, object] = found[0]
    return result


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


# ------------------------------------------------------------------ one read batch per turn


def test_each_turn_of_the_loop_sends_at_most_one_read_batch(world: Harness) -> None:
    """A consumer with more permits than ``dispatcherMaxReadBatchSize`` gets one read batch
    per scheduled pass, and the next pass is scheduled until its permits or the entries run
    out: the client starts on the first batch while the broker sends the rest."""
    batch = world.limits.max_read_entries
    _, sink = world.consumer(permits=batch * 2 + batch // 2)
    positions = [world.ledger.append(b"n=1") for _ in range(batch * 3)]
    world.ledger.flush()
    world.sub.schedule_dispatch()
    passes = []
    while world.scheduler.queue:
        world.scheduler.queue.pop(0).callback()
        passes.append(len(sink.sent))
    sent_per_pass = [b - a for a, b in zip([0, *passes], passes, strict=False) if b != a]
    assert not world.scheduler.queue
    assert sent_per_pass == [batch, batch, batch // 2]
    assert [s.position for s in sink.sent] == positions[: batch * 2 + batch // 2]


# --------------------------------------------------------------------------- bounded passes


def test_a_pass_replays_one_read_batch_then_schedules_the_next(world: Harness) -> None:
    """Issue #24: a consumer given back thousands of entries gets them again a read batch per
    turn of the loop, in position order, before any new entry."""
    batch = world.limits.max_read_entries
    entries = world.publish(*([1] * (3 * batch + 5)))
    first, _ = world.consumer(consumer_id=1, permits=len(entries))
    world.sub.remove_consumer(first)  # everything goes back for replay
    second, sink = world.consumer(consumer_id=2, permits=0)
    world.sub.add_permits(second, len(entries))
    passes = []
    while world.scheduler.queue:
        before = len(sink.sent)
        world.scheduler.queue.pop(0).callback()
        passes.append(len(sink.sent) - before)
    assert max(passes) == batch
    assert [s.position for s in sink.sent] == entries
    assert {s.redelivery_count for s in sink.sent} == {1}


# ------------------------------------------------------------------ Java's read size per FLOW


@pytest.mark.parametrize("sub_type", [SubType.Exclusive, SubType.Failover])
def test_a_single_active_consumer_gets_min_permits_and_read_batch_entries_per_pass(
    world: Harness, sub_type: SubType
) -> None:
    """Java's single-active-consumer dispatcher (``preciseDispatcherFlowControl`` off) reads
    ``min(permits, dispatcherMaxReadBatchSize)`` entries and sends them whole, so permits
    (messages) go below zero on batches: 3 permits take 3 batches of 10."""
    world.limits.precise_flow_control = False
    consumer, sink = world.consumer(sub_type, permits=3)
    world.publish(*([10] * 8))
    assert len(sink.sent) == 3
    assert consumer.permits == 3 - 30
    assert consumer.unacked_messages == 30
    world.sub.add_permits(consumer, 20)  # still below zero: nothing goes out
    world.run()
    assert len(sink.sent) == 3
    world.sub.add_permits(consumer, 9)  # 2 permits: 2 more entries
    world.run()
    assert len(sink.sent) == 5
    assert consumer.permits == 2 - 20


def test_a_pass_sends_no_more_than_a_read_batch_of_big_batches(world: Harness) -> None:
    world.limits.precise_flow_control = False
    batch = world.limits.max_read_entries
    consumer, sink = world.consumer(SubType.Exclusive, permits=batch * 100)
    world.publish(*([100] * (batch + 10)))
    assert len(sink.sent) == batch  # the permits are spent: the next FLOW sends the rest
    assert consumer.permits == 0
    world.sub.add_permits(consumer, 1)  # min(1, read batch): one more entry
    world.run()
    assert len(sink.sent) == batch + 1
    assert consumer.permits == 1 - 100


@pytest.mark.parametrize("sub_type", [SubType.Exclusive, SubType.Failover])
def test_precise_flow_control_stops_a_single_active_consumer_at_its_permits(
    world: Harness, sub_type: SubType
) -> None:
    """The default here: an entry goes out only while permits last (the last one may take
    them below zero, as in Shared), so 3 permits take one batch of 10, not three."""
    consumer, sink = world.consumer(sub_type, permits=3)
    world.publish(*([10] * 8))
    assert len(sink.sent) == 1
    assert consumer.permits == 3 - 10
    world.sub.add_permits(consumer, 27)  # 20 permits: two batches
    world.run()
    assert len(sink.sent) == 3
    assert consumer.permits == 0


@pytest.mark.parametrize("precise", [True, False])
def test_unbatched_entries_never_take_permits_below_zero(world: Harness, precise: bool) -> None:
    world.limits.precise_flow_control = precise
    consumer, sink = world.consumer(SubType.Exclusive, permits=7)
    world.publish(*([1] * 20))
    assert len(sink.sent) == 7
    assert consumer.permits == 0


def test_a_shared_consumer_still_stops_at_its_permits(world: Harness) -> None:
    """Shared (Java: each consumer's share is its permits over the entries' average batch
    size, at least one entry): one batch of 10 for 3 permits."""
    consumer, sink = world.consumer(SubType.Shared, permits=3)
    world.publish(*([10] * 8))
    assert len(sink.sent) == 1
    assert consumer.permits == 3 - 10


def test_a_single_active_consumer_above_its_socket_high_water_mark_gets_nothing(
    world: Harness,
) -> None:
    _, sink = world.consumer(SubType.Exclusive, permits=1000)
    sink.writable = False  # above the high-water mark: the pass sends nothing, in both modes
    world.publish(*([10] * 5))
    assert sink.sent == []
    sink.writable = True
    world.sub.schedule_dispatch()
    world.run()
    assert len(sink.sent) == 5
