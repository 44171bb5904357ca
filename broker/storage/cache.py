"""The entry cache: recently flushed entries kept in memory so tailing readers skip the disk.

Pulsar's broker keeps an entry cache (``managedLedgerCacheSizeMB``) for the same reason: most
consumers read what was just written, and its size bounds the memory of the whole broker,
shared by every topic. ``EntryCache`` is that budget: one per broker (``BrokerService``), or
one per ledger when a ledger is opened on its own (tools, tests). Each ledger reads and writes
it through its own ``LedgerCache`` view. Until issue #26's measurements every ledger had a
budget of its own, so a broker with a hundred busy topics could hold a hundred times the
configured size, and a busy topic never reused the memory a quiet one held.

The flush that makes a run of entries durable inserts it as one *block* (consecutive entries
of one ledger; the bytes objects are the appended ones, so caching copies nothing, and the
per-entry work is a single list, off the event-loop thread). Blocks are evicted oldest-first,
whichever ledger they belong to, once the budget is exceeded: tailing readers move forward,
so FIFO is the right policy for them ("LRU-ish"), and a topic nobody writes stops holding
memory as soon as others write.

Thread-safe: flushes (worker threads) and reads (any thread) of every ledger may interleave;
one small lock guards the maps. A view that never cached anything is four slots, and its
reads miss without taking the lock (issue #26: most loaded topics never write).
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_right
from collections import OrderedDict

#: A block: (owner, ledger id, first entry id) -> (entries, their total bytes).
_Blocks = OrderedDict[tuple[int, int, int], tuple[list[bytes], int]]
#: The block starts of a ledger with none cached (shared, never written).
_NO_STARTS: list[int] = []


class EntryCache:
    """A byte-bounded FIFO of blocks of every ledger that shares it (see the module doc)."""

    __slots__ = ("_blocks", "_bytes", "_ids", "_lock", "_max_bytes", "_owner_bytes", "_owners")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._blocks: _Blocks = OrderedDict()
        # owner -> ledger id -> the first entries of its cached blocks, oldest first.
        self._owners: dict[int, dict[int, list[int]]] = {}
        self._owner_bytes: dict[int, int] = {}
        self._bytes = 0
        self._ids = itertools.count(1)

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes cached for every ledger together (never above ``max_bytes``)."""
        return self._bytes

    def view(self) -> LedgerCache:
        """A new ledger's window onto this cache."""
        return LedgerCache(self, next(self._ids))

    def bytes_of(self, owner: int) -> int:
        return self._owner_bytes.get(owner, 0)

    def put_block(self, owner: int, ledger_id: int, first_entry: int, entries: list[bytes]) -> None:
        sizes = [len(entry) for entry in entries]
        total = sum(sizes)
        while entries and total > self._max_bytes:  # keep only the newest part that fits
            total -= sizes.pop(0)
            entries = entries[1:]
            first_entry += 1
        if not entries:
            return
        with self._lock:
            self._blocks[(owner, ledger_id, first_entry)] = (entries, total)
            self._owners.setdefault(owner, {}).setdefault(ledger_id, []).append(first_entry)
            self._owner_bytes[owner] = self._owner_bytes.get(owner, 0) + total
            self._bytes += total
            while self._bytes > self._max_bytes:
                (old_owner, old_ledger, old_first), (_, size) = self._blocks.popitem(last=False)
                # FIFO: the oldest block overall is the oldest of its ledger, so this is cheap.
                self._forget(old_owner, old_ledger, old_first, size)

    def _forget(self, owner: int, ledger_id: int, first_entry: int, size: int) -> None:
        """Bookkeeping of a block gone from ``_blocks`` (lock held)."""
        ledgers = self._owners[owner]
        starts = ledgers[ledger_id]
        starts.remove(first_entry)
        if not starts:
            del ledgers[ledger_id]
            if not ledgers:
                del self._owners[owner]
        left = self._owner_bytes[owner] - size
        if left:
            self._owner_bytes[owner] = left
        else:
            del self._owner_bytes[owner]
        self._bytes -= size

    def get_run(self, owner: int, ledger_id: int, first: int, stop: int) -> list[bytes | None]:
        found: list[bytes | None] = [None] * (stop - first)
        if owner not in self._owner_bytes:  # nothing of this ledger is cached
            return found
        with self._lock:
            blocks, starts = self._blocks, self._starts_of(owner, ledger_id)
            entry = first
            while entry < stop:
                slot = bisect_right(starts, entry) - 1
                block = blocks.get((owner, ledger_id, starts[slot])) if slot >= 0 else None
                if block is None or entry >= starts[slot] + len(block[0]):
                    entry += 1
                    continue
                offset = entry - starts[slot]
                take = min(stop - entry, len(block[0]) - offset)
                found[entry - first : entry - first + take] = block[0][offset : offset + take]
                entry += take
        return found

    def cached_run(self, owner: int, ledger_id: int, first: int, stop: int) -> list[bytes]:
        run: list[bytes] = []
        if owner not in self._owner_bytes:  # nothing of this ledger is cached
            return run
        with self._lock:
            blocks, starts = self._blocks, self._starts_of(owner, ledger_id)
            entry = first
            while entry < stop:
                slot = bisect_right(starts, entry) - 1
                block = blocks.get((owner, ledger_id, starts[slot])) if slot >= 0 else None
                if block is None or entry >= starts[slot] + len(block[0]):
                    break
                offset = entry - starts[slot]
                taken = block[0][offset : offset + stop - entry]
                run.extend(taken)
                entry += len(taken)
        return run

    def _starts_of(self, owner: int, ledger_id: int) -> list[int]:
        """The first entries of a ledger's cached blocks (lock held; do not write)."""
        ledgers = self._owners.get(owner)
        return _NO_STARTS if ledgers is None else ledgers.get(ledger_id, _NO_STARTS)

    def discard_ledger(self, owner: int, ledger_id: int) -> None:
        if owner not in self._owner_bytes:
            return
        with self._lock:
            for first_entry in list(self._starts_of(owner, ledger_id)):
                _, size = self._blocks.pop((owner, ledger_id, first_entry))
                self._forget(owner, ledger_id, first_entry, size)

    def clear(self, owner: int) -> None:
        if owner not in self._owner_bytes:
            return
        with self._lock:
            for ledger_id, starts in list(self._owners.get(owner, {}).items()):
                for first_entry in list(starts):
                    _, size = self._blocks.pop((owner, ledger_id, first_entry))
                    self._forget(owner, ledger_id, first_entry, size)


