"""A pass hands each consumer its deliveries as one run (one write), and permits that come back
to a starved consumer are used in the same turn, at most one pass per turn (dispatcher rule 5,
``Dispatcher.dispatch_soon``)."""

from __future__ import annotations

import pytest

from broker.dispatch import dispatcher
from protocol.enums import SubType
from tests.broker.dispatch.harness import Harness


def test_a_pass_hands_each_consumer_one_run_in_position_order(world: Harness) -> None:
    _, first_sink = world.consumer(SubType.Shared, permits=1000, consumer_id=1)
    _, second_sink = world.consumer(SubType.Shared, permits=1000, consumer_id=2)
    entries = world.publish(*([1] * 10))
    assert len(first_sink.runs) == len(second_sink.runs) == 1  # one pass, one run each
    got = sorted(s.position for s in first_sink.sent + second_sink.sent)
    assert got == entries
    for sink in (first_sink, second_sink):
        positions = [s.position for s in sink.sent]
        assert positions == sorted(positions)


def test_a_pass_of_many_bytes_is_handed_over_in_parts(
    world: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``WRITE_THROUGH_BYTES`` the run goes to the sink at once, so the connection sees
    what this turn queued (its back-pressure) while the pass goes on."""
    monkeypatch.setattr(dispatcher, "WRITE_THROUGH_BYTES", 7)  # entries are 3 bytes: "n=1"
    _, sink = world.consumer(SubType.Exclusive, permits=1000)
    entries = world.publish(*([1] * 7))
    assert sink.runs == [3, 3, 1]
    assert [s.position for s in sink.sent] == entries


def test_permits_to_a_starved_consumer_are_used_in_the_same_turn(world: Harness) -> None:
    consumer, sink = world.consumer(SubType.Exclusive, permits=0)
    entries = world.publish(*([1] * 10))
    assert sink.sent == []
    world.sub.add_permits(consumer, 3)  # a FLOW: no scheduler turn in between
    assert [s.position for s in sink.sent] == entries[:3]


def test_a_second_flow_in_the_same_turn_waits_for_the_next_turn(world: Harness) -> None:
    """Issue #24: one read batch per subscription and turn, however many FLOWs a turn reads."""
    consumer, sink = world.consumer(SubType.Exclusive, permits=0)
    entries = world.publish(*([1] * 10))
    world.sub.add_permits(consumer, 3)
    world.sub.add_permits(consumer, 3)
    assert len(sink.sent) == 3
    world.scheduler.queue.pop(0).callback()  # the next turn begins (its marker runs first)
    world.run()
    assert [s.position for s in sink.sent] == entries[:6]
    assert len(sink.runs) == 2
