"""``Cursor``: a named consumption position over a ledger (Pulsar's ManagedCursor).

State, all above the *mark-delete position* ``md`` ("every entry <= md is consumed"):
* individually deleted positions, as coalesced ranges (``delete``; individual acks);
* per-entry batch ack sets (PIP-54): Java ``BitSet`` words, a set bit = index still unacked.
  ``delete_batch_indexes`` ANDs the new set into the held one, so an older, less complete ack set
  arriving late can never resurrect acknowledged indexes (Pulsar #18042); an all-zero result
  deletes the whole entry;
* ``properties`` attached to the latest mark-delete (PIP-6 stores its dedup snapshot there);
* a read position (where the next read starts), which is not persisted: after a reopen reading
  restarts at the first entry after ``md`` (Pulsar's rewind on recovery).

Rules:
1. ``md`` only moves forward except through ``reset`` (subscription seek). A ``mark_delete`` at
   an older position is ignored; one beyond the last durable entry is rejected.
2. ``md`` advances over deleted ranges as soon as the gap before them closes (``_advance``).
3. A mark-delete replaces ``properties``; one moved by individual deletes clears them (Pulsar does
   the same for non-compaction cursors).
4. A durable cursor persists atomically (``persist``; rate-limited by ``maybe_persist``) and on
   close. The ledger trims only what every durable cursor's *persisted* mark-delete covers, so a
   crash can never leave a cursor pointing before data that was already deleted.

Thread safety: mutators run on one thread (the event loop); ``persist`` may run concurrently in
a worker thread. A small lock makes the snapshot ``persist`` takes consistent.

Memory (issue #26: a loaded topic holds two or three cursors, most of them never acked): the
locks are made on first use (``lock.first_lock``), and an empty range set, batch map or
property map is a shared empty one until the first write; the store is the registry's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Protocol

from broker.storage.cursor_file import CursorState, copy_properties
from broker.storage.cursor_store import CursorStore
from broker.storage.errors import InvalidPositionError, LedgerClosedError
from broker.storage.lock import first_lock
from broker.storage.position import Position
from broker.storage.ranges import PositionRangeSet

log = logging.getLogger(__name__)

#: What a cursor without individual acks holds: shared, never written (a write makes a new set).
_NO_RANGES = PositionRangeSet()
#: The properties of a mark-delete that attached none (shared, read-only).
_NO_PROPERTIES: Mapping[str, int] = MappingProxyType({})


class LedgerView(Protocol):
    """What a cursor needs from its ledger (durable entries only)."""

    @property
    def last_confirmed_position(self) -> Position | None: ...

    def next_position(self, position: Position) -> Position: ...

    def entry_count_between(self, first: Position, last: Position) -> int: ...

    def has_entry(self, position: Position) -> bool: ...

    def read(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> list[tuple[Position, bytes]]: ...


class Cursor:
    """A durable (persisted) or non-durable (reader, memory only) cursor. See module docstring."""

    __slots__ = (
        "_batch",
        "_closed",
        "_dirty",
        "_last_persist_at",
        "_ledger",
        "_lock",
        "_md",
        "_persist_interval_s",
        "_persist_lock",
        "_persisted_md",
        "_properties",
        "_ranges",
        "_read_position",
        "_store",
        "name",
        "on_dirty",
        "was_clamped",
    )

    def __init__(
        self,
        name: str,
        ledger: LedgerView,
        state: CursorState,
        *,
        store: CursorStore | None,
        persist_interval_s: float,
    ) -> None:
        self.name = name
        self._ledger = ledger
        self._store = store
        self._persist_interval_s = persist_interval_s
        # Made on first use (module docstring): ``self._lock or first_lock(self, "_lock")``.
        self._lock: threading.Lock | None = None
        self._persist_lock: threading.Lock | None = None
        self._md = state.mark_delete
        self._properties: Mapping[str, int] = (
            dict(state.properties) if state.properties else _NO_PROPERTIES
        )
        self._ranges = PositionRangeSet.from_sorted(state.ranges) if state.ranges else _NO_RANGES
        # None until the first batch ack set is held.
        self._batch: dict[Position, list[int]] | None = (
            {p: list(words) for p, words in state.batch.items()} if state.batch else None
        )
        self._persisted_md = state.mark_delete
        self._dirty = False
        self._last_persist_at: float | None = None
        self._closed = False
        self.was_clamped = False
        self._read_position = ledger.next_position(self._md)
        #: Called on the event loop when the cursor turns dirty (set by the topic).
        self.on_dirty: Callable[[], None] | None = None

    # -- read-only views ------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        return self._store is not None

    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def persisted_mark_delete_position(self) -> Position:
        """The mark-delete as last persisted (what trimming may rely on)."""
        return self._persisted_md

    @property
    def properties(self) -> dict[str, int]:
        return dict(self._properties)

    @property
    def read_position(self) -> Position:
        return self._read_position

    @property
    def dirty(self) -> bool:
        """Whether state changed since the last successful persist."""
        return self._dirty

    def is_deleted(self, position: Position) -> bool:
        return position <= self._md or position in self._ranges

    def batch_ack_set(self, position: Position) -> list[int] | None:
        """The held PIP-54 ack set of ``position`` (set bit = unacked), None if none is held."""
        words = self._batch.get(position) if self._batch else None
        return list(words) if words is not None else None

    def individually_deleted(self) -> list[tuple[Position, Position]]:
        """The deleted ranges above the mark-delete, as inclusive (first, last) pairs."""
        return [(item.first, item.last) for item in self._ranges]

    def backlog(self) -> int:
        """Durable entries after the mark-delete that are not individually deleted."""
        last = self._ledger.last_confirmed_position
        if last is None:
            return 0
        first = self._ledger.next_position(self._md)
        if first > last:
            return 0
        total = self._ledger.entry_count_between(first, last)
        return max(0, total - self._ranges.count_between(first, last))

    def has_more_entries(self) -> bool:
        """Whether a durable entry exists at or after the read position."""
        last = self._ledger.last_confirmed_position
        return (
            last is not None
            and self._read_position <= last
            and (self._ledger.entry_count_between(self._read_position, last) > 0)
        )

    # -- acknowledgements -----------------------------------------------------------------

    def mark_delete(self, position: Position, properties: Mapping[str, int] | None = None) -> None:
        """Cumulative ack: everything ``<= position`` is consumed; attach ``properties``.

        Raises:
            InvalidPositionError: ``position`` is beyond the last durable entry.
        """
        self._check_open()
        if position < self._md:
            return
        last = self._ledger.last_confirmed_position
        if position > self._md and (last is None or position > last):
            raise InvalidPositionError(f"mark-delete {position} is beyond the last entry {last}")
        with self._lock or first_lock(self, "_lock"):
            self._md = position
            self._properties = copy_properties(properties) if properties else _NO_PROPERTIES
            self._forget_through(position)
            self._advance()
            self._mark_dirty()
        self._keep_read_position_ahead()

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks. Positions already deleted or never stored are ignored."""
        self._check_open()
        with self._lock or first_lock(self, "_lock"):
            changed = False
            md = self._md
            fresh = [p for p in positions if p > md]
            if not fresh:
                return
            stored = self._stored(fresh)
            for position in fresh:
                if stored is None and not self._ledger.has_entry(position):
                    continue
                if self._ranges is _NO_RANGES:
                    self._ranges = PositionRangeSet()
                changed |= self._ranges.add(position)
                if self._batch:
                    changed |= self._batch.pop(position, None) is not None
            if not changed:
                return
            before = self._md
            self._advance()
            if self._md != before:
                self._properties = _NO_PROPERTIES
            self._mark_dirty()
        self._keep_read_position_ahead()

    def _stored(self, positions: list[Position]) -> bool | None:
        """True if every one of ``positions`` names a stored entry, found with one count of a
        ledger's entries instead of a lookup per id (a client's ack group is a run of one
        ledger); None: look each one up."""
        first, last = min(positions), max(positions)
        if first.ledger_id != last.ledger_id or first.entry_id < 0:
            return None
        # All of [first, last] stored means each of ``positions`` is.
        if self._ledger.entry_count_between(first, last) == last.entry_id - first.entry_id + 1:
            return True
        return None

    def delete_batch_indexes(self, position: Position, ack_set: list[int]) -> None:
        """PIP-54 partial ack: AND ``ack_set`` (set bit = still unacked) into the held set."""
        self._check_open()
        if self.is_deleted(position) or not self._ledger.has_entry(position):
            return
        held = self._batch.get(position) if self._batch else None
        # Java BitSet.and: words past the shorter operand become zero (zip stops there).
        merged = (
            list(ack_set) if held is None else [a & b for a, b in zip(held, ack_set, strict=False)]
        )
        if not any(merged):
            self.delete([position])
            return
        if merged != held:
            with self._lock or first_lock(self, "_lock"):
                if self._batch is None:
                    self._batch = {}
                self._batch[position] = merged
                self._mark_dirty()

    def _forget_through(self, position: Position) -> None:
        if self._ranges:  # an empty set (the shared one too) has nothing to remove
            self._ranges.remove_through(position)
        if self._batch:
            for stale in [p for p in self._batch if p <= position]:
                del self._batch[stale]

    def _advance(self) -> None:
        """Move the mark-delete over deleted ranges that now touch it (rule 2)."""
        while True:
            following = self._ranges.range_containing(self._ledger.next_position(self._md))
            if following is None:
                return
            self._md = following.last
            self._forget_through(self._md)

    # -- reading --------------------------------------------------------------------------

    def seek(self, position: Position) -> None:
        """Move the read position (never before the first entry after the mark-delete)."""
        self._check_open()
        self._read_position = max(position, self._ledger.next_position(self._md))

    def rewind(self) -> None:
        """Read again from the first entry after the mark-delete (deleted ones are skipped)."""
        self._check_open()
        self._read_position = self._ledger.next_position(self._md)

    def reset(self, position: Position) -> None:
        """Subscription seek (Pulsar ``resetCursor``): consumed = everything before ``position``.

        Clears individual and batch acks and properties; the read position becomes ``position``.
        """
        self._check_open()
        with self._lock or first_lock(self, "_lock"):
            self._md = position.previous()
            self._ranges = _NO_RANGES
            self._batch = None
            self._properties = _NO_PROPERTIES
            self._mark_dirty()
        self._read_position = position

    def read_entries(self, max_entries: int, max_bytes: int) -> list[tuple[Position, bytes]]:
        """Read from the read position, skipping deleted entries, and advance past what was read.

        Returns at least one entry when any is available, even if it exceeds ``max_bytes``.
        """
        self._check_open()
        result: list[tuple[Position, bytes]] = []
        budget = max_bytes
        while len(result) < max_entries and budget > 0:
            self._keep_read_position_ahead()
            batch = self._ledger.read(self._read_position, max_entries - len(result), budget)
            if not batch:
                break
            self._read_position = self._ledger.next_position(batch[-1][0])
            for position, entry in batch:
                if not self.is_deleted(position):
                    result.append((position, entry))
                    budget -= len(entry)
        return result

    def _keep_read_position_ahead(self) -> None:
        self._read_position = max(self._read_position, self._ledger.next_position(self._md))

    # -- persistence ----------------------------------------------------------------------

    def snapshot(self) -> CursorState:
        """A consistent copy of the persistable state."""
        with self._lock or first_lock(self, "_lock"):
            return self._snapshot_locked()

    def _snapshot_locked(self) -> CursorState:
        batch = self._batch
        return CursorState(
            name=self.name,
            mark_delete=self._md,
            properties=copy_properties(self._properties),
            ranges=list(self._ranges),
            batch={p: list(words) for p, words in sorted(batch.items())} if batch else {},
        )

    def persist(self) -> None:
        """Write the state atomically (no-op for a non-durable cursor). May run in a thread."""
        if self._store is None:
            return
        with self._persist_lock or first_lock(self, "_persist_lock"):
            if self._closed:
                return  # deleted or abandoned meanwhile: writing would resurrect its file
            # Snapshot and clean flag together: an ack landing in between (the event loop acks
            # while a worker thread persists) must leave the cursor dirty, or it is never saved.
            with self._lock or first_lock(self, "_lock"):
                state = self._snapshot_locked()
                self._dirty = False
            self._save(self._store, state)

    def persist_unshared(self) -> None:
        """``persist`` for a cursor no other thread can reach yet (the registry's, before it
        registers one it made or loaded): there is nothing to exclude, so no lock is made. A
        loaded topic creates its dedup and idempotency cursors this way, and most never ack."""
        if self._store is None:
            return
        state = self._snapshot_locked()
        self._dirty = False
        self._save(self._store, state)

    def _save(self, store: CursorStore, state: CursorState) -> None:
        try:
            store.save(state)
        except BaseException:
            self._dirty = True
            raise
        self._persisted_md = state.mark_delete

    def _mark_dirty(self) -> None:
        """Unsaved changes (event-loop thread); the first one after a save tells ``on_dirty``
        (the topic: a quiet topic's housekeeping comes back to its own period)."""
        if not self._dirty:
            self._dirty = True
            if self.on_dirty is not None:
                self.on_dirty()

    def wants_persist(self, now: float) -> bool:
        """Whether ``maybe_persist(now)`` would write (no I/O: the loop asks before a hop)."""
        if self._store is None or not self._dirty:
            return False
        last = self._last_persist_at
        return last is None or now - last >= self._persist_interval_s

    def maybe_persist(self, now: float) -> bool:
        """Persist if dirty and ``persist_interval_s`` has passed since the last time (``now`` is
        a monotonic clock reading).

        Returns whether it persisted.
        """
        if not self.wants_persist(now):
            return False
        self.persist()
        self._last_persist_at = now
        return True

    def close(self) -> None:
        """Persist pending state (durable cursors) and make the cursor unusable."""
        if self._closed:
            return
        try:
            if self._dirty:
                self.persist()
        finally:
            self._closed = True

    def _mark_closed(self) -> None:
        """Make the cursor unusable without persisting (deleted, or its ledger was deleted or
        abandoned). Waits for a persist running in another thread, so none starts after."""
        with self._persist_lock or first_lock(self, "_persist_lock"):
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError(f"cursor {self.name!r} is closed")

    def _clamp(self, last: Position) -> None:
        """Recovery found less data than this cursor remembers (``md > last``): fall back.

        The properties described entries that no longer exist, so they are dropped; the PIP-6
        layer sees ``was_clamped`` and an empty snapshot and must rebuild by replay.
        """
        log.warning(
            "cursor %r: mark-delete %s beyond recovered end %s; clamping", self.name, self._md, last
        )
        with self._lock or first_lock(self, "_lock"):
            self._md = last
            self._properties = _NO_PROPERTIES
            self._ranges = _NO_RANGES
            self._batch = None
            self._mark_dirty()
        self.was_clamped = True
        self._read_position = self._ledger.next_position(last)

    def _drop_beyond(self, last: Position) -> None:
        """Forget acks of positions past the recovered end (they name entries that are gone)."""
        if not self._ranges and not self._batch:
            return  # the usual case: nothing held, so nothing to drop (and no lock to make)
        with self._lock or first_lock(self, "_lock"):
            current = list(self._ranges)
            kept = [item for item in current if item.first <= last]
            if kept and kept[-1].last > last:
                tail = kept.pop()
                kept.append(tail._replace(last_entry=last.entry_id))
            if kept != current:
                self._ranges = PositionRangeSet.from_sorted(kept) if kept else _NO_RANGES
                self._mark_dirty()
            for position in [p for p in self._batch or () if p > last]:
                assert self._batch is not None
                del self._batch[position]
                self._mark_dirty()
