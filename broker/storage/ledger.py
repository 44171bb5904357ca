"""``Ledger``: one topic's durable log, made of ordered segments, with group commit and cursors.

Directory layout::

    <topic dir>/ledger.meta              sealed segments, properties, trim horizon (metadata.py)
    <topic dir>/<ledger id:020d>.seg     one file per ledger (segment.py)
    <topic dir>/cursors/<name>.cursor    one file per durable cursor (cursor_state.py)
    <topic dir>/*.tmp                    spares being pre-allocated, atomic-write temps

Positions are ``(ledger_id, entry_id)`` as in Pulsar. Every ``open`` starts a new ledger (the
previous active segment is recovered and sealed), and a failed flush also moves appends to a new
ledger, so a position handed out for data that never became durable is not reused for other
data while anything may remember it.

Write path (group commit):
* ``append`` (event-loop thread) assigns the position and buffers the entry; no I/O.
  It decides rolls by entry count and bytes (``max_entries_per_ledger``,
  ``max_size_per_ledger_bytes``).
* ``flush`` (a worker thread) swaps the buffer out under the lock, then, without any lock,
  writes each touched segment with one ``pwrite`` and one ``fdatasync``, and publishes the new
  durable end, then puts the entries in the entry cache for tailing readers. Locks are never
  held across a sync, so appends never wait for the disk. Flushes are serialised by their own
  lock.
* Reads return durable entries only, from the cache when possible (``reader.py``).

State after a failed flush (``LedgerFlushError``, an ``OSError``), which the dedup layer relies
on: every entry appended but not durable when the failure is handled is discarded: never
readable, absent after a restart (the failed segment is cut back to its durable end and sealed
at once, best effort, and again by the next flush if that did not work), and its position is
never reused. ``last_position == last_confirmed_position`` afterwards; the next ``append`` opens
a new ledger and works normally as soon as the disk does. The one residual case: if the disk
refuses even the truncation *and* the process then dies, records of the failed batch that did
reach the file are valid and come back after the restart, as in any log without a commit
record; dedup replay then sees them, so a producer retry is answered as a duplicate.

Recovery (``open``): sealed segments are checked against their metadata (header and
whole-region crc); damage raises ``CorruptLedgerError`` naming file and offset, and nothing is
dropped. Only the unsealed (previously active) segment may have a torn tail: its longest valid
prefix is kept and the rest, zero pre-allocation included, is truncated durably.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future, wait
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from uuid import uuid4

import crc32c

from broker.storage.cache import EntryCache
from broker.storage.config import MAX_ENTRY_BYTES, LedgerConfig
from broker.storage.cursor import Cursor
from broker.storage.cursors import CURSOR_DIR, CursorRegistry
from broker.storage.errors import LedgerClosedError, LedgerFlushError
from broker.storage.files import (
    TEMP_SUFFIX,
    FileLayer,
    OsFileLayer,
    atomic_write,
    ensure_directory,
    list_files,
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
from broker.storage.reader import UNLIMITED, EntryReader
from broker.storage.recovery import RECORD_HEADER_SIZE, encode_records
from broker.storage.segment import HEADER_SIZE, Segment, preallocate_file
from broker.storage.segments import SegmentTable

log = logging.getLogger(__name__)


class InitialPosition(Enum):
    """Where a newly created durable cursor starts (Pulsar's ``InitialPosition``)."""

    EARLIEST = "earliest"
    LATEST = "latest"


class Ledger:
    """A topic's durable, segmented log. Create with ``Ledger.open``.

    Thread safety: ``append`` and cursor operations belong to one thread (the event loop);
    ``flush`` may run concurrently in one worker thread; reads and position queries are safe
    from any thread.
    """

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
        # _lock guards the append side (buffer, tail, spare) and is held for swaps only.
        # _flush_lock serialises flushes/rolls; _meta_lock serialises ledger.meta rewrites.
        # Order: _flush_lock -> _meta_lock -> _lock -> (table lock, cache lock).
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._meta_lock = threading.Lock()
        self._table = SegmentTable()
        self._cache = EntryCache(config.cache_size_bytes)
        self._reader = EntryReader(self._table, self._cache)
        self._cursors = CursorRegistry(self, directory / CURSOR_DIR, layer, config)
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
        self._spare: Future[Path] | None = None
        self._closed = False

    # ==================================================================== open / close

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
            clock: wall clock in seconds (segment seal times, retention).

        Raises:
            CorruptLedgerError: damage in a sealed segment or in ``ledger.meta``, naming the
                file and offset; ``CorruptCursorError`` (a subclass) for a damaged cursor file.
            OSError: the directory cannot be read, or recovery cannot write.
        """
        layer = file_layer or OsFileLayer()
        ledger = cls(directory, config, layer, preallocator or shared_preallocator(), clock)
        ledger._recover()
        return ledger

    def _recover(self) -> None:
        ensure_directory(self._layer, self.directory)
        ensure_directory(self._layer, self._cursors.directory)
        remove_temp_files(self._layer, self.directory)
        remove_temp_files(self._layer, self._cursors.directory)
        meta = self._read_metadata()
        self._properties = dict(meta.properties)
        self._last_trimmed = meta.last_trimmed
        verify = self.config.verify_sealed_on_open
        for info in meta.ledgers:
            path = self._segment_path(info.ledger_id)
            self._table.add(Segment.open_sealed(self._layer, path, info, verify))
        on_disk = self._segment_files()
        known = [info.ledger_id for info in meta.ledgers]
        horizon = max([*known, meta.last_trimmed.ledger_id if meta.last_trimmed else 0, 0])
        self._recover_unsealed(on_disk, horizon)
        self._next_ledger_id = max([horizon, *on_disk]) + 1
        self._start_new_tail_ledger()
        self._last_confirmed = self._table.last_position() or self._last_trimmed
        self._last_position = self._last_confirmed
        self._cursors.load_all(self._last_confirmed or self.before_first_position())

    def _recover_unsealed(self, on_disk: dict[int, Path], horizon: int) -> None:
        """Seal the previous active segment; delete empty segments and trim leftovers."""
        sealed_ids = {info.ledger_id for info in self._table.sealed_infos()}
        doomed: list[Path] = []
        recovered: list[Segment] = []
        for ledger_id in sorted(on_disk.keys() - sealed_ids):
            if ledger_id <= horizon:
                # Unsealed files can only be newer than every sealed or trimmed segment; this
                # one is a trim interrupted between the metadata update and the unlink.
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
            self._store_metadata(sealed=[*self._table.sealed_infos(), *infos])
            for segment in recovered:
                segment.mark_sealed(now_ms)
                self._table.add(segment)
        for path in doomed:
            unlink_durably(self._layer, path)

    def close(self) -> None:
        """Flush, seal the active segment, persist cursors, release resources. Idempotent.

        Raises:
            LedgerFlushError / OSError: the final flush, seal or a cursor persist failed.
                Everything else is still attempted and resources are released; entries not yet
                durable are then lost, exactly as after a crash.
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
        failure = self._cursors.close_all() or failure
        self._release(remove_spare=True)
        if failure is not None:
            raise failure

    def delete(self) -> None:
        """Remove the topic's storage entirely: segments, metadata, cursors, the directory."""
        with self._lock:
            self._closed = True
            self._pending = []
        self._cursors.abandon_all()
        self._release(remove_spare=True)
        for folder in (self._cursors.directory, self.directory):
            if folder.is_dir():
                for path in list_files(folder):
                    self._layer.unlink(path)
                self._layer.rmdir(folder)
        self._layer.fsync_dir(self.directory.parent)

    def _abandon(self) -> None:
        """Test hook: stop using the ledger as if the process died (no flush, seal, persist)."""
        with self._lock:
            self._closed = True
            self._pending = []
        self._cursors.abandon_all()
        self._release(remove_spare=False)

    def _release(self, remove_spare: bool) -> None:
        """Drop the spare and the write descriptor; write nothing else."""
        with self._flush_lock:
            with self._lock:
                spare, self._spare = self._spare, None
            if spare is not None:
                wait([spare])  # never leave the worker writing into a released directory
            path = _result_or_none(spare) if spare is not None and remove_spare else None
            if path is not None and path.exists():
                try:
                    self._layer.unlink(path)
                except OSError as exc:
                    log.warning("could not remove spare segment %s: %s", path, exc)
            if self._active is not None:
                try:
                    self._active.close()
                except BaseException as exc:  # a simulated power cut raises from every call
                    log.warning("could not close %s: %r", self._active.path, exc)
                self._active = None
            self._cache.clear()

    # ==================================================================== write path

    def append(self, data: bytes) -> Position:
        """Buffer ``data`` as the next entry and return its position (not yet durable).

        Called from the event-loop thread; performs no I/O.

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
            if self._must_roll or (self._tail_entries and self._tail_is_full(record_size)):
                self._start_new_tail_ledger()
            position = Position(self._tail_ledger_id, self._tail_entries)
            self._tail_entries += 1
            self._tail_bytes += record_size
            self._pending.append((position, data))
            self._last_position = position
            if self._spare is None:
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
        """Start zero-filling the next segment file ahead of need (lock held).

        Needed when the tail ledger has no file yet (first append after open or after a
        failure) or once it is half full, so the spare is ready when it rolls.
        """
        if self._spare is not None or self.config.segment_preallocation == 0:
            return
        active = self._active
        needs_file = active is None or active.ledger_id != self._tail_ledger_id
        half_full = (
            self._tail_entries * 2 >= self.config.max_entries_per_ledger
            or self._tail_bytes * 2 >= self.config.max_size_per_ledger_bytes
        )
        if needs_file or half_full:
            path = self.directory / f"spare-{uuid4().hex}.seg{TEMP_SUFFIX}"
            size = self.config.segment_preallocation
            self._spare = self._preallocator.submit(_make_spare, self._layer, path, size)

    def flush(self) -> Position | None:
        """Make every entry appended so far durable; return the last durable position.

        One write and (with ``sync_data``) one ``fdatasync`` per touched segment; a roll adds
        the seal of the previous segment. Safe in a worker thread concurrently with ``append``.
        Returns None if nothing was ever durable.

        Raises:
            LedgerFlushError: a write or sync failed; see the module docstring for the state.
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
        self._table.commit(segment, offsets, len(records), new_crc)
        self._last_confirmed = entries[-1][0]
        first = entries[0][0].entry_id  # for tailing readers; filled off the event loop
        self._cache.put_block(ledger_id, first, [data for _, data in entries])
        segment.extend_ahead(self._preallocator, self.config.segment_preallocation)

    def _roll_to(self, ledger_id: int) -> None:
        """Seal the active segment and make ``ledger_id`` the active one (flush lock held)."""
        if self._active is not None:
            self._seal_active()
        with self._lock:
            spare, self._spare = self._spare, None
        spare_path = None if spare is None else _result_or_none(spare)
        path = self._segment_path(ledger_id)
        segment = Segment.create(self._layer, path, ledger_id, spare_path)
        self._table.add(segment)
        self._active = segment
        with self._lock:
            self._maybe_request_spare()  # the tail may already be half way to the next roll

    def _seal_active(self) -> None:
        """Cut the active segment at its durable end and list it as sealed in ``ledger.meta``
        (or delete it if it holds nothing). Idempotent; on error it stays active in memory."""
        segment = self._active
        assert segment is not None
        if segment.entries == 0:
            segment.close()
            unlink_durably(self._layer, segment.path)
            self._table.remove({segment.ledger_id})
            self._active = None
            return
        segment.prepare_seal()
        now_ms = self._now_ms()
        with self._meta_lock:
            self._store_metadata(sealed=[*self._table.sealed_infos(), segment.info(now_ms)])
            self._table.mark_sealed(segment, now_ms)
        self._active = None

    def _discard_after_failure(self, exc: OSError) -> Position | None:
        """Forget everything not durable and cut the failed segment back (flush lock held)."""
        with self._lock:
            last_confirmed = self._last_confirmed
            discarded = self._last_position if self._last_position != last_confirmed else None
            self._pending = []
            self._last_position = last_confirmed
            self._must_roll = True
        log.error(
            "flush of %s failed (%s); discarded entries up to %s", self.directory, exc, discarded
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
        """The last appended position (maybe not durable yet); None if none ever was."""
        return self._last_position

    @property
    def last_confirmed_position(self) -> Position | None:
        """The last durable position; None if nothing was ever durable."""
        return self._last_confirmed

    @property
    def first_position(self) -> Position | None:
        """The first durable entry still stored (after trimming); None if there is none."""
        return self._table.first_position()

    def before_first_position(self) -> Position:
        """A mark-delete position meaning "nothing consumed yet": ``(first ledger id, -1)``."""
        first_id = self._table.first_ledger_id()
        return Position(self._tail_ledger_id if first_id is None else first_id, -1)

    def next_position(self, position: Position) -> Position:
        """The first durable entry after ``position``, else ``(ledger, entry + 1)``."""
        return self._table.next_position(position)

    def has_entry(self, position: Position) -> bool:
        """Whether ``position`` names a durable entry still stored."""
        return self._table.has_entry(position)

    def entry_count_between(self, first: Position, last: Position) -> int:
        """Number of durable stored entries ``p`` with ``first <= p <= last``."""
        return self._table.entry_count_between(first, last)

    # ==================================================================== reads

    def read(
        self, position: Position, max_entries: int, max_bytes: int = UNLIMITED
    ) -> list[tuple[Position, bytes]]:
        """Durable entries at or after ``position``, in order.

        At most ``max_entries``; stops before exceeding ``max_bytes`` of entry data but always
        returns one entry if any is available. A position inside a trimmed segment starts at the
        first entry still stored; a position past the end returns ``[]``.

        Raises:
            CorruptLedgerError: a record read from disk fails its crc (names file and offset).
        """
        return self._reader.read(position, max_entries, max_bytes)

    def iter_entries(
        self, start: Position, batch_entries: int = 256, batch_bytes: int = 4 << 20
    ) -> Iterator[tuple[Position, bytes]]:
        """Every durable entry from ``start`` on, read in batches (dedup replay, scans);
        entries that become durable while iterating are included."""
        return self._reader.iter_entries(start, batch_entries, batch_bytes)

    def find_newest_matching(self, predicate: Callable[[bytes], bool]) -> Position | None:
        """Binary search for the last durable entry satisfying ``predicate``, which must hold
        for a prefix of the log and fail after it (e.g. "publish time < T"; Pulsar's
        ``findNewestMatching``, used to seek by time). None if no entry matches."""
        return self._reader.find_newest_matching(predicate)

    # ==================================================================== properties

    @property
    def properties(self) -> Mapping[str, int]:
        """Ledger properties (e.g. the PIP-68 topic epoch), read-only."""
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
        return self._cursors.durable

    def open_cursor(
        self, name: str, initial_position: InitialPosition = InitialPosition.LATEST
    ) -> Cursor:
        """The durable cursor ``name``; created and persisted at ``initial_position`` if new
        (LATEST = after the last durable entry, EARLIEST = before the first stored one)."""
        self._check_open()
        existing = self._cursors.get(name)
        if existing is not None:
            return existing
        latest = self._last_confirmed
        if initial_position is InitialPosition.EARLIEST or latest is None:
            return self._cursors.create(name, self.before_first_position())
        return self._cursors.create(name, latest)

    def delete_cursor(self, name: str) -> None:
        """Remove durable cursor ``name`` and its file, durably. Unknown names are ignored."""
        self._cursors.delete(name)

    def new_non_durable_cursor(self, start: Position) -> Cursor:
        """An in-memory cursor (a reader) whose first read is the first entry at or after
        ``start``. It does not hold back trimming (as in Pulsar)."""
        self._check_open()
        return self._cursors.non_durable(start)

    # ==================================================================== trimming

    def trim(self, now: float | None = None) -> int:
        """Delete whole sealed segments that every durable cursor has consumed and retention
        no longer protects; returns how many were deleted.

        A segment is consumed when each durable cursor's *persisted* mark-delete is at or past
        its last entry (with no durable cursor, all are). Consumed segments are deleted oldest
        first while the segment's age since sealing reaches ``retention_time_minutes`` or the
        ledger's total size exceeds ``retention_size_mb`` (either limit suffices; -1 disables
        that limit: Pulsar's rule). The active segment is never deleted. ``now``: wall-clock
        seconds (default: the ledger's clock).
        """
        self._check_open()
        now_ms = int((self._clock() if now is None else now) * 1000)
        with self._meta_lock:
            doomed = self._trimmable(now_ms)
            if not doomed:
                return 0
            gone = {s.ledger_id for s in doomed}
            horizon = Position(doomed[-1].ledger_id, doomed[-1].entries - 1)
            survivors = [i for i in self._table.sealed_infos() if i.ledger_id not in gone]
            self._store_metadata(sealed=survivors, last_trimmed=horizon)
            self._table.remove(gone)
            self._last_trimmed = horizon
            for ledger_id in gone:
                self._cache.discard_ledger(ledger_id)
        for segment in doomed:
            self._layer.unlink(segment.path)
        self._layer.fsync_dir(self.directory)
        return len(doomed)

    def _trimmable(self, now_ms: int) -> list[Segment]:
        """The prefix of sealed segments that ``trim`` may delete."""
        slowest = min(self._cursors.persisted_marks(), default=None)
        retention_ms = self.config.retention_time_minutes * 60_000
        retention_bytes = self.config.retention_size_mb * 1024 * 1024
        total = self._table.total_data_bytes()
        doomed: list[Segment] = []
        for segment in self._table.all():
            if segment.sealed_at_ms is None:
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
        segments = self._table.all()
        return {
            "segments": len(segments),
            "stored_entries": sum(s.entries for s in segments),
            "stored_bytes": sum(s.data_bytes for s in segments),
            "pending_entries": len(self._pending),
            "cache_bytes": self._cache.size_bytes,
            "cache_hits": self._cache.hits,
            "cache_misses": self._cache.misses,
        }

    def segment_paths(self) -> list[Path]:
        """The segment files currently in use, oldest first (for tools and tests)."""
        return [s.path for s in self._table.all()]

    def _segment_path(self, ledger_id: int) -> Path:
        return self.directory / segment_file_name(ledger_id)

    def _segment_files(self) -> dict[int, Path]:
        found: dict[int, Path] = {}
        for path in list_files(self.directory):
            ledger_id = parse_segment_file_name(path.name)
            if ledger_id is not None:
                found[ledger_id] = path
        return found

    def _read_metadata(self) -> LedgerMetadata:
        path = self.directory / METADATA_FILE_NAME
        try:
            data = read_file(path)
        except FileNotFoundError:
            return LedgerMetadata()
        return decode_metadata(data, path)

    def _store_metadata(
        self,
        *,
        sealed: list[SealedLedger] | None = None,
        properties: dict[str, int] | None = None,
        last_trimmed: Position | None = None,
    ) -> None:
        """Rewrite ``ledger.meta`` from the current state with the given replacements."""
        meta = LedgerMetadata(
            ledgers=tuple(sealed if sealed is not None else self._table.sealed_infos()),
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
    """The spare's path, or None if pre-allocating it failed (then a plain file is used)."""
    try:
        return future.result()
    except Exception as exc:
        log.warning("pre-allocating a spare segment failed: %s", exc)
        return None
