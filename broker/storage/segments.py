"""``SegmentTable``: the ordered durable segments of a ledger and position arithmetic on them.

Positions are resolved against what is *durable* (each segment's committed entry count), never
against buffered appends: readers and cursors only ever deal with durable entries. Ledger ids
can have gaps (empty ledgers are deleted, a failed flush skips an id), so "the next position"
is always computed from the table, not by adding one.

Thread safety: every method takes the table's lock, which is held for bookkeeping only (no
I/O). The flush thread publishes new durable entries with ``commit``; any thread may query.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable

from broker.storage.ledger_meta_file import SealedLedger
from broker.storage.position import Position
from broker.storage.segment import Segment


class SegmentTable:
    """Durable segments in ledger-id order, with the queries cursors and readers need."""

    __slots__ = (
        "_ids",
        "_lock",
        "_segments",
    )

    def __init__(self, segments: Iterable[Segment] = ()) -> None:
        self._lock = threading.Lock()
        self._segments = sorted(segments, key=lambda s: s.ledger_id)
        # The segments' ledger ids, in the same order, for bisecting (``_from``: a position
        # query per acknowledged message must not build this list each time). A tuple: the
        # empty one is shared, and it is replaced whole, only when segments come and go.
        self._ids = tuple(s.ledger_id for s in self._segments)

    # -- mutation ------------------------------------------------------------------------

    def add(self, segment: Segment) -> None:
        with self._lock:
            self._segments.append(segment)
            self._segments.sort(key=lambda s: s.ledger_id)
            self._ids = tuple(s.ledger_id for s in self._segments)

    def remove(self, ledger_ids: set[int]) -> None:
        with self._lock:
            self._segments = [s for s in self._segments if s.ledger_id not in ledger_ids]
            self._ids = tuple(s.ledger_id for s in self._segments)

    def commit(self, segment: Segment, offsets: list[int], nbytes: int, new_crc: int) -> None:
        """Publish entries that just became durable in ``segment``."""
        with self._lock:
            segment.commit(offsets, nbytes, new_crc)

    def mark_sealed(self, segment: Segment, sealed_at_ms: int) -> None:
        with self._lock:
            segment.mark_sealed(sealed_at_ms)

    # -- snapshots -----------------------------------------------------------------------

    def all(self) -> list[Segment]:
        with self._lock:
            return list(self._segments)

    def contains(self, segment: Segment) -> bool:
        with self._lock:
            return segment in self._segments

    def sealed_infos(self) -> list[SealedLedger]:
        """Metadata rows of the sealed segments, in order."""
        with self._lock:
            return [s.info(s.sealed_at_ms) for s in self._segments if s.sealed_at_ms is not None]

    def spans(self) -> list[tuple[int, int]]:
        """``(ledger_id, durable entries)`` of every non-empty segment."""
        with self._lock:
            return [(s.ledger_id, s.entries) for s in self._segments if s.entries]

    # -- position queries ----------------------------------------------------------------

    def first_position(self) -> Position | None:
        with self._lock:
            for segment in self._segments:
                if segment.entries:
                    return Position(segment.ledger_id, 0)
        return None

    def last_position(self) -> Position | None:
        with self._lock:
            for segment in reversed(self._segments):
                if segment.entries:
                    return Position(segment.ledger_id, segment.entries - 1)
        return None

    def first_ledger_id(self) -> int | None:
        with self._lock:
            return self._segments[0].ledger_id if self._segments else None

    def next_position(self, position: Position) -> Position:
        """The first durable entry after ``position``, else ``(ledger, entry + 1)``."""
        with self._lock:
            for segment in self._from(position.ledger_id):
                if segment.ledger_id == position.ledger_id:
                    if position.entry_id + 1 < segment.entries:
                        return Position(segment.ledger_id, max(position.entry_id + 1, 0))
                elif segment.entries:
                    return Position(segment.ledger_id, 0)
        return Position(position.ledger_id, position.entry_id + 1)

    def previous_position(self, position: Position) -> Position | None:
        """The last durable entry before ``position``; None if there is none."""
        with self._lock:
            for segment in reversed(self._segments):
                if segment.ledger_id > position.ledger_id or not segment.entries:
                    continue
                if segment.ledger_id < position.ledger_id:
                    return Position(segment.ledger_id, segment.entries - 1)
                if position.entry_id > 0:
                    return Position(segment.ledger_id, min(position.entry_id, segment.entries) - 1)
        return None

    def has_entry(self, position: Position) -> bool:
        with self._lock:
            for segment in self._from(position.ledger_id):
                return segment.ledger_id == position.ledger_id and (
                    0 <= position.entry_id < segment.entries
                )
        return False

    def entry_count_between(self, first: Position, last: Position) -> int:
        """Durable entries ``p`` with ``first <= p <= last``."""
        total = 0
        with self._lock:
            for segment in self._from(first.ledger_id):
                if segment.ledger_id > last.ledger_id:
                    break
                low = max(first.entry_id, 0) if segment.ledger_id == first.ledger_id else 0
                high = segment.entries - 1
                if segment.ledger_id == last.ledger_id:
                    high = min(high, last.entry_id)
                total += max(0, high - low + 1)
        return total

    def locate(self, position: Position) -> tuple[Segment, int, int, int] | None:
        """The segment and entry id of the first durable entry ``>= position``, with a
        consistent ``(entries, data_end)`` snapshot of that segment; None past the end."""
        with self._lock:
            for segment in self._from(position.ledger_id):
                first = max(position.entry_id, 0) if segment.ledger_id == position.ledger_id else 0
                if first < segment.entries:
                    return segment, first, segment.entries, segment.data_end
        return None

    def total_data_bytes(self) -> int:
        with self._lock:
            return sum(s.data_bytes for s in self._segments)

    def _from(self, ledger_id: int) -> list[Segment]:
        """Segments with id >= ``ledger_id`` (lock held)."""
        return self._segments[bisect_left(self._ids, ledger_id) :]
