"""``EntryCache``: recently flushed entries kept in memory so tailing readers skip the disk.

Pulsar's broker keeps an entry cache (``managedLedgerCacheSizeMB``) for the same reason: most
consumers read what was just written. The flush that makes a run of entries durable inserts it
as one *block* (consecutive entries of one ledger; the bytes objects are the appended ones, so
caching copies nothing, and the per-entry work is a single list, off the event-loop thread).
Blocks are evicted oldest-first once ``max_bytes`` is exceeded: tailing readers move forward,
so FIFO is the right policy for them ("LRU-ish").

Thread-safe: flushes (worker thread) and reads (any thread) may interleave; a small internal
lock guards the maps. The lock and the maps are made by the first ``put_block`` (issue #26: most
loaded topics never write); until then every read is a miss, without a lock to take.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict

from broker.storage.lock import first_lock

_Blocks = OrderedDict[tuple[int, int], tuple[list[bytes], int]]
#: The block starts of a ledger with none cached (shared, never written).
_NO_STARTS: list[int] = []


class EntryCache:
    """A byte-bounded FIFO of blocks ``(ledger_id, first_entry) -> [entry bytes, ...]``."""

    __slots__ = ("_blocks", "_bytes", "_lock", "_max_bytes", "_starts", "hits", "misses")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        # All three made by the first put_block (module docstring).
        self._lock: threading.Lock | None = None
        self._blocks: _Blocks | None = None
        self._starts: dict[int, list[int]] | None = None  # ledger id -> its blocks' first entries
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put_block(self, ledger_id: int, first_entry: int, entries: list[bytes]) -> None:
        """Cache consecutive entries ``first_entry ..`` of ``ledger_id`` (newest data)."""
        sizes = [len(entry) for entry in entries]
        total = sum(sizes)
        while entries and total > self._max_bytes:  # keep only the newest part that fits
            total -= sizes.pop(0)
            entries = entries[1:]
            first_entry += 1
        if not entries:
            return
        with self._lock or first_lock(self, "_lock"):
            if self._blocks is None or self._starts is None:
                self._blocks, self._starts = OrderedDict(), {}
            self._blocks[(ledger_id, first_entry)] = (entries, total)
            self._starts.setdefault(ledger_id, []).append(first_entry)
            self._bytes += total
            while self._bytes > self._max_bytes:
                self._evict_oldest(self._blocks, self._starts)

    def _evict_oldest(self, blocks: _Blocks, all_starts: dict[int, list[int]]) -> None:
        (ledger_id, first_entry), (_, size) = blocks.popitem(last=False)
        starts = all_starts[ledger_id]
        starts.remove(first_entry)  # FIFO: it is the first one, so this is cheap
        if not starts:
            del all_starts[ledger_id]
        self._bytes -= size

    def get_run(self, ledger_id: int, first: int, stop: int) -> list[bytes | None]:
        """The cached entry (or None) for each entry id in ``first .. stop-1`` of a ledger."""
        found: list[bytes | None] = [None] * (stop - first)
        lock = self._lock
        if lock is None:  # nothing was ever cached
            self.misses += len(found)
            return found
        with lock:
            blocks, starts = self._blocks, self._starts_of(ledger_id)
            entry = first
            while entry < stop:
                slot = bisect_right(starts, entry) - 1
                block = blocks.get((ledger_id, starts[slot])) if slot >= 0 and blocks else None
                if block is None or entry >= starts[slot] + len(block[0]):
                    entry += 1
                    continue
                offset = entry - starts[slot]
                take = min(stop - entry, len(block[0]) - offset)
                found[entry - first : entry - first + take] = block[0][offset : offset + take]
                entry += take
        hits = sum(1 for item in found if item is not None)
        self.hits += hits
        self.misses += len(found) - hits
        return found

    def cached_run(self, ledger_id: int, first: int, stop: int) -> list[bytes]:
        """The cached entries ``first, first + 1, ..`` of a ledger, up to ``stop - 1``, ending
        before the first one that is not cached (the memory-only read of the hot path).

        Only hits are counted: the caller reads what is missing with ``get_run``, which counts
        the misses.
        """
        run: list[bytes] = []
        lock = self._lock
        if lock is None:  # nothing was ever cached
            return run
        with lock:
            blocks, starts = self._blocks, self._starts_of(ledger_id)
            entry = first
            while entry < stop:
                slot = bisect_right(starts, entry) - 1
                block = blocks.get((ledger_id, starts[slot])) if slot >= 0 and blocks else None
                if block is None or entry >= starts[slot] + len(block[0]):
                    break
                offset = entry - starts[slot]
                taken = block[0][offset : offset + stop - entry]
                run.extend(taken)
                entry += len(taken)
        self.hits += len(run)
        return run

    def _starts_of(self, ledger_id: int) -> list[int]:
        """The first entries of ``ledger_id``'s cached blocks (lock held; do not write)."""
        starts = self._starts
        return _NO_STARTS if starts is None else starts.get(ledger_id, _NO_STARTS)

    def discard_ledger(self, ledger_id: int) -> None:
        """Drop the entries of a trimmed ledger."""
        lock = self._lock
        if lock is None:  # nothing was ever cached
            return
        with lock:
            if self._blocks is None or self._starts is None:
                return
            for first_entry in self._starts.pop(ledger_id, []):
                _, size = self._blocks.pop((ledger_id, first_entry))
                self._bytes -= size

    def clear(self) -> None:
        lock = self._lock
        if lock is None:  # nothing was ever cached
            return
        with lock:
            self._blocks = self._starts = None  # the next put_block makes them again
            self._bytes = 0
