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

The pieces: ``writer.LedgerWriter`` (append, group-commit flush, rolls, the state after a failed
flush), ``reader.EntryReader`` (durable reads, cache first), ``segments.SegmentTable``
(position arithmetic), ``cursors.CursorRegistry``, ``meta_store.MetadataStore`` and
``retention.trimmable_prefix``. This class wires them together and owns recovery.

Recovery (``open``): sealed segments are checked against their metadata (header and
whole-region crc); damage raises ``CorruptLedgerError`` naming file and offset, and nothing is
dropped. Only the unsealed (previously active) segment may have a torn tail: its longest valid
prefix is kept and the rest, zero pre-allocation included, is truncated durably. A position
inside a trimmed segment reads from the first entry still stored; past the end reads ``[]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from pathlib import Path
from types import MappingProxyType

from broker.storage.buckets import BucketsSnapshot
from broker.storage.cache import EntryCache
from broker.storage.config import LedgerConfig
from broker.storage.cursor import Cursor
from broker.storage.cursor_registry import CursorRegistry
from broker.storage.errors import LedgerClosedError
from broker.storage.files import (
    OS_FILES,
    FileLayer,
    ensure_directory,
    list_files,
    parse_segment_file_name,
    remove_temp_files,
    segment_file_name,
    unlink_durably,
)
from broker.storage.ledger_meta import MetadataStore
from broker.storage.position import Position
from broker.storage.preallocate import shared_preallocator
from broker.storage.reader import UNLIMITED, EntryReader
from broker.storage.retention import trimmable_prefix
from broker.storage.segment import Segment
from broker.storage.segments import SegmentTable
from broker.storage.writer import LedgerWriter
from protocol.enums import InitialPosition


