"""``EntryCache``: recently appended entries kept in memory so tailing readers skip the disk.

Pulsar's broker keeps an entry cache (``managedLedgerCacheSizeMB``) for the same reason: most
consumers read what was just written. Entries are inserted at append time (the bytes object is
shared with the pending-write buffer, so caching costs no copy) and evicted oldest-first once
``max_bytes`` is exceeded; a hit refreshes nothing, because tailing readers move forward and
FIFO is the right policy for them ("LRU-ish").

Thread-safe: appends (event loop) and reads (any thread) may interleave; a small internal lock
guards the map.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from broker.storage.position import Position


class EntryCache:
    """A byte-bounded FIFO map ``Position -> bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, position: Position, entry: bytes) -> None:
        """Insert (positions arrive in increasing order); evict the oldest beyond the bound."""
        if len(entry) > self._max_bytes:
            return
        with self._lock:
            self._entries[position] = entry
            self._bytes += len(entry)
            while self._bytes > self._max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted)

    def get_many(self, positions: list[Position]) -> list[bytes | None]:
        """The cached entry (or None) for each position."""
        with self._lock:
            found = [self._entries.get(p) for p in positions]
        hits = sum(1 for entry in found if entry is not None)
        self.hits += hits
        self.misses += len(found) - hits
        return found

    def discard_after(self, position: Position | None) -> None:
        """Drop every entry after ``position`` (all of them if None): used after a failed flush."""
        with self._lock:
            while self._entries:
                newest = next(reversed(self._entries))
                if position is not None and newest <= position:
                    return
                self._bytes -= len(self._entries.pop(newest))

    def discard_ledger(self, ledger_id: int) -> None:
        """Drop the entries of a trimmed ledger."""
        with self._lock:
            for position in [p for p in self._entries if p.ledger_id == ledger_id]:
                self._bytes -= len(self._entries.pop(position))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
