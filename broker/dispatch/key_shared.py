"""Key_Shared: which consumer owns a sticky key's hash, in either mode, and which hashes drain.

Every entry carries a sticky key (ordering key, else partition key, else none). Its hash is the
Murmur3-32 hash the Pulsar client and broker use (seed 0, sign bit cleared) modulo 65536. The hash
space ``[0, 65535]`` is owned by the consumers in one of two ways, chosen by the subscription's
first consumer (``KeySharedPolicy``, from SUBSCRIBE's ``keySharedMeta``):

* AUTO_SPLIT (``AutoSplitRanges``): the first consumer owns all of it; each newcomer takes the
  upper half of the currently largest range; a leaver's range goes to its neighbour.
* STICKY (``StickyRanges``): each consumer declares its own ranges; they may not overlap another
  consumer's (``ConsumerAssignError``, as Java's ``HashRangeExclusiveStickyKeyConsumerSelector``),
  and a hash nobody declared is owned by nobody: its entries wait until somebody declares it.

Messages with the same key therefore go to the same consumer while the consumer set is stable,
which is the ordering guarantee Key_Shared gives. When the set changes under AUTO_SPLIT, a hash
can move from a consumer that still holds unacknowledged messages of it to another one; unless
the subscription allows out-of-order delivery, that hash *drains* (``DrainingHashes``, Java's
PIP-379 ``DrainingHashesTracker``): its new owner gets none of its messages until the previous
owner has acknowledged (or given back) every one it holds, so a key's messages are never
processed by two consumers at once nor out of order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.errors import ConsumerAssignError
from protocol.enums import KeySharedMode
from protocol.hashing import murmur3_32_hash

HASH_RANGE_SIZE = 65536
_NO_KEY = b"NONE_KEY"

C = TypeVar("C", bound=Hashable)


def sticky_key_hash(key: bytes | None) -> int:
    """Hash of a sticky key in ``[0, 65535]``, as Pulsar computes it."""
    return murmur3_32_hash(key if key else _NO_KEY) % HASH_RANGE_SIZE


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    """A Key_Shared consumer's ``keySharedMeta``. Java gives a consumer that sent none the
    default: AUTO_SPLIT, in order."""

    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    #: STICKY only: the consumer's inclusive hash ranges.
    hash_ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order_delivery: bool = False

    @property
    def drains_hashes(self) -> bool:
        """Whether moved hashes drain: AUTO_SPLIT in order only (Java: STICKY ranges never move
        between live consumers, and out-of-order delivery waives the rule)."""
        return self.mode == KeySharedMode.AUTO_SPLIT and not self.allow_out_of_order_delivery

    def conflict_with(self, other: KeySharedPolicy) -> str | None:
        """Why a consumer with this policy cannot join a subscription whose consumers have
        ``other`` (Java's ``SubscriptionBusyException`` texts), or None."""
        if self.mode != other.mode:
            return (
                f"Subscription is of different type. Active subscription key_shared mode of "
                f"'{other.mode.name}' is different than the connecting consumer's key_shared "
                f"mode '{self.mode.name}'."
            )
        if self.allow_out_of_order_delivery != other.allow_out_of_order_delivery:
            if other.allow_out_of_order_delivery:
                detail = "allows out of order delivery while the connecting consumer does not"
            else:
                detail = "does not allow out of order delivery while the connecting consumer does"
            return f"Subscription is of different type. Active subscription {detail} allow it."
        return None


@dataclass(slots=True)
class _Range(Generic[C]):
    start: int
    end: int
    owner: C

    @property
    def size(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True, slots=True)
class MovedRange(Generic[C]):
    """Hashes ``[start, end]`` that ``previous`` owned before a consumer joined."""

    previous: C
    start: int
    end: int


class AutoSplitRanges(Generic[C]):
    """Ranges kept sorted by start; they always tile ``[0, 65535]`` while non-empty."""

    def __init__(self) -> None:
        self._ranges: list[_Range[C]] = []

    def add(self, owner: C) -> MovedRange[C] | None:
        """Give ``owner`` a range; returns what it took from another consumer, if anything."""
        if not self._ranges:
            self._ranges.append(_Range(0, HASH_RANGE_SIZE - 1, owner))
            return None
        index = max(range(len(self._ranges)), key=lambda i: self._ranges[i].size)
        largest = self._ranges[index]
        if largest.size < 2:
            raise ConsumerAssignError("There is no enough hash range for consumer")
        middle = (largest.start + largest.end) // 2
        upper = _Range(middle + 1, largest.end, owner)
        largest.end = middle
        self._ranges.insert(index + 1, upper)
        return MovedRange(largest.owner, upper.start, upper.end)

    def remove(self, owner: C) -> None:
        index = 0
        while index < len(self._ranges):
            gone = self._ranges[index]
            if gone.owner != owner:
                index += 1
                continue
            del self._ranges[index]
            if not self._ranges:
                return
            # Give the range to the following neighbour, or the preceding one at the top end.
            if index < len(self._ranges):
                self._ranges[index].start = gone.start
            else:
                self._ranges[index - 1].end = gone.end

    def owner_of(self, key_hash: int) -> C | None:
        for r in self._ranges:
            if r.start <= key_hash <= r.end:
                return r.owner
        return None

    def ranges_of(self, owner: C) -> list[tuple[int, int]]:
        return [(r.start, r.end) for r in self._ranges if r.owner == owner]


class StickyRanges(Generic[C]):
    """STICKY mode: the ranges each consumer declared, never overlapping, sorted by start."""

    def __init__(self) -> None:
        self._ranges: list[_Range[C]] = []
        self._names: dict[C, str] = {}

    def add(self, owner: C, declared: Sequence[tuple[int, int]], name: str) -> None:
        """Take ``declared`` for ``owner`` (``name`` for the error text), all or nothing.

        Raises:
            ConsumerAssignError: no ranges, a range upside down or outside ``[0, 65535]``,
                or one overlapping another range (Java's checks and texts; Java leaves the
                bounds to the client, which the official one checks, and so do we here).
        """
        if not declared:
            raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
        mine: list[tuple[int, int]] = []
        for start, end in declared:
            if start > end:
                raise ConsumerAssignError("Fixed hash range start > end")
            if start < 0 or end >= HASH_RANGE_SIZE:
                raise ConsumerAssignError(f"Ranges must be [0, {HASH_RANGE_SIZE - 1}].")
            for taken in self._ranges:
                if start <= taken.end and taken.start <= end:
                    other = self._names.get(taken.owner, "")
                    raise ConsumerAssignError(f"Range conflict with consumer {other}")
            for lo, hi in mine:
                if start <= hi and lo <= end:
                    raise ConsumerAssignError(f"Range conflict with consumer {name}")
            mine.append((start, end))
        self._ranges.extend(_Range(start, end, owner) for start, end in mine)
        self._ranges.sort(key=lambda r: r.start)
        self._names[owner] = name

    def remove(self, owner: C) -> None:
        """Forget ``owner``'s ranges: their hashes are nobody's until declared again."""
        self._ranges = [r for r in self._ranges if r.owner != owner]
        self._names.pop(owner, None)

    def owner_of(self, key_hash: int) -> C | None:
        for r in self._ranges:
            if r.start <= key_hash <= r.end:
                return r.owner
            if r.start > key_hash:
                return None
        return None

    def ranges_of(self, owner: C) -> list[tuple[int, int]]:
        return [(r.start, r.end) for r in self._ranges if r.owner == owner]


@dataclass(slots=True)
class _Drain(Generic[C]):
    consumer: C
    #: entries of this hash the consumer still holds
    count: int = 1


@dataclass(slots=True)
class DrainingHashes(Generic[C]):
    """Hashes that moved away from a consumer still holding messages of them.

    A hash drains for exactly one consumer (the one that held it when it moved); every other
    consumer is blocked from it until that consumer's count reaches zero.
    """

    _drains: dict[int, _Drain[C]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._drains)

    def add(self, consumer: C, key_hash: int) -> None:
        """``consumer`` holds one more unacknowledged entry of ``key_hash``, which moved away."""
        drain = self._drains.get(key_hash)
        if drain is None:
            self._drains[key_hash] = _Drain(consumer)
        elif drain.consumer == consumer:
            drain.count += 1
        # Else another consumer already drains it and nobody else got the hash since: its
        # drain covers this consumer too (which cannot hold any message of the hash).

    def release(self, consumer: C, key_hash: int) -> None:
        """``consumer`` no longer holds one entry of ``key_hash`` (acknowledged or given back)."""
        drain = self._drains.get(key_hash)
        if drain is not None and drain.consumer == consumer:
            drain.count -= 1
            if drain.count <= 0:
                del self._drains[key_hash]

    def blocks(self, consumer: C, key_hash: int) -> bool:
        """Whether ``consumer`` must not get an entry of ``key_hash`` yet."""
        drain = self._drains.get(key_hash)
        return drain is not None and drain.consumer != consumer

    def draining_for(self, consumer: C) -> list[int]:
        return sorted(h for h, d in self._drains.items() if d.consumer == consumer)

    def prune(self, owner_of: Callable[[int], C | None]) -> None:
        """Drop drains of hashes that came back to their draining consumer (another consumer
        left): it owns them again, so its count must not hold up a later move."""
        for key_hash in [h for h, d in self._drains.items() if owner_of(h) == d.consumer]:
            del self._drains[key_hash]

    def consumer_removed(self, consumer: C) -> None:
        """``consumer`` left: what it held goes back for replay, in position order, so its hashes
        need no draining any more."""
        for key_hash in [h for h, d in self._drains.items() if d.consumer == consumer]:
            del self._drains[key_hash]

    def clear(self) -> None:
        self._drains.clear()
