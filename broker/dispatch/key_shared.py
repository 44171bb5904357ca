"""Key_Shared AUTO_SPLIT hash-range assignment.

Every entry carries a sticky key (ordering key, else partition key, else none). Its hash is the
Murmur3-32 hash the Pulsar client and broker use (seed 0, sign bit cleared) modulo 65536. The hash
space ``[0, 65535]`` is split among the consumers: the first owns all of it; each newcomer takes the
upper half of the currently largest range; a leaver's range goes to its neighbour. Messages with
the same key therefore always go to the same consumer while the consumer set is stable, which is
the ordering guarantee Key_Shared gives.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from protocol.hashing import murmur3_32_hash

HASH_RANGE_SIZE = 65536
_NO_KEY = b"NONE_KEY"

C = TypeVar("C", bound=Hashable)


def sticky_key_hash(key: bytes | None) -> int:
    """Hash of a sticky key in ``[0, 65535]``, as Pulsar computes it."""
    return murmur3_32_hash(key if key else _NO_KEY) % HASH_RANGE_SIZE


@dataclass(slots=True)
class _Range(Generic[C]):
    start: int
    end: int
    owner: C

    @property
    def size(self) -> int:
        return self.end - self.start + 1


class AutoSplitRanges(Generic[C]):
    """Ranges kept sorted by start; they always tile ``[0, 65535]`` while non-empty."""

    def __init__(self) -> None:
        self._ranges: list[_Range[C]] = []

    def add(self, owner: C) -> None:
        if not self._ranges:
            self._ranges.append(_Range(0, HASH_RANGE_SIZE - 1, owner))
            return
        index = max(range(len(self._ranges)), key=lambda i: self._ranges[i].size)
        largest = self._ranges[index]
        if largest.size < 2:
            raise ValueError("no hash range left to split")
        middle = (largest.start + largest.end) // 2
        upper = _Range(middle + 1, largest.end, owner)
        largest.end = middle
        self._ranges.insert(index + 1, upper)

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
