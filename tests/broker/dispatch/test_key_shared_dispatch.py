"""Key_Shared through a real subscription over a real ledger (``harness``): entries keyed, the
dispatcher choosing by hash range, acks releasing draining hashes, replay keeping key order."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from broker.dispatch.consumer import Consumer
from broker.dispatch.key_shared import KeySharedPolicy
from broker.dispatch.subscription import DispatchLimits, Subscription
from broker.storage import Ledger, LedgerConfig, Position
from protocol.enums import InitialPosition, KeySharedMode, SubType
from protocol.metadata import EntryMetadata
from tests.broker.dispatch.harness import FakeSink, LedgerSource, ManualScheduler
from tests.broker.dispatch.test_key_shared import key_in
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

UPPER = (32768, 65535)  # what a second AUTO_SPLIT consumer takes from the first
LOWER = (0, 32767)


class KeyedSource(LedgerSource):
    """Entries ``b"k=<key>"``: one message with that partition key."""

    def entry_metadata(self, position: Position, entry: bytes) -> EntryMetadata:
        return EntryMetadata(
            producer_name="p",
            sequence_id=position.entry_id,
            highest_sequence_id=None,
            num_messages=1,
            is_batch=False,
            publish_time=0,
            partition_key=entry.decode().removeprefix("k="),
            ordering_key=None,
            deliver_at_time=None,
            event_time=None,
        )


class KeyedWorld:
    def __init__(self, directory: Path) -> None:
        self.scheduler = ManualScheduler()
        self.ledger = Ledger.open(
            directory,
            LedgerConfig(preallocate_bytes=0),
            file_layer=NoSyncLayer(),
            preallocator=InlineExecutor(),
        )
        cursor = self.ledger.open_cursor("sub", InitialPosition.Earliest)
        self.sub = Subscription(
            "sub",
            cursor,
            KeyedSource(self.ledger, self.scheduler),
            self.scheduler,
            DispatchLimits(),
        )
        self.keys: dict[Position, bytes] = {}

    def publish(self, *keys: bytes) -> list[Position]:
        positions = [self.ledger.append(b"k=" + key) for key in keys]
        self.ledger.flush()
        self.keys.update(zip(positions, keys, strict=True))
        self.sub.schedule_dispatch()
        self.scheduler.run()
        return positions

    def consumer(
        self, consumer_id: int, policy: KeySharedPolicy | None = None, permits: int = 1000
    ) -> tuple[Consumer, FakeSink]:
        sink = FakeSink()
        consumer = Consumer(consumer_id, f"c{consumer_id}", sink, key_shared=policy)
        self.sub.add_consumer(consumer, SubType.Key_Shared)
        self.sub.add_permits(consumer, permits)
        self.scheduler.run()
        return consumer, sink

    def ack(self, positions: Iterable[Position]) -> None:
        self.sub.acknowledge(None, [(p, None) for p in positions])
        self.scheduler.run()

    def received(self, sink: FakeSink) -> list[tuple[Position, bytes]]:
        return [(s.position, self.keys[s.position]) for s in sink.sent]

    def close(self) -> None:
        self.sub.close()
        self.ledger.close()


@pytest.fixture
def keyed(tmp_path: Path) -> Iterable[KeyedWorld]:
    world = KeyedWorld(tmp_path / "topic")
    yield world
    world.close()


def test_a_newcomer_gets_a_moved_key_only_once_the_previous_owner_acked_it(
    keyed: KeyedWorld,
) -> None:
    moving, other = key_in(*UPPER), key_in(*UPPER, avoid=(key_in(*UPPER),))
    staying = key_in(*LOWER)
    first_batch = keyed.publish(moving, moving, staying)
    _old, old_sink = keyed.consumer(1)
    assert [p for p, _ in keyed.received(old_sink)] == first_batch
    _new, new_sink = keyed.consumer(2)  # takes the upper half: `moving` must drain first
    later = keyed.publish(moving, other, staying, moving)
    assert keyed.received(new_sink) == [(later[1], other)]
    assert keyed.received(old_sink)[3:] == [(later[2], staying)]
    keyed.ack(first_batch[:1])
    assert keyed.received(new_sink) == [(later[1], other)]  # one `moving` still held
    keyed.ack(first_batch[1:2])
    assert keyed.received(new_sink) == [(later[1], other), (later[0], moving), (later[3], moving)]


def test_with_out_of_order_delivery_a_newcomer_gets_moved_keys_at_once(keyed: KeyedWorld) -> None:
    relaxed = KeySharedPolicy(allow_out_of_order_delivery=True)
    moving = key_in(*UPPER)
    keyed.publish(moving)
    _old, old_sink = keyed.consumer(1, relaxed)
    assert len(old_sink.sent) == 1
    _new, new_sink = keyed.consumer(2, relaxed)
    later = keyed.publish(moving, moving)
    assert keyed.received(new_sink) == [(later[0], moving), (later[1], moving)]


def test_a_draining_consumer_that_leaves_hands_its_messages_over_in_order(
    keyed: KeyedWorld,
) -> None:
    moving = key_in(*UPPER)
    held = keyed.publish(moving, moving)
    old, _old_sink = keyed.consumer(1)
    _new, new_sink = keyed.consumer(2)
    later = keyed.publish(moving)
    assert new_sink.sent == []
    keyed.sub.remove_consumer(old)  # unacked: redelivered, before the newer entry
    keyed.scheduler.run()
    assert [p for p, _ in keyed.received(new_sink)] == [*held, *later]
    assert [s.redelivery_count for s in new_sink.sent] == [1, 1, 0]


def test_sticky_consumers_get_their_declared_ranges_and_holes_wait(keyed: KeyedWorld) -> None:
    low = KeySharedPolicy(KeySharedMode.STICKY, ((0, 19999),))
    high = KeySharedPolicy(KeySharedMode.STICKY, ((40000, 65535),))
    a, b, hole = key_in(0, 19999), key_in(40000, 65535), key_in(20000, 39999)
    positions = keyed.publish(a, b, hole, a)
    _c1, low_sink = keyed.consumer(1, low)
    _c2, high_sink = keyed.consumer(2, high)
    assert keyed.received(low_sink) == [(positions[0], a), (positions[3], a)]
    assert keyed.received(high_sink) == [(positions[1], b)]
    middle = KeySharedPolicy(KeySharedMode.STICKY, ((20000, 39999),))
    _c3, middle_sink = keyed.consumer(3, middle)  # STICKY: nothing drains, the hole fills
    assert keyed.received(middle_sink) == [(positions[2], hole)]


def test_a_sticky_consumer_keeps_its_range_while_another_joins(keyed: KeyedWorld) -> None:
    key = key_in(0, 19999)
    first = keyed.publish(key)
    _c1, sink = keyed.consumer(1, KeySharedPolicy(KeySharedMode.STICKY, ((0, 19999),)))
    keyed.consumer(2, KeySharedPolicy(KeySharedMode.STICKY, ((20000, 65535),)))
    later = keyed.publish(key)
    assert [p for p, _ in keyed.received(sink)] == [*first, *later]
