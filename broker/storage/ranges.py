"""``PositionRangeSet``: individually deleted positions kept as coalesced ranges.

Pulsar's cursor keeps ``individualDeletedMessages`` as a range set so that a consumer acking a
million messages around one stuck message costs a handful of ranges, not a million entries. We
do the same with inclusive ranges ``(ledger_id, first_entry, last_entry)``, kept sorted and
merged whenever two become adjacent *within a ledger*. Adjacency across ledgers (the last entry
of one ledger and entry 0 of the next) needs the ledger's knowledge, so the cursor resolves it
while advancing its mark-delete position; the set itself never guesses.

Invariant: ranges are sorted, disjoint and never adjacent inside one ledger.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import NamedTuple

from broker.storage.position import Position

_MAX_ENTRY = 1 << 62


class EntryRange(NamedTuple):
    """Entries ``first_entry .. last_entry`` (inclusive) of ``ledger_id``."""

    ledger_id: int
    first_entry: int
    last_entry: int

    @property
    def first(self) -> Position:
        return Position(self.ledger_id, self.first_entry)

    @property
    def last(self) -> Position:
        return Position(self.ledger_id, self.last_entry)

    def __len__(self) -> int:
        return self.last_entry - self.first_entry + 1


class PositionRangeSet:
    """A sorted set of positions stored as coalesced inclusive ranges."""

    __slots__ = ("_ranges",)

    def __init__(self) -> None:
        self._ranges: list[EntryRange] = []

    @classmethod
    def from_sorted(cls, ranges: list[EntryRange]) -> PositionRangeSet:
        """Build from ranges already satisfying the invariant (as persisted by ``ranges``)."""
        result = cls()
        result._ranges = list(ranges)
        return result

    def __iter__(self) -> Iterator[EntryRange]:
        return iter(self._ranges)

    def __len__(self) -> int:
        """Number of ranges (not positions)."""
        return len(self._ranges)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def _index_at_or_before(self, position: Position) -> int:
        """Index of the last range starting at or before ``position`` (-1 if none)."""
        key = (position.ledger_id, position.entry_id, _MAX_ENTRY)
        return bisect_right(self._ranges, key) - 1

    def range_containing(self, position: Position) -> EntryRange | None:
        index = self._index_at_or_before(position)
        if index < 0:
            return None
        candidate = self._ranges[index]
        if candidate.ledger_id == position.ledger_id and position.entry_id <= candidate.last_entry:
            return candidate
        return None

    def __contains__(self, position: object) -> bool:
        return isinstance(position, Position) and self.range_containing(position) is not None

    def add(self, position: Position) -> bool:
        """Insert ``position``; returns False if it was already present."""
        index = self._index_at_or_before(position)
        ledger, entry = position
        before = self._ranges[index] if index >= 0 else None
        if before is not None and before.ledger_id == ledger and entry <= before.last_entry:
            return False
        after = self._ranges[index + 1] if index + 1 < len(self._ranges) else None
        joins_before = (
            before is not None and before.ledger_id == ledger and before.last_entry + 1 == entry
        )
        joins_after = (
            after is not None and after.ledger_id == ledger and after.first_entry == entry + 1
        )
        if joins_before and joins_after:
            assert before is not None
            assert after is not None
            self._ranges[index : index + 2] = [
                EntryRange(ledger, before.first_entry, after.last_entry)
            ]
        elif joins_before:
            assert before is not None
            self._ranges[index] = EntryRange(ledger, before.first_entry, entry)
        elif joins_after:
            assert after is not None
            self._ranges[index + 1] = EntryRange(ledger, entry, after.last_entry)
        else:
            self._ranges.insert(index + 1, EntryRange(ledger, entry, entry))
        return True

    def remove_through(self, position: Position) -> None:
        """Forget every position ``<= position`` (the mark-delete moved past them)."""
        index = self._index_at_or_before(position)
        if index < 0:
            return
        cut = self._ranges[index]
        del self._ranges[: index + 1]
        if cut.ledger_id == position.ledger_id and position.entry_id < cut.last_entry:
            self._ranges.insert(0, EntryRange(cut.ledger_id, position.entry_id + 1, cut.last_entry))

    def count_between(self, low: Position, high: Position) -> int:
        """How many positions ``p`` with ``low <= p <= high`` the set holds."""
        total = 0
        for item in self._ranges:
            if item.last < low:
                continue
            if item.first > high:
                break
            first = max(item.first, low)
            last = min(item.last, high)
            if first.ledger_id == last.ledger_id and first <= last:
                total += last.entry_id - first.entry_id + 1
        return total

    def clear(self) -> None:
        self._ranges.clear()
