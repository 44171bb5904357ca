"""``Ledger``: one topic's durable log, made of ordered segments, with group commit and cursors.

Directory layout::

    <topic dir>/ledger.meta              sealed segments, properties, trim horizon (metadata.py)
    <topic dir>/<ledger id:020d>.seg     one file per ledger (segment.py)
    <topic dir>/cursors/<name>.cursor    one file per durable cursor (cursor_state.py)
    <topic dir>/*.tmp                    spares being pre-allocated, atomic-write temps

Positions are ``(ledger_id, entry_id)`` as in Pulsar. Every ``open`` starts a new ledger (the
previous active segment is recovered and sealed), and a failed flush also moves appends to a new
ledger, so a position handed out for data that did not become durable is never reused for
other data.

Write path (group commit):
* ``append`` (event-loop thread) assigns the position, buffers the entry and caches it; no I/O.
  It decides rolls by entry count and bytes (``max_entries_per_ledger``,
  ``max_size_per_ledger_bytes``).
* ``flush`` (a worker thread) swaps the buffer out under the lock, then, without the lock,
  writes each touched segment with one ``pwrite`` and one ``fdatasync``, and publishes the new
  durable end under the lock. The lock is never held across I/O, so appends never wait for a
  disk sync. Flushes are serialised by their own lock.
* Reads return durable entries only (``read``, ``iter_entries``), from the cache when possible.

State after a failed flush (``LedgerFlushError``, an ``OSError``), which the dedup layer relies
on: every entry appended but not yet durable when the failure is handled is discarded: never
readable, not present after a restart (the failed segment is cut back to its durable end and
sealed right away, best effort, retried by the next flush), and its position is never reused.
``last_position == last_confirmed_position`` afterwards; the next ``append`` opens a new ledger
and works normally once the disk does.

Recovery (``open``): sealed segments are checked against their metadata (whole-region crc);
damage raises ``CorruptLedgerError`` naming file and offset and nothing is dropped. Only the
unsealed (previously active) segment may have a torn tail: its longest valid prefix is kept and
the rest (zero pre-allocation included) is truncated durably.

Reading a position inside a trimmed segment yields the first entry still stored; a position
past the end yields ``[]``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.parse
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future, wait
from enum import Enum
from hashlib import sha256
from pathlib import Path
from types import MappingProxyType
from uuid import uuid4

import crc32c

from broker.storage.cache import EntryCache
from broker.storage.config import MAX_ENTRY_BYTES, LedgerConfig
from broker.storage.cursor import Cursor, CursorStore
from broker.storage.cursor_state import CursorState, decode_cursor_state
from broker.storage.errors import (
    CorruptCursorError,
    CorruptLedgerError,
    LedgerClosedError,
    LedgerFlushError,
)
from broker.storage.files import (
    TEMP_SUFFIX,
    FileLayer,
    OsFileLayer,
    atomic_write,
    ensure_directory,
    parse_segment_file_name,
    read_file,
    remove_temp_files,
    segment_file_name,
    unlink_durably,
)
from broker.storage.metadata import (
    METADATA_FILE_NAME,
    LedgerMetadata,
    SealedLedger,
    decode_metadata,
    encode_metadata,
)
from broker.storage.position import Position
from broker.storage.preallocate import shared_preallocator
from broker.storage.recovery import RECORD_HEADER_SIZE, encode_records
from broker.storage.segment import HEADER_SIZE, Segment, preallocate_file

log = logging.getLogger(__name__)

CURSOR_DIR = "cursors"
CURSOR_SUFFIX = ".cursor"
_DEFAULT_MAX_BYTES = 1 << 62


class InitialPosition(Enum):
    """Where a newly created durable cursor starts (Pulsar's ``InitialPosition``)."""

    EARLIEST = "earliest"
    LATEST = "latest"


class Ledger:
    """A topic's durable, segmented log. Create with ``Ledger.open``."""

    def __init__(
        self,
        directory: Path,
        config: LedgerConfig,
        layer: FileLayer,
        preallocator: Executor,
        clock: Callable[[], float],
    ) -> None:
        self.directory = directory
        self.config = config
        self._layer = layer
        self._preallocator = preallocator
        self._clock = clock
        # _lock guards in-memory state and is held only for swaps and bookkeeping, never I/O.
        # _flush_lock serialises flushes (and rolls); _meta_lock serialises metadata rewrites.
        # Lock order: _flush_lock -> _meta_lock -> _lock.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._meta_lock = threading.Lock()
        self._segments: list[Segment] = []
        self._active: Segment | None = None
        self._properties: dict[str, int] = {}
        self._last_trimmed: Position | None = None
        self._pending: list[tuple[Position, bytes]] = []
        self._tail_ledger_id = 0
        self._tail_entries = 0
        self._tail_bytes = HEADER_SIZE
        self._next_ledger_id = 1
        self._must_roll = False
        self._last_position: Position | None = None
        self._last_confirmed: Position | None = None
        self._cache = EntryCache(config.cache_size_bytes)
        self._cursors: dict[str, Cursor] = {}
        self._spare: Future[Path] | None = None
        self._closed = False

    # ==================================================================== opening / closing

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LedgerConfig,
        *,
        file_layer: FileLayer | None = None,
        preallocator: Executor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Ledger:
        """Open (creating if needed) the ledger in ``directory`` and run recovery.

        Args:
            directory: the topic's storage directory.
            config: storage settings.
            file_layer: the file-operation seam (tests inject faults); default real ``os``.
            preallocator: executor zero-filling spare segments; default a shared daemon thread.
            clock: wall clock in seconds (segment seal times and retention).

        Raises:
            CorruptLedgerError: damage in a sealed segment or in the metadata, naming the file
                and offset; ``CorruptCursorError`` (a subclass) for a damaged cursor file.
            OSError: the directory cannot be read or recovery cannot write.
        """
        layer = file_layer or OsFileLayer()
        ledger = cls(directory, config, layer, preallocator or shared_preallocator(), clock)
        ledger._recover()
        return ledger

    def _recover(self) -> None:
        layer = self._layer
        ensure_directory(layer, self.directory)
        ensure_directory(layer, self._cursor_dir)
        remove_temp_files(layer, self.directory)
        remove_temp_files(layer, self._cursor_dir)
        meta = self._read_metadata()
        self._properties = dict(meta.properties)
        self._last_trimmed = meta.last_trimmed
        self._segments = [
            Segment.open_sealed(
                layer, self._segment_path(info.ledger_id), info, self.config.verify_sealed_on_open
            )
            for info in sorted(meta.ledgers, key=lambda info: info.ledger_id)
        ]
        on_disk = self._segment_files()
        horizon = max(
            [s.ledger_id for s in self._segments]
            + ([meta.last_trimmed.ledger_id] if meta.last_trimmed else [])
            + [0]
        )
        self._recover_unsealed(on_disk, horizon)
        self._next_ledger_id = max([horizon, *on_disk]) + 1
        self._start_new_tail_ledger()
        self._last_confirmed = self._last_stored_position() or self._last_trimmed
        self._last_position = self._last_confirmed
        self._load_cursors()

    def _recover_unsealed(self, on_disk: dict[int, Path], horizon: int) -> None:
        """Seal the previous active segment(s); delete empty ones and trim leftovers."""
        sealed_ids = {s.ledger_id for s in self._segments}
        doomed: list[Path] = []
        recovered: list[Segment] = []
        for ledger_id in sorted(on_disk.keys() - sealed_ids):
            if ledger_id <= horizon:
                # Only ids above every sealed/trimmed one can be unsealed: this is a segment
                # whose trim was interrupted between the metadata update and the unlink.
                doomed.append(on_disk[ledger_id])
                continue
            segment = Segment.recover(self._layer, on_disk[ledger_id], ledger_id)
            if segment.entries:
                recovered.append(segment)
            else:
                doomed.append(segment.path)
        if recovered:
            now_ms = self._now_ms()
            infos = [s.info(now_ms) for s in recovered]
            self._store_metadata(sealed=[*self._sealed_infos(), *infos])
            for segment in recovered:
                segment.mark_sealed(now_ms)
            self._segments.extend(recovered)
        for path in doomed:
            unlink_durably(self._layer, path)

    def close(self) -> None:
        """Flush, seal the active segment, persist cursors, release resources. Idempotent.

        Raises:
            LedgerFlushError / OSError: the final flush, seal or a cursor persist failed
                (everything else is still attempted and resources are released; entries not
                yet durable are lost, as after a crash).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        failure: OSError | None = None
        try:
            self.flush()
            with self._flush_lock:
                if self._active is not None:
                    self._seal_active()
        except OSError as exc:
            failure = exc
        for cursor in list(self._cursors.values()):
            try:
                cursor.close()
            except OSError as exc:
                failure = failure or exc
        self._release()
        if failure is not None:
            raise failure

    def delete(self) -> None:
        """Remove the topic's storage entirely (segments, metadata, cursors, directory)."""
        with self._lock:
            self._closed = True
            self._pending = []
        for cursor in self._cursors.values():
            cursor._mark_closed()
        self._cursors.clear()
        self._release()
        for folder in (self._cursor_dir, self.directory):
            if folder.is_dir():
                for entry in os.scandir(folder):
                    if entry.is_file():
                        self._layer.unlink(Path(entry.path))
                self._layer.rmdir(folder)
        self._layer.fsync_dir(self.directory.parent)

    def _release(self) -> None:
        """Drop the spare and descriptors without writing anything else."""
        with self._flush_lock:
            spare, self._spare = self._spare, None
            if spare is not None:
                path = _result_or_none(spare)
                if path is not None and path.exists():
                    try:
                        self._layer.unlink(path)
                    except OSError:
                        log.warning("could not remove spare segment %s", path)
            for segment in self._segments:
                try:
                    segment.close()
                except OSError:
                    log.warning("could not close segment %s", segment.path)
            self._active = None
            self._cache.clear()

    def _abandon(self) -> None:
        """Test hook: stop using the ledger as if the process died (no flush, seal, persist)."""
        with self._lock:
            self._closed = True
            self._pending = []
        for cursor in self._cursors.values():
            cursor._mark_closed()
        with self._flush_lock:
            spare, self._spare = self._spare, None
            if spare is not None:
                wait([spare])  # let the worker finish; a leftover spare is removed on open
            for segment in self._segments:
                try:
                    segment.close()
                except BaseException:
                    pass  # the file layer may be "dead" in a simulated crash

    # ==================================================================== write path

    def append(self, data: bytes) -> Position:
        """Buffer ``data`` as the next entry and return its position (not yet durable).

        Called from the event-loop thread; does no I/O.

        Raises:
            LedgerClosedError: the ledger is closed.
            ValueError: the entry exceeds the maximum entry size.
        """
        if len(data) > MAX_ENTRY_BYTES:
            raise ValueError(f"entry of {len(data)} bytes exceeds {MAX_ENTRY_BYTES}")
        record_size = RECORD_HEADER_SIZE + len(data)
        with self._lock:
            if self._closed:
                raise LedgerClosedError(f"ledger {self.directory} is closed")
            if self._must_roll or self._tail_is_full(record_size):
                self._start_new_tail_ledger()
            position = Position(self._tail_ledger_id, self._tail_entries)
            self._tail_entries += 1
            self._tail_bytes += record_size
            self._pending.append((position, data))
            self._cache.put(position, data)
            self._last_position = position
            self._maybe_request_spare()
        return position

    def _tail_is_full(self, record_size: int) -> bool:
        if self._tail_entries == 0:
            return False
        return (
            self._tail_entries >= self.config.max_entries_per_ledger
            or self._tail_bytes + record_size > self.config.max_size_per_ledger_bytes
        )

    def _start_new_tail_ledger(self) -> None:
        self._tail_ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        self._tail_entries = 0
        self._tail_bytes = HEADER_SIZE
        self._must_roll = False

    def _maybe_request_spare(self) -> None:
        """Start zero-filling the next segment once the tail ledger is half full (under lock)."""
        if self._spare is not None or self.config.segment_preallocation == 0:
            return
        half_full = (
            self._tail_entries * 2 >= self.config.max_entries_per_ledger
            or self._tail_bytes * 2 >= self.config.max_size_per_ledger_bytes
        )
        if half_full:
            path = self.directory / f"spare-{uuid4().hex}.seg{TEMP_SUFFIX}"
            size = self.config.segment_preallocation
            self._spare = self._preallocator.submit(_make_spare, self._layer, path, size)

    def flush(self) -> Position | None:
        """Make every entry appended so far durable; return the last durable position.

        One write and (with ``sync_data``) one ``fdatasync`` per touched segment. Safe to run
        in a worker thread concurrently with ``append``. Returns None if nothing is durable.

        Raises:
            LedgerFlushError: a write/sync failed; see the module docstring for the state after.
        """
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, []
            if not batch:
                return self._last_confirmed
            try:
                for ledger_id, entries in _split_by_ledger(batch):
                    self._write_chunk(ledger_id, entries)
            except OSError as exc:
                discarded = self._discard_after_failure(exc)
                raise LedgerFlushError(exc, self._last_confirmed, discarded) from exc
            return self._last_confirmed

    def _write_chunk(self, ledger_id: int, entries: list[tuple[Position, bytes]]) -> None:
        if self._active is None or self._active.ledger_id != ledger_id:
            self._roll_to(ledger_id)
        segment = self._active
        assert segment is not None
        records, offsets = encode_records(data for _, data in entries)
        segment.write(records, self.config.sync_data)
        new_crc = crc32c.crc32c(records, segment.crc)
        with self._lock:
            segment.commit(offsets, len(records), new_crc)
            self._last_confirmed = entries[-1][0]

    def _roll_to(self, ledger_id: int) -> None:
        """Seal the active segment and make ``ledger_id`` the new active one (flush lock held)."""
        if self._active is not None:
            self._seal_active()
        spare = self._take_spare()
        segment = Segment.create(self._layer, self._segment_path(ledger_id), ledger_id, spare)
        with self._lock:
            self._segments.append(segment)
            self._active = segment

    def _seal_active(self) -> None:
        """Cut the active segment at its durable end and list it as sealed (or delete it if
        it holds nothing). Idempotent; on error the segment stays active-in-memory."""
        segment = self._active
        assert segment is not None
        if segment.entries == 0:
            segment.close()
            unlink_durably(self._layer, segment.path)
            with self._lock:
                self._segments.remove(segment)
                self._active = None
            return
        segment.prepare_seal()
        now_ms = self._now_ms()
        with self._meta_lock:
            self._store_metadata(sealed=[*self._sealed_infos(), segment.info(now_ms)])
            with self._lock:
                segment.mark_sealed(now_ms)
                self._active = None

    def _take_spare(self) -> Path | None:
        with self._lock:
            spare, self._spare = self._spare, None
        return None if spare is None else _result_or_none(spare)

    def _discard_after_failure(self, exc: OSError) -> Position | None:
        """Forget everything not durable and cut the failed segment back (flush lock held)."""
        with self._lock:
            discarded = self._last_position if self._last_position != self._last_confirmed else None
            self._pending = []
            self._cache.discard_after(self._last_confirmed)
            self._last_position = self._last_confirmed
            self._must_roll = True
        log.error(
            "flush of %s failed (%s); discarded entries through %s", self.directory, exc, discarded
        )
        if self._active is not None:
            try:
                self._seal_active()
            except OSError as seal_error:
                log.error(
                    "could not seal %s after a failed flush: %s", self._active.path, seal_error
                )
        return discarded

    # ==================================================================== positions

    @property
    def last_position(self) -> Position | None:
        """The last appended position (maybe not durable yet); None if nothing ever was."""
        return self._last_position

    @property
    def last_confirmed_position(self) -> Position | None:
        """The last durable position; None if nothing was ever durable."""
        return self._last_confirmed

    @property
    def first_position(self) -> Position | None:
        """The first durable entry still stored (after trimming); None if none is."""
        with self._lock:
            for segment in self._segments:
                if segment.entries:
                    return Position(segment.ledger_id, 0)
        return None

    def before_first_position(self) -> Position:
        """A mark-delete position meaning "nothing consumed": ``(first ledger id, -1)``."""
        with self._lock:
            first_id = self._segments[0].ledger_id if self._segments else self._tail_ledger_id
        return Position(first_id, -1)

    def next_position(self, position: Position) -> Position:
        """The first durable entry after ``position``, else ``(ledger, entry + 1)``."""
        with self._lock:
            for segment in self._segments_from(position.ledger_id):
                if segment.ledger_id == position.ledger_id:
                    if position.entry_id + 1 < segment.entries:
                        return Position(segment.ledger_id, max(position.entry_id + 1, 0))
                elif segment.entries:
                    return Position(segment.ledger_id, 0)
        return Position(position.ledger_id, position.entry_id + 1)

    def has_entry(self, position: Position) -> bool:
        """Whether ``position`` names a durable, stored entry."""
        with self._lock:
            for segment in self._segments_from(position.ledger_id):
                return (
                    segment.ledger_id == position.ledger_id
                    and 0 <= position.entry_id < segment.entries
                )
        return False

    def entry_count_between(self, first: Position, last: Position) -> int:
        """Number of durable stored entries ``p`` with ``first <= p <= last``."""
        total = 0
        with self._lock:
            for segment in self._segments_from(first.ledger_id):
                if segment.ledger_id > last.ledger_id:
                    break
                low = max(first.entry_id, 0) if segment.ledger_id == first.ledger_id else 0
                high = segment.entries - 1
                if segment.ledger_id == last.ledger_id:
                    high = min(high, last.entry_id)
                total += max(0, high - low + 1)
        return total

    def _segments_from(self, ledger_id: int) -> list[Segment]:
        """Segments with id >= ``ledger_id`` (call under the lock)."""
        ids = [s.ledger_id for s in self._segments]
        return self._segments[bisect_left(ids, ledger_id) :]

    def _last_stored_position(self) -> Position | None:
        for segment in reversed(self._segments):
            if segment.entries:
                return Position(segment.ledger_id, segment.entries - 1)
        return None

    # ==================================================================== reads

    def read(
        self, position: Position, max_entries: int, max_bytes: int = _DEFAULT_MAX_BYTES
    ) -> list[tuple[Position, bytes]]:
        """Durable entries at or after ``position``, in order.

        At most ``max_entries``; stops before exceeding ``max_bytes`` of entry data but always
        returns at least one entry if any is available. A position in a trimmed segment starts
        at the first stored entry; a position past the end returns ``[]``.

        Raises:
            CorruptLedgerError: a record read from disk fails its crc.
        """
        result: list[tuple[Position, bytes]] = []
        budget = max_bytes
        while len(result) < max_entries and budget > 0:
            located = self._locate(position)
            if located is None:
                break
            segment, first, entries, data_end = located
            stop, size = first, 0
            while stop < entries and len(result) + (stop - first) < max_entries:
                entry_size = segment.entry_size(stop, entries, data_end)
                if size + entry_size > budget and (result or stop > first):
                    break
                size += entry_size
                stop += 1
            if stop == first:
                break
            chunk = self._fetch(segment, first, stop, entries, data_end)
            if chunk is None:
                continue  # the segment was trimmed under us; locate again
            result.extend(chunk)
            budget -= size
            position = Position(segment.ledger_id, stop)
            if stop < entries:
                break  # stopped by a limit, not by the end of the segment
        return result

    def _locate(self, position: Position) -> tuple[Segment, int, int, int] | None:
        """The segment and entry holding the first durable entry >= ``position``, with a
        consistent (entries, data_end) snapshot of that segment."""
        with self._lock:
            for segment in self._segments_from(position.ledger_id):
                first = max(position.entry_id, 0) if segment.ledger_id == position.ledger_id else 0
                if first < segment.entries:
                    return segment, first, segment.entries, segment.data_end
        return None

    def _fetch(
        self, segment: Segment, first: int, stop: int, entries: int, data_end: int
    ) -> list[tuple[Position, bytes]] | None:
        """Entries ``first .. stop-1`` of ``segment``: cached ones from memory, the rest in
        runs from disk. None if the segment file vanished because it was trimmed."""
        positions = [Position(segment.ledger_id, i) for i in range(first, stop)]
        with self._lock:
            cached = [self._cache.get(p) for p in positions]
        index = 0
        while index < len(cached):
            if cached[index] is not None:
                index += 1
                continue
            run_end = index
            while run_end < len(cached) and cached[run_end] is None:
                run_end += 1
            try:
                loaded = segment.read_entries(first + index, first + run_end, entries, data_end)
            except FileNotFoundError:
                with self._lock:
                    if segment in self._segments:
                        raise CorruptLedgerError(segment.path, 0, "segment file vanished") from None
                return None
            cached[index:run_end] = loaded
            index = run_end
        return [(p, data) for p, data in zip(positions, cached, strict=True) if data is not None]

    def iter_entries(
        self, start: Position, batch_entries: int = 256, batch_bytes: int = 4 << 20
    ) -> Iterator[tuple[Position, bytes]]:
        """Every durable entry from ``start`` on (dedup replay, seek by publish time).

        Reads in batches; entries made durable while iterating are included.
        """
        position = start
        while True:
            batch = self.read(position, batch_entries, batch_bytes)
            if not batch:
                return
            yield from batch
            position = Position(batch[-1][0].ledger_id, batch[-1][0].entry_id + 1)

    def find_newest_matching(self, predicate: Callable[[bytes], bool]) -> Position | None:
        """Binary search for the last durable entry satisfying ``predicate``.

        ``predicate`` must hold for a prefix of the log and fail after it (e.g. "publish time <
        T"); this is Pulsar's ``findNewestMatching``, used to seek by time. None if no entry
        matches.
        """
        with self._lock:
            spans = [(s.ledger_id, s.entries) for s in self._segments if s.entries]
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

    # ==================================================================== properties

    @property
    def properties(self) -> Mapping[str, int]:
        """Ledger properties (e.g. the PIP-68 topic epoch); read-only view."""
        return MappingProxyType(dict(self._properties))

    def set_property(self, key: str, value: int) -> None:
        """Set one property; durable before returning."""
        self.set_properties({key: value})

    def set_properties(self, values: Mapping[str, int]) -> None:
        """Set several properties atomically; durable before returning."""
        self._check_open()
        with self._meta_lock:
            merged = {**self._properties, **{str(k): int(v) for k, v in values.items()}}
            self._store_metadata(properties=merged)
            self._properties = merged

    # ==================================================================== cursors

    @property
    def cursors(self) -> Mapping[str, Cursor]:
        """The durable cursors by name."""
        return MappingProxyType(dict(self._cursors))

    def open_cursor(
        self, name: str, initial_position: InitialPosition = InitialPosition.LATEST
    ) -> Cursor:
        """The durable cursor ``name``, created (and persisted) at ``initial_position`` if new."""
        self._check_open()
        existing = self._cursors.get(name)
        if existing is not None:
            return existing
        if not name:
            raise ValueError("cursor name must not be empty")
        if initial_position is InitialPosition.LATEST and self._last_confirmed is not None:
            start = self._last_confirmed
        else:
            start = self.before_first_position()
        cursor = self._make_cursor(CursorState(name=name, mark_delete=start))
        cursor.persist()
        self._cursors[name] = cursor
        return cursor

    def delete_cursor(self, name: str) -> None:
        """Remove durable cursor ``name`` and its file (durably). Unknown names are ignored."""
        cursor = self._cursors.pop(name, None)
        if cursor is not None:
            cursor._mark_closed()
        unlink_durably(self._layer, self._cursor_path(name))

    def new_non_durable_cursor(self, start: Position) -> Cursor:
        """An in-memory cursor (reader) whose first read is the first entry at or after
        ``start``. It does not hold back trimming (as in Pulsar)."""
        self._check_open()
        state = CursorState(name=f"reader-{uuid4().hex[:12]}", mark_delete=start.previous())
        return Cursor(
            state.name, self, state, store=None, persist_interval_s=self.config.persist_interval_s
        )

    def _make_cursor(self, state: CursorState) -> Cursor:
        store = CursorStore(
            self._layer,
            self._cursor_path(state.name),
            self.config.max_unacked_ranges_to_persist,
            self.config.max_batch_deleted_index_to_persist,
        )
        return Cursor(
            state.name, self, state, store=store, persist_interval_s=self.config.persist_interval_s
        )

    def _load_cursors(self) -> None:
        last = self._last_confirmed or self.before_first_position()
        for entry in sorted(os.scandir(self._cursor_dir), key=lambda e: e.name):
            if not entry.name.endswith(CURSOR_SUFFIX):
                continue
            path = Path(entry.path)
            state = decode_cursor_state(read_file(path), path)
            if self._cursor_path(state.name) != path:
                raise CorruptCursorError(path, 0, f"file holds cursor {state.name!r}")
            cursor = self._make_cursor(state)
            if cursor.mark_delete_position > last:
                cursor._clamp(last)
            else:
                cursor._drop_beyond(last)
            if cursor.dirty:
                cursor.persist()
            self._cursors[state.name] = cursor

    # ==================================================================== trimming

    def trim(self, now: float | None = None) -> int:
        """Delete whole sealed segments that every durable cursor has consumed and retention
        no longer protects; returns how many were deleted.

        A segment is consumed when each durable cursor's *persisted* mark-delete is at or past
        its last entry (no durable cursor: all are). A consumed segment is deleted, oldest first,
        when its age since sealing exceeds ``retention_time_minutes`` or while the ledger's total
        size exceeds ``retention_size_mb`` (-1 = no limit of that kind; Pulsar's rule). The
        active segment is never deleted.
        """
        self._check_open()
        now_ms = int((self._clock() if now is None else now) * 1000)
        with self._meta_lock:
            with self._lock:
                doomed = self._trimmable(now_ms)
            if not doomed:
                return 0
            last = doomed[-1]
            gone = {s.ledger_id for s in doomed}
            self._store_metadata(
                sealed=[i for i in self._sealed_infos() if i.ledger_id not in gone],
                last_trimmed=Position(last.ledger_id, last.entries - 1),
            )
            with self._lock:
                self._segments = [s for s in self._segments if s.ledger_id not in gone]
                self._last_trimmed = Position(last.ledger_id, last.entries - 1)
                for ledger_id in gone:
                    self._cache.discard_ledger(ledger_id)
        for segment in doomed:
            self._layer.unlink(segment.path)
        self._layer.fsync_dir(self.directory)
        return len(doomed)

    def _trimmable(self, now_ms: int) -> list[Segment]:
        """The prefix of sealed segments ``trim`` may delete (call under the lock)."""
        durable_marks = [c.persisted_mark_delete_position for c in self._cursors.values()]
        slowest = min(durable_marks, default=None)
        retention_ms = self.config.retention_time_minutes * 60_000
        retention_bytes = self.config.retention_size_mb * 1024 * 1024
        total = sum(s.data_bytes for s in self._segments)
        doomed: list[Segment] = []
        for segment in self._segments:
            if not segment.sealed or segment.sealed_at_ms is None:
                break
            if slowest is not None and slowest < Position(segment.ledger_id, segment.entries - 1):
                break
            expired = retention_ms >= 0 and now_ms - segment.sealed_at_ms >= retention_ms
            over_quota = retention_bytes >= 0 and total > retention_bytes
            if not (expired or over_quota):
                break
            doomed.append(segment)
            total -= segment.data_bytes
        return doomed

    # ==================================================================== helpers

    def stats(self) -> dict[str, int]:
        """Plain counters for metrics."""
        with self._lock:
            return {
                "segments": len(self._segments),
                "stored_entries": sum(s.entries for s in self._segments),
                "stored_bytes": sum(s.data_bytes for s in self._segments),
                "pending_entries": len(self._pending),
                "cache_bytes": self._cache.size_bytes,
                "cache_hits": self._cache.hits,
                "cache_misses": self._cache.misses,
            }

    @property
    def _cursor_dir(self) -> Path:
        return self.directory / CURSOR_DIR

    def _segment_path(self, ledger_id: int) -> Path:
        return self.directory / segment_file_name(ledger_id)

    def _cursor_path(self, name: str) -> Path:
        return self._cursor_dir / (_cursor_file_stem(name) + CURSOR_SUFFIX)

    def _segment_files(self) -> dict[int, Path]:
        found: dict[int, Path] = {}
        for entry in os.scandir(self.directory):
            ledger_id = parse_segment_file_name(entry.name)
            if ledger_id is not None and entry.is_file():
                found[ledger_id] = Path(entry.path)
        return found

    def _read_metadata(self) -> LedgerMetadata:
        path = self.directory / METADATA_FILE_NAME
        try:
            data = read_file(path)
        except FileNotFoundError:
            return LedgerMetadata()
        return decode_metadata(data, path)

    def _sealed_infos(self) -> list[SealedLedger]:
        with self._lock:
            return [s.info(s.sealed_at_ms) for s in self._segments if s.sealed_at_ms is not None]

    def _store_metadata(
        self,
        *,
        sealed: list[SealedLedger] | None = None,
        properties: dict[str, int] | None = None,
        last_trimmed: Position | None = None,
    ) -> None:
        """Rewrite ``ledger.meta`` from current state with the given replacements."""
        meta = LedgerMetadata(
            ledgers=tuple(sealed if sealed is not None else self._sealed_infos()),
            properties=properties if properties is not None else dict(self._properties),
            last_trimmed=last_trimmed if last_trimmed is not None else self._last_trimmed,
        )
        atomic_write(self._layer, self.directory / METADATA_FILE_NAME, encode_metadata(meta))

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError(f"ledger {self.directory} is closed")


def _split_by_ledger(
    batch: list[tuple[Position, bytes]],
) -> Iterator[tuple[int, list[tuple[Position, bytes]]]]:
    """Consecutive runs of ``batch`` that belong to the same ledger."""
    start = 0
    for index in range(1, len(batch) + 1):
        if index == len(batch) or batch[index][0].ledger_id != batch[start][0].ledger_id:
            yield batch[start][0].ledger_id, batch[start:index]
            start = index


def _make_spare(layer: FileLayer, path: Path, size: int) -> Path:
    preallocate_file(layer, path, size)
    return path


def _result_or_none(future: Future[Path]) -> Path | None:
    """The spare's path, or None if pre-allocating it failed (logged)."""
    try:
        return future.result()
    except Exception as exc:
        log.warning("pre-allocating a spare segment failed: %s", exc)
        return None


def _cursor_file_stem(name: str) -> str:
    """A file-system-safe, reversible-enough name (long names fall back to a hash; the real
    name is stored inside the file)."""
    quoted = urllib.parse.quote(name, safe="")
    return quoted if len(quoted) <= 180 else "h-" + sha256(name.encode()).hexdigest()
