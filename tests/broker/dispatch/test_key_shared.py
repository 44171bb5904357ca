"""Key_Shared consumer selection (broker.dispatch.key_shared, consumer_selection): AUTO_SPLIT
and STICKY hash ranges, the checks Java makes on a joining consumer, and draining hashes."""

from __future__ import annotations

import dataclasses

import pytest

from broker.dispatch.consumer import Consumer
from broker.dispatch.consumer_selection import ConsumerSelection
from broker.dispatch.key_shared import (
    HASH_RANGE_SIZE,
    AutoSplitRanges,
    DrainingHashes,
    KeySharedPolicy,
    MovedRange,
    StickyRanges,
    sticky_key_hash,
)
from broker.errors import ConsumerAssignError, ConsumerBusy
from broker.storage import Position
from protocol.enums import KeySharedMode, SubType
from protocol.hashing import murmur3_32_hash
from protocol.metadata import EntryMetadata
from tests.broker.dispatch.harness import FakeSink

STICKY = KeySharedMode.STICKY


def key_in(lo: int, hi: int, *, avoid: tuple[bytes, ...] = ()) -> bytes:
    """A key whose sticky hash lies in ``[lo, hi]``."""
    for i in range(1_000_000):
        key = f"key-{i}".encode()
        if lo <= sticky_key_hash(key) <= hi and key not in avoid:
            return key
    raise AssertionError("no key found")


def metadata(key: bytes) -> EntryMetadata:
    return EntryMetadata(
        producer_name="p",
        sequence_id=0,
        highest_sequence_id=None,
        num_messages=1,
        is_batch=False,
        publish_time=0,
        partition_key=key.decode(),
        ordering_key=None,
        deliver_at_time=None,
        event_time=None,
    )


def consumer(consumer_id: int, policy: KeySharedPolicy | None = None) -> Consumer:
    c = Consumer(consumer_id, f"c{consumer_id}", FakeSink(), key_shared=policy or KeySharedPolicy())
    c.permits = 1000
    return c


# --------------------------------------------------------------------------- the hash


def test_the_hash_is_murmur3_of_the_key_modulo_65536() -> None:
    assert sticky_key_hash(b"orders") == murmur3_32_hash(b"orders") % HASH_RANGE_SIZE
    # No key at all hashes as Java's NONE_KEY placeholder.
    assert sticky_key_hash(None) == sticky_key_hash(b"NONE_KEY")


def test_the_ordering_key_wins_over_the_partition_key() -> None:
    selection = ConsumerSelection()
    low, high = consumer(1), consumer(2)
    selection.add(low, SubType.Key_Shared)
    selection.add(high, SubType.Key_Shared)  # takes [32768, 65535]
    lower_key, upper_key = key_in(0, 32767), key_in(32768, 65535)
    entry = dataclasses.replace(metadata(lower_key), ordering_key=upper_key)
    assert selection.choose(entry, Position(1, 0)) is high


# --------------------------------------------------------------------------- AUTO_SPLIT


def test_auto_split_hands_the_upper_half_of_the_largest_range_to_a_newcomer() -> None:
    ranges: AutoSplitRanges[str] = AutoSplitRanges()
    assert ranges.add("a") is None
    assert ranges.add("b") == MovedRange("a", 32768, 65535)
    assert ranges.add("c") == MovedRange("a", 16384, 32767)
    assert ranges.ranges_of("a") == [(0, 16383)]
    assert ranges.ranges_of("c") == [(16384, 32767)]
    assert ranges.ranges_of("b") == [(32768, 65535)]
    ranges.remove("c")
    assert ranges.ranges_of("b") == [(16384, 65535)]
    assert ranges.owner_of(20000) == "b"


def test_consumers_learn_their_auto_split_ranges() -> None:
    selection = ConsumerSelection()
    first, second = consumer(1), consumer(2)
    selection.add(first, SubType.Key_Shared)
    assert first.hash_ranges == [(0, 65535)]
    selection.add(second, SubType.Key_Shared)
    assert (first.hash_ranges, second.hash_ranges) == ([(0, 32767)], [(32768, 65535)])
    selection.remove(second)
    assert first.hash_ranges == [(0, 65535)]