class LedgerCache:
    """One ledger's view of an ``EntryCache``: what its writer caches and its reader reads.

    ``ledger_id`` arguments are the ledger's segment ids; ``hits`` / ``misses`` count this
    ledger's reads only."""

    __slots__ = ("_owner", "_store", "hits", "misses")

    def __init__(self, store: EntryCache, owner: int) -> None:
        self._store = store
        self._owner = owner
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        """Bytes of this ledger's entries in the cache."""
        return self._store.bytes_of(self._owner)

    def put_block(self, ledger_id: int, first_entry: int, entries: list[bytes]) -> None:
        """Cache consecutive entries ``first_entry ..`` of ``ledger_id`` (newest data)."""
        self._store.put_block(self._owner, ledger_id, first_entry, entries)

    def get_run(self, ledger_id: int, first: int, stop: int) -> list[bytes | None]:
        """The cached entry (or None) for each entry id in ``first .. stop-1`` of a ledger."""
        found = self._store.get_run(self._owner, ledger_id, first, stop)
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
        run = self._store.cached_run(self._owner, ledger_id, first, stop)
        self.hits += len(run)
        return run

    def discard_ledger(self, ledger_id: int) -> None:
        """Drop the entries of a trimmed segment."""
        self._store.discard_ledger(self._owner, ledger_id)

    def clear(self) -> None:
        """Drop every entry of this ledger (it closes or is deleted)."""
        self._store.clear(self._owner)