class Ledger:
    """A topic's durable, segmented log. Create with ``Ledger.open``.

    Thread safety: ``append`` and cursor operations belong to one thread (the event loop);
    ``flush`` may run concurrently in one worker thread; reads and position queries are safe
    from any thread, concurrently with appends, flushes and trimming (the broker reads cold
    entries in its disk threads): the segment table and the entry cache have their own locks,
    a read sees only entries made durable before it looked them up, and a segment trimmed
    under a read is skipped (``reader.py``, ``segment.py``).
    """

    def __init__(
        self,
        directory: Path,
        config: LedgerConfig,
        layer: FileLayer,
        preallocator: Executor,
        clock: Callable[[], float],
        cache: EntryCache | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        self._layer = layer
        self._clock = clock
        self._table = SegmentTable()
        self._cache = (cache if cache is not None else EntryCache(config.cache_size_bytes)).view()
        self._meta = MetadataStore(layer, directory, self._table.sealed_infos, config.owner_epoch)
        self._reader = EntryReader(self._table, self._cache)
        self._writer = LedgerWriter(
            directory, config, layer, preallocator, self._table, self._cache, self._meta, clock
        )
        self._cursors = CursorRegistry(self, directory, layer, config)

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
        cache: EntryCache | None = None,
    ) -> Ledger:
        """Open (creating if needed) the ledger in ``directory`` and run recovery.

        Args:
            directory: the topic's storage directory.
            config: storage settings.
            file_layer: the file-operation seam (tests inject faults); default real ``os``.
            preallocator: executor zero-filling segment space; default a shared daemon thread.
            clock: wall clock in seconds (segment seal times, retention).
            cache: the broker's entry cache, shared by its ledgers (``managedLedgerCacheSizeMB``);
                default one of ``config.cache_size_bytes`` for this ledger alone.

        Raises:
            CorruptLedgerError: damage in a sealed segment or in ``ledger.meta``, naming the
                file and offset; ``CorruptCursorError`` (a subclass) for a damaged cursor file.
            OSError: the directory cannot be read, or recovery cannot write.
        """
        layer = file_layer or OS_FILES
        ledger = cls(directory, config, layer, preallocator or shared_preallocator(), clock, cache)
        ledger._recover()
        return ledger

    def _recover(self) -> None:
        cursors_directory = self._cursors.directory
        ensure_directory(self._layer, self.directory)
        ensure_directory(self._layer, cursors_directory)
        remove_temp_files(self._layer, self.directory)
        remove_temp_files(self._layer, cursors_directory)
        meta = self._meta.load()
        self._meta.adopt()
        verify = self.config.verify_sealed_on_open
        for info in meta.ledgers:
            path = self.directory / segment_file_name(info.ledger_id)
            self._table.add(Segment.open_sealed(self._layer, path, info, verify))
        on_disk = self._segment_files()
        trimmed = meta.last_trimmed.ledger_id if meta.last_trimmed else 0
        horizon = max([trimmed, *(info.ledger_id for info in meta.ledgers)])
        self._recover_unsealed(on_disk, horizon)
        last_confirmed = self._table.last_position() or self._meta.last_trimmed
        self._writer.start(max([horizon, *on_disk]) + 1, last_confirmed)
        self._cursors.load_all(last_confirmed or self.before_first_position())

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
            now_ms = int(self._clock() * 1000)
            infos = [s.info(now_ms) for s in recovered]
            self._meta.write(sealed=[*self._table.sealed_infos(), *infos])
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
        if not self._writer.close_appends():
            return
        failure: OSError | None = None
        try:
            self._writer.flush()
            self._writer.seal_active()
        except OSError as exc:
            failure = exc
        failure = self._cursors.close_all() or failure
        self._writer.release(remove_spare=True)
        self._cache.clear()
        if failure is not None:
            raise failure

    def delete(self) -> None:
        """Remove the topic's storage entirely: segments, metadata, cursors, the directory."""
        self._writer.drop_pending()
        self._cursors.abandon_all()
        self._writer.release(remove_spare=True)
        self._cache.clear()
        for folder in (self._cursors.directory, self.directory):
            if folder.is_dir():
                for path in list_files(folder):
                    self._layer.unlink(path)
                self._layer.rmdir(folder)
        self._layer.fsync_dir(self.directory.parent)

    def _abandon(self) -> None:
        """Test hook: stop using the ledger as if the process died (no flush, seal, persist)."""
        self._writer.drop_pending()
        self._cursors.abandon_all()
        self._writer.release(remove_spare=False)

    # ==================================================================== writing

    def append(self, data: bytes) -> Position:
        """Buffer ``data`` as the next entry and return its position (not yet durable).

        Called from the event-loop thread; performs no I/O.

        Raises:
            LedgerClosedError: the ledger is closed.
            ValueError: the entry exceeds the maximum entry size.
        """
        return self._writer.append(data)

    def append_many(self, entries: list[bytes], crcs: list[int] | None = None) -> list[Position]:
        """``append`` of each entry in order (a group commit's entries); their positions.

        ``crcs``: each entry's CRC-32C where the caller computed it (the SEND's verified
        checksum), -1 where not; the flush then takes the records' CRCs from them instead of
        reading large entries again. A wrong one is a record that fails its check on read.

        Raises like ``append``; an oversized entry refuses the whole group (nothing appended).
        """
        return self._writer.append_many(entries, crcs)

    def flush(self) -> Position | None:
        """Make every entry appended so far durable; return the last durable position.

        One write and (with ``sync_data``) one ``fdatasync`` per touched segment; a roll adds
        the seal of the previous segment. Safe in a worker thread concurrently with ``append``.
        Returns None if nothing was ever durable.

        Raises:
            LedgerFlushError: a write or sync failed; see ``writer.py`` for the state after it
                (failed entries are gone for good, later appends work).
        """
        return self._writer.flush()

    # ==================================================================== positions

    @property
    def last_position(self) -> Position | None:
        """The last appended position (maybe not durable yet); None if none ever was."""
        return self._writer.last_position

    @property
    def last_confirmed_position(self) -> Position | None:
        """The last durable position; None if nothing was ever durable."""
        return self._writer.last_confirmed

    @property
    def first_position(self) -> Position | None:
        """The first durable entry still stored (after trimming); None if there is none."""
        return self._table.first_position()

    def before_first_position(self) -> Position:
        """A mark-delete position meaning "nothing consumed yet": ``(first ledger id, -1)``."""
        first_id = self._table.first_ledger_id()
        return Position(self._writer.tail_ledger_id if first_id is None else first_id, -1)

    def next_position(self, position: Position) -> Position:
        """The first durable entry after ``position``, else ``(ledger, entry + 1)``."""
        return self._table.next_position(position)

    def previous_position(self, position: Position) -> Position | None:
        """The last durable entry before ``position``; None if there is none."""
        return self._table.previous_position(position)

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

        May touch the disk (a ``pread``, and on the first read of a sealed segment a scan of the
        whole file to build its index): the broker runs it in a worker thread.

        Raises:
            CorruptLedgerError: a record read from disk fails its crc (names file and offset).
        """
        return self._reader.read(position, max_entries, max_bytes)

    def read_cached(
        self, position: Position, max_entries: int, max_bytes: int = UNLIMITED
    ) -> list[tuple[Position, bytes]] | None:
        """What ``read`` would return, as far as the entry cache holds it; no file is touched.

        None when the first entry at or after ``position`` is not cached (only ``read`` can get
        it); a shorter list than ``read`` when a later one is not; ``[]`` past the end. Cheap
        enough for the event loop: this is how tailing consumers are served.
        """
        return self._reader.read_cached(position, max_entries, max_bytes)

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

    def set_fence(self, fence: Callable[[], None] | None) -> None:
        """Cluster mode's ownership check (``LedgerWriter.fence``); it also guards property
        writes. It raises once another broker owns the topic; see broker/cluster/fence.py."""
        self._writer.fence = fence

    # ==================================================================== properties

    @property
    def properties(self) -> Mapping[str, int]:
        """Ledger properties (e.g. the PIP-68 topic epoch), read-only."""
        return MappingProxyType(dict(self._meta.properties))

    def set_property(self, key: str, value: int) -> None:
        """Set one property; durable before returning."""
        self.set_properties({key: value})

    def set_properties(self, values: Mapping[str, int]) -> None:
        """Set several properties atomically; durable before returning."""
        self._check_open()
        if self._writer.fence is not None:
            self._writer.fence()  # a fenced owner must not rewrite ledger.meta
        with self._meta.lock:
            merged = {**self._meta.properties, **{str(k): int(v) for k, v in values.items()}}
            self._meta.write(properties=merged)
            self._meta.properties = merged

    # ==================================================================== cursors

    @property
    def cursors(self) -> Mapping[str, Cursor]:
        """The durable cursors by name: a live read-only view (no copy per call), changed by
        the event loop; a disk thread iterates a copy of it (``list(...values())``)."""
        return self._cursors.durable

    def open_cursor(
        self, name: str, initial_position: InitialPosition = InitialPosition.Latest
    ) -> Cursor:
        """The durable cursor ``name``; created and persisted at ``initial_position`` if new
        (LATEST = after the last durable entry, EARLIEST = before the first stored one)."""
        self._check_open()
        existing = self._cursors.get(name)
        if existing is not None:
            return existing
        latest = self.last_confirmed_position
        if initial_position is InitialPosition.Earliest or latest is None:
            return self._cursors.create(name, self.before_first_position())
        return self._cursors.create(name, latest)

    def new_cursor(
        self, name: str, initial_position: InitialPosition = InitialPosition.Latest
    ) -> Cursor:
        """`open_cursor` in two steps, so the file write can leave the event loop: a new durable
        cursor in memory (no I/O, positioned now), to `Cursor.persist` (a disk operation) and
        then `add_cursor`. Raises ValueError if ``name`` is already a cursor."""
        self._check_open()
        if self._cursors.get(name) is not None:
            raise ValueError(f"cursor {name!r} already exists")
        latest = self.last_confirmed_position
        if initial_position is InitialPosition.Earliest or latest is None:
            return self._cursors.new(name, self.before_first_position())
        return self._cursors.new(name, latest)

    def add_cursor(self, cursor: Cursor) -> Cursor:
        """Register a cursor from `new_cursor` once persisted; returns the ledger's cursor of
        that name (an earlier one wins)."""
        self._check_open()
        return self._cursors.register(cursor)

    def delete_cursor(self, name: str) -> None:
        """Remove durable cursor ``name`` and its file, durably. Unknown names are ignored."""
        self._cursors.delete(name)

    def detach_cursor(self, name: str) -> None:
        """`delete_cursor` in two steps: stop tracking it (no I/O), then
        `remove_cursor_file` (a disk operation)."""
        self._cursors.detach(name)

    def remove_cursor_file(self, name: str) -> None:
        self._cursors.remove_file(name)

    def new_non_durable_cursor(self, start: Position) -> Cursor:
        """An in-memory cursor (a reader) whose first read is the first entry at or after
        ``start``. It does not hold back trimming (as in Pulsar)."""
        self._check_open()
        return self._cursors.non_durable(start)

    # ==================================================================== trimming

    def trim_due(self, now: float | None = None) -> bool:
        """Whether ``trim`` would delete a segment now; in memory, no I/O (the housekeeping
        asks on the event loop, so an idle topic costs no hop to a disk thread)."""
        if self._writer.closed:
            return False
        return bool(self._doomed(self._trim_inputs(now)))

    def _trim_inputs(self, now: float | None) -> tuple[int, Position | None]:
        """``trimmable_prefix``'s clock (ms) and the slowest persisted durable mark-delete."""
        now_ms = int((self._clock() if now is None else now) * 1000)
        return now_ms, min(self._cursors.persisted_marks(), default=None)

    def _doomed(self, inputs: tuple[int, Position | None]) -> list[Segment]:
        now_ms, slowest = inputs
        config = self.config
        return trimmable_prefix(
            self._table.all(),
            slowest,
            config.retention_time_minutes,
            config.retention_size_mb,
            now_ms,
        )

    def trim(self, now: float | None = None) -> int:
        """Delete whole sealed segments that every durable cursor has consumed and retention
        no longer protects (``retention.py``); returns how many were deleted.

        Consumption is judged by each durable cursor's *persisted* mark-delete, so a crash can
        never leave a cursor behind data that is already gone. The active segment is never
        deleted. ``now``: wall-clock seconds (default: the ledger's clock).
        """
        self._check_open()
        inputs = self._trim_inputs(now)  # before the lock: the cursors take their own
        with self._meta.lock:
            doomed = self._doomed(inputs)
            if not doomed:
                return 0
            gone = {s.ledger_id for s in doomed}
            horizon = Position(doomed[-1].ledger_id, doomed[-1].entries - 1)
            survivors = [i for i in self._table.sealed_infos() if i.ledger_id not in gone]
            self._meta.write(sealed=survivors, last_trimmed=horizon)
            self._table.remove(gone)
            self._meta.last_trimmed = horizon
        for segment in doomed:
            self._cache.discard_ledger(segment.ledger_id)
            self._layer.unlink(segment.path)
        self._layer.fsync_dir(self.directory)
        return len(doomed)

    # ==================================================================== helpers

    def stats(self) -> dict[str, int]:
        """Plain counters for metrics."""
        segments = self._table.all()
        return {
            "segments": len(segments),
            "stored_entries": sum(s.entries for s in segments),
            "stored_bytes": sum(s.data_bytes for s in segments),
            "pending_entries": self._writer.pending_entries,
            "cache_bytes": self._cache.size_bytes,
            "cache_hits": self._cache.hits,
            "cache_misses": self._cache.misses,
        }

    def group_commit_stats(self) -> tuple[BucketsSnapshot, BucketsSnapshot]:
        """Histograms of this ledger's flushes: write + fdatasync milliseconds, entries."""
        return self._writer.sync_latency_ms.snapshot(), self._writer.group_entries.snapshot()

    def segment_summaries(self) -> list[tuple[int, int, int, int | None]]:
        """``(ledger_id, entries, data_bytes, sealed_at_ms)`` of each segment, oldest first;
        ``sealed_at_ms`` is None for the segment being written (admin internal-stats)."""
        return [(s.ledger_id, s.entries, s.data_bytes, s.sealed_at_ms) for s in self._table.all()]

    def segment_paths(self) -> list[Path]:
        """The segment files currently in use, oldest first (for tools and tests)."""
        return [s.path for s in self._table.all()]

    def _segment_files(self) -> dict[int, Path]:
        found: dict[int, Path] = {}
        for path in list_files(self.directory):
            ledger_id = parse_segment_file_name(path.name)
            if ledger_id is not None:
                found[ledger_id] = path
        return found

    def _check_open(self) -> None:
        if self._writer.closed:
            raise LedgerClosedError(f"ledger {self.directory} is closed")