# --------------------------------------------------------------------------- STICKY


def test_sticky_ranges_route_each_hash_to_its_declarer_and_holes_to_nobody() -> None:
    selection = ConsumerSelection()
    a = consumer(1, KeySharedPolicy(STICKY, ((0, 999), (30000, 39999))))
    b = consumer(2, KeySharedPolicy(STICKY, ((1000, 29999),)))
    selection.add(a, SubType.Key_Shared)
    selection.add(b, SubType.Key_Shared)
    assert a.hash_ranges == [(0, 999), (30000, 39999)]
    assert b.hash_ranges == [(1000, 29999)]
    assert selection.choose(metadata(key_in(0, 999)), Position(1, 0)) is a
    assert selection.choose(metadata(key_in(30000, 39999)), Position(1, 1)) is a
    assert selection.choose(metadata(key_in(1000, 29999)), Position(1, 2)) is b
    assert selection.choose(metadata(key_in(40000, 65535)), Position(1, 3)) is None


def test_a_leaving_sticky_consumer_leaves_its_hashes_to_nobody() -> None:
    selection = ConsumerSelection()
    a = consumer(1, KeySharedPolicy(STICKY, ((0, 32767),)))
    b = consumer(2, KeySharedPolicy(STICKY, ((32768, 65535),)))
    selection.add(a, SubType.Key_Shared)
    selection.add(b, SubType.Key_Shared)
    selection.remove(b)
    assert selection.owner_of(40000) is None
    c = consumer(3, KeySharedPolicy(STICKY, ((32768, 65535),)))
    selection.add(c, SubType.Key_Shared)  # the freed ranges can be declared again
    assert selection.owner_of(40000) is c


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (((100, 200),), "Range conflict with consumer c1"),
        (((0, 5), (200, 300)), "Range conflict with consumer c1"),
        (((150, 160),), "Range conflict with consumer c1"),
        (((50, 100),), "Range conflict with consumer c1"),  # bounds are inclusive
        (((300, 200),), "Fixed hash range start > end"),
        ((), "Ranges for KeyShared policy must not be empty."),
        (((60000, 65536),), "Ranges must be [0, 65535]."),
        (((500, 600), (550, 700)), "Range conflict with consumer c2"),  # its own ranges
    ],
)
def test_sticky_ranges_that_overlap_or_are_malformed_are_refused(
    declared: tuple[tuple[int, int], ...], message: str
) -> None:
    selection = ConsumerSelection()
    selection.add(consumer(1, KeySharedPolicy(STICKY, ((100, 200),))), SubType.Key_Shared)
    refused = consumer(2, KeySharedPolicy(STICKY, declared))
    with pytest.raises(ConsumerAssignError, match=message.replace("[", r"\[").replace("]", r"\]")):
        selection.add(refused, SubType.Key_Shared)
    assert refused not in selection.consumers
    assert selection.owner_of(550) is None  # nothing of a refused consumer was kept


def test_sticky_ranges_keep_nothing_of_a_refused_declaration() -> None:
    ranges: StickyRanges[str] = StickyRanges()
    ranges.add("a", [(10, 20)], "a")
    with pytest.raises(ConsumerAssignError):
        ranges.add("b", [(30, 40), (15, 16)], "b")
    assert ranges.owner_of(35) is None


# --------------------------------------------------------------------------- the policy


@pytest.mark.parametrize(
    ("second", "text"),
    [
        (KeySharedPolicy(STICKY, ((0, 10),)), "key_shared mode of 'AUTO_SPLIT'"),
        (KeySharedPolicy(allow_out_of_order_delivery=True), "does not allow out of order"),
    ],
)
def test_a_consumer_with_another_key_shared_policy_is_refused(
    second: KeySharedPolicy, text: str
) -> None:
    selection = ConsumerSelection()
    selection.add(consumer(1), SubType.Key_Shared)
    with pytest.raises(ConsumerBusy, match=text):
        selection.add(consumer(2, second), SubType.Key_Shared)


