"""Reading durable entries: batched by segment, from the entry cache first, then from disk.

A read plans, per segment, how many entries fit ``max_entries``/``max_bytes`` using the offset
index alone (by bisection: a run's size is a difference of two offsets), serves cached entries
from memory and reads each run of uncached ones with a single ``pread`` (every record's crc is
checked; the kernel is asked to read ahead what comes next, see ``segment.pread_exact``). A
segment trimmed while being read is simply skipped: the next lookup resolves to the first entry
still stored.

``read_cached`` is the memory-only variant for the event loop: it never opens a file and never
builds an index, and answers None when the next entry is on disk only, so the caller can run
``read`` in a worker thread instead (see ``broker/blocking.py``).

Thread safety: any number of threads may read while the ledger appends, flushes, seals and
trims (segment table and cache take their own locks; see ``segment.py`` for the index).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from broker.storage.cache import LedgerCache
from broker.storage.errors import CorruptLedgerError
from broker.storage.position import Position
from broker.storage.segment import Segment
from broker.storage.segments import SegmentTable

UNLIMITED = 1 << 62


class EntryReader:
    """Read-only access to a ledger's durable entries."""

    def __init__(self, table: SegmentTable, cache: LedgerCache) -> None:
        self._table = table
        self._cache = cache

    def read(
        self, position: Position, max_entries: int, max_bytes: int = UNLIMITED
    ) -> list[tuple[Position, bytes]]:
        """See ``Ledger.read``."""
        result: list[tuple[Position, bytes]] = []
        budget = max_bytes
        while len(result) < max_entries and (budget > 0 or not result):
            located = self._table.locate(position)
            if located is None:
                break
            segment, first, entries, data_end = located
            planned = self._plan(
                segment, first, entries, data_end, max_entries - len(result), budget, not result
            )
            if planned is None:
                continue  # trimmed under us: locate again
            stop, size = planned
            chunk = self._fetch(segment, first, stop, entries, data_end)
            if chunk is None:
                continue  # trimmed under us: locate again
            result.extend(chunk)
            budget -= size
            position = Position(segment.ledger_id, stop)
            if stop < entries:
                break  # a limit stopped us, not the end of the segment
        return result

    def read_cached(
        self, position: Position, max_entries: int, max_bytes: int = UNLIMITED
    ) -> list[tuple[Position, bytes]] | None:
        """See ``Ledger.read_cached``."""
        result: list[tuple[Position, bytes]] = []
        budget = max_bytes
        while len(result) < max_entries and (budget > 0 or not result):
            located = self._table.locate(position)
            if located is None:
                return result
            segment, first, entries, _ = located
            stop = min(entries, first + max_entries - len(result))
            run = self._cache.cached_run(segment.ledger_id, first, stop)
            for offset, data in enumerate(run):
                if len(data) > budget and result:
                    return result
                result.append((Position(segment.ledger_id, first + offset), data))
                budget -= len(data)
            if len(run) < stop - first:
                return result or None  # the next entry is on disk only
            if stop < entries:
                return result
            position = Position(segment.ledger_id, stop)
        return result

    def _plan(
        self,
        segment: Segment,
        first: int,
        entries: int,
        data_end: int,
        max_entries: int,
        budget: int,
        need_one: bool,
    ) -> tuple[int, int] | None:
        """How far from ``first`` a read of ``segment`` may go within the limits, and its size
        (None if the file was trimmed away before its index could be built).

        The size of a run is a difference of two offsets, so the longest run within the byte
        budget is found by bisection over the index, not by a step per entry.
        """
        try:
            low, high = first, min(entries, first + max_entries)  # ``low`` always fits
            if high > first and need_one:
                low = first + 1
            if segment.run_size(first, high, entries, data_end) <= budget:
                low = high
            while low < high:
                middle = (low + high + 1) // 2
                if segment.run_size(first, middle, entries, data_end) <= budget:
                    low = middle
                else:
                    high = middle - 1
            return low, segment.run_size(first, low, entries, data_end)
        except FileNotFoundError:
            if self._table.contains(segment):
                raise CorruptLedgerError(segment.path, 0, "segment file vanished") from None
            return None

    def _fetch(
        self, segment: Segment, first: int, stop: int, entries: int, data_end: int
    ) -> list[tuple[Position, bytes]] | None:
        """Entries ``first .. stop-1`` of ``segment`` (None if its file was trimmed away)."""
        positions = [Position(segment.ledger_id, i) for i in range(first, stop)]
        found = self._cache.get_run(segment.ledger_id, first, stop)
        index = 0
        while index < len(found):
            if found[index] is not None:
                index += 1
                continue
            run_end = index
            while run_end < len(found) and found[run_end] is None:
                run_end += 1
            try:
                loaded = segment.read_entries(first + index, first + run_end, entries, data_end)
            except FileNotFoundError:
                if self._table.contains(segment):
                    raise CorruptLedgerError(segment.path, 0, "segment file vanished") from None
                return None
            found[index:run_end] = loaded
            index = run_end
        return [(p, data) for p, data in zip(positions, found, strict=True) if data is not None]

    def iter_entries(
        self, start: Position, batch_entries: int = 256, batch_bytes: int = 4 << 20
    ) -> Iterator[tuple[Position, bytes]]:
        """See ``Ledger.iter_entries``."""
        position = start
        while True:
            batch = self.read(position, batch_entries, batch_bytes)
            if not batch:
                return
            yield from batch
            last = batch[-1][0]
            position = Position(last.ledger_id, last.entry_id + 1)

    def find_newest_matching(self, predicate: Callable[[bytes], bool]) -> Position | None:
        """See ``Ledger.find_newest_matching``."""
        spans = self._table.spans()
        starts: list[int] = []
        total = 0
        for _, entries in spans:
            starts.append(total)
            total += entries

        def position_at(index: int) -> Position:
            slot = bisect_left(starts, index + 1) - 1
            return Position(spans[slot][0], index - starts[slot])

        low, high, found = 0, total - 1, None
        while low <= high:
            middle = (low + high) // 2
            position = position_at(middle)
            entry = self.read(position, 1)
            if entry and entry[0][0] == position and predicate(entry[0][1]):
                found, low = position, middle + 1
            else:
                high = middle - 1
        return found