def test_the_policy_changes_once_every_consumer_left() -> None:
    selection = ConsumerSelection()
    first = consumer(1)
    selection.add(first, SubType.Key_Shared)
    selection.remove(first)
    sticky = consumer(2, KeySharedPolicy(STICKY, ((0, 10),)))
    selection.add(sticky, SubType.Key_Shared)
    assert selection.key_shared.mode == STICKY
    assert selection.owner_of(5) is sticky
    assert selection.owner_of(11) is None


# --------------------------------------------------------------------------- draining


def test_draining_hashes_block_everyone_but_their_consumer_until_released() -> None:
    drains: DrainingHashes[str] = DrainingHashes()
    drains.add("old", 7)
    drains.add("old", 7)
    drains.add("other", 7)  # one consumer drains a hash
    assert drains.blocks("new", 7)
    assert not drains.blocks("old", 7)
    assert not drains.blocks("new", 8)
    drains.release("other", 7)
    drains.release("old", 7)
    assert drains.blocks("new", 7)
    drains.release("old", 7)
    assert not drains.blocks("new", 7)
    assert len(drains) == 0


def test_a_moved_hash_drains_only_what_the_previous_owner_holds() -> None:
    selection = ConsumerSelection()
    old = consumer(1)
    selection.add(old, SubType.Key_Shared)
    moving, staying = key_in(32768, 65535), key_in(0, 32767)
    held = Position(1, 0)
    assert selection.choose(metadata(moving), held) is old
    assert selection.choose(metadata(staying), Position(1, 1)) is old
    new = consumer(2)
    selection.add(new, SubType.Key_Shared)
    assert selection.draining.draining_for(old) == [sticky_key_hash(moving)]
    assert selection.choose(metadata(moving), Position(1, 2)) is None
    other_moved = key_in(32768, 65535, avoid=(moving,))
    assert selection.choose(metadata(other_moved), Position(1, 3)) is new
    old.pending.discard(held)  # acknowledged
    assert selection.choose(metadata(moving), Position(1, 2)) is new


def test_nothing_drains_when_out_of_order_delivery_is_allowed() -> None:
    selection = ConsumerSelection()
    relaxed = KeySharedPolicy(allow_out_of_order_delivery=True)
    old = consumer(1, relaxed)
    selection.add(old, SubType.Key_Shared)
    moving = key_in(32768, 65535)
    assert selection.choose(metadata(moving), Position(1, 0)) is old
    new = consumer(2, relaxed)
    selection.add(new, SubType.Key_Shared)
    assert len(selection.draining) == 0
    assert selection.choose(metadata(moving), Position(1, 1)) is new


def test_a_leaving_consumer_drains_nothing_any_more() -> None:
    selection = ConsumerSelection()
    old = consumer(1)
    selection.add(old, SubType.Key_Shared)
    moving = key_in(32768, 65535)
    selection.choose(metadata(moving), Position(1, 0))
    new = consumer(2)
    selection.add(new, SubType.Key_Shared)
    selection.remove(old)
    assert len(selection.draining) == 0
    assert selection.choose(metadata(moving), Position(1, 1)) is new


def test_a_hash_back_with_its_draining_consumer_drains_no_more() -> None:
    selection = ConsumerSelection()
    old = consumer(1)
    selection.add(old, SubType.Key_Shared)
    moving = key_in(32768, 65535)
    held = Position(1, 0)
    selection.choose(metadata(moving), held)
    passing = consumer(2)
    selection.add(passing, SubType.Key_Shared)
    selection.remove(passing)  # the upper half goes back to `old`
    assert len(selection.draining) == 0
    later = Position(1, 1)
    assert selection.choose(metadata(moving), later) is old
    newcomer = consumer(3)
    selection.add(newcomer, SubType.Key_Shared)  # both entries of `old` drain now
    old.pending.discard(held)
    assert selection.choose(metadata(moving), Position(1, 2)) is None
    old.pending.discard(later)
    assert selection.choose(metadata(moving), Position(1, 2)) is newcomer
