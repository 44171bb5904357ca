"""``LedgerWriter``: the append side of a ledger (buffer, rolls, group commit, failures).

* ``append`` (event-loop thread) assigns the position and buffers the entry; no I/O. It decides
  rolls by entry count and bytes (``max_entries_per_ledger``, ``max_size_per_ledger_bytes``).
* ``flush`` (a worker thread) swaps the buffer out under the lock, then, without any lock,
  writes each touched segment with one ``pwrite`` and one ``fdatasync``, publishes the new
  durable end in the segment table, and hands the entries to the cache for tailing readers.
  Locks are never held across a sync, so appends never wait for the disk; flushes are
  serialised by their own lock.
* Spare segment files are zero-filled ahead of need by the pre-allocator (when the tail ledger
  has no file yet, and when it is half full), and the active segment is extended ahead of its
  data (``Segment.extend_ahead``), so syncs normally touch no file-size metadata.

State after a failed flush (``LedgerFlushError``, an ``OSError``), which the dedup layer relies
on: every entry appended but not durable when the failure is handled is discarded: never
readable, absent after a restart (the failed segment is cut back to its durable end and sealed
at once, best effort, and again by the next flush if that did not work), and its position is
never reused. ``last_position == last_confirmed`` afterwards; the next ``append`` opens a new
ledger and works normally as soon as the disk does. The one residual case: if the disk refuses
even the truncation *and* the process then dies, records of the failed batch that did reach the
file are valid and come back after the restart, as in any log without a commit record; dedup
replay then sees them, so a producer's retry is answered as a duplicate.

Lock order: flush lock -> metadata lock -> append lock -> (table lock, cache lock). The two
locks here are made on first use (``lock.first_lock``): most loaded topics never append.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, wait
from itertools import repeat
from pathlib import Path
from uuid import uuid4

from broker.storage.buckets import GROUP_ENTRIES_BOUNDS, LATENCY_MS_BOUNDS, Buckets
from broker.storage.cache import LedgerCache
from broker.storage.config import MAX_ENTRY_BYTES, LedgerConfig
from broker.storage.errors import LedgerClosedError, LedgerFlushError
from broker.storage.files import TEMP_SUFFIX, FileLayer, segment_file_name, unlink_durably
from broker.storage.ledger_meta import MetadataStore
from broker.storage.lock import first_lock
from broker.storage.position import Position
from broker.storage.recovery import RECORD_HEADER_SIZE, encode_record_parts
from broker.storage.segment import HEADER_SIZE, Segment, preallocate_file
from broker.storage.segments import SegmentTable

log = logging.getLogger(__name__)

_MIN_EXTEND_BYTES = 64 * 1024


class LedgerWriter:
    """Appends, group-commit flushes, rolls and seals for one ledger directory."""

    __slots__ = (
        "_active",
        "_cache",
        "_clock",
        "_config",
        "_directory",
        "_flush_lock",
        "_layer",
        "_lock",
        "_meta",
        "_must_roll",
        "_next_ledger_id",
        "_pending",
        "_preallocator",
        "_spare",
        "_table",
        "_tail_bytes",
        "_tail_entries",
        "_tail_ledger_id",
        "closed",
        "fence",
        "group_entries",
        "last_confirmed",
        "last_position",
        "sync_latency_ms",
    )

    def __init__(
        self,
        directory: Path,
        config: LedgerConfig,
        layer: FileLayer,
        preallocator: Executor,
        table: SegmentTable,
        cache: LedgerCache,
        meta: MetadataStore,
        clock: Callable[[], float],
    ) -> None:
        self._directory = directory
        self._config = config
        self._layer = layer
        self._preallocator = preallocator
        self._table = table
        self._cache = cache
        self._meta = meta
        self._clock = clock
        # The append side (buffer, tail, spare; swaps only), and one flush (and roll, seal) at
        # a time: ``self._lock or first_lock(self, "_lock")`` (module docstring).
        self._lock: threading.Lock | None = None
        self._flush_lock: threading.Lock | None = None
        # (position, entry, its CRC-32C or -1): appended, not yet flushed.
        self._pending: list[tuple[Position, bytes, int]] = []
        self._tail_ledger_id = 0
        self._tail_entries = 0
        self._tail_bytes = HEADER_SIZE
        self._next_ledger_id = 1
        self._must_roll = False
        #: Cluster mode's fencing hook (broker/cluster/fence.py): raises once another broker
        #: owns the topic. Run after each write + fdatasync, before the entries become readable
        #: or acknowledged, and before a roll touches files; None in standalone mode.
        self.fence: Callable[[], None] | None = None
        # Group-commit metrics: milliseconds of write + fdatasync per flush, entries per flush.
        self.sync_latency_ms = Buckets(LATENCY_MS_BOUNDS)
        self.group_entries = Buckets(GROUP_ENTRIES_BOUNDS)
        self._active: Segment | None = None
        self._spare: Future[Path] | None = None
        self.last_position: Position | None = None
        self.last_confirmed: Position | None = None
        self.closed = False

    def start(self, next_ledger_id: int, last_confirmed: Position | None) -> None:
        """Begin appending into ledger ``next_ledger_id`` after recovery."""
        self._next_ledger_id = next_ledger_id
        self._start_new_tail_ledger()
        self.last_confirmed = self.last_position = last_confirmed

    @property
    def tail_ledger_id(self) -> int:
        """The ledger the next append goes to (unless it rolls)."""
        return self._tail_ledger_id

    @property
    def pending_entries(self) -> int:
        return len(self._pending)

    def close_appends(self) -> bool:
        """Refuse further appends; False if that was already the case."""
        with self._lock or first_lock(self, "_lock"):
            if self.closed:
                return False
            self.closed = True
            return True

    def drop_pending(self) -> None:
        with self._lock or first_lock(self, "_lock"):
            self.closed = True
            self._pending = []

    # -- append -----------------------------------------------------------------------------

    def append(self, data: bytes) -> Position:
        """See ``Ledger.append``."""
        if len(data) > MAX_ENTRY_BYTES:
            raise ValueError(f"entry of {len(data)} bytes exceeds {MAX_ENTRY_BYTES}")
        record_size = RECORD_HEADER_SIZE + len(data)
        with self._lock or first_lock(self, "_lock"):
            if self.closed:
                raise LedgerClosedError(f"ledger {self._directory} is closed")
            if self._must_roll or (self._tail_entries and self._tail_is_full(record_size)):
                self._start_new_tail_ledger()
            position = Position(self._tail_ledger_id, self._tail_entries)
            self._tail_entries += 1
            self._tail_bytes += record_size
            self._pending.append((position, data, -1))
            self.last_position = position
            if self._spare is None:
                self._maybe_request_spare()
        return position

    def append_many(self, entries: list[bytes], crcs: list[int] | None = None) -> list[Position]:
        """See ``Ledger.append_many``: ``append`` of each entry, under one lock acquisition.

        Sizes are checked first, so a refused group appends nothing (no entry of it can be
        flushed later behind the caller's back).
        """
        for data in entries:
            if len(data) > MAX_ENTRY_BYTES:
                raise ValueError(f"entry of {len(data)} bytes exceeds {MAX_ENTRY_BYTES}")
        positions: list[Position] = []
        new_position = tuple.__new__  # Position is a NamedTuple: skip its Python-level __new__
        max_entries = self._config.max_entries_per_ledger
        max_bytes = self._config.max_size_per_ledger_bytes
        with self._lock or first_lock(self, "_lock"):
            if self.closed:
                raise LedgerClosedError(f"ledger {self._directory} is closed")
            # The tail's counters in locals: the same decisions as ``append``, entry by entry.
            ledger_id, count, size = self._tail_ledger_id, self._tail_entries, self._tail_bytes
            must_roll = self._must_roll
            for data in entries:
                record_size = RECORD_HEADER_SIZE + len(data)
                if must_roll or (
                    count and (count >= max_entries or size + record_size > max_bytes)
                ):
                    self._start_new_tail_ledger()
                    ledger_id, count, size = self._tail_ledger_id, 0, HEADER_SIZE
                    must_roll = False
                positions.append(new_position(Position, (ledger_id, count)))
                count += 1
                size += record_size
            self._tail_entries, self._tail_bytes = count, size
            if positions:
                known = repeat(-1, len(entries)) if crcs is None else crcs
                self._pending.extend(zip(positions, entries, known, strict=True))
                self.last_position = positions[-1]
            if self._spare is None:
                self._maybe_request_spare()
        return positions

    def _tail_is_full(self, record_size: int) -> bool:
        return (
            self._tail_entries >= self._config.max_entries_per_ledger
            or self._tail_bytes + record_size > self._config.max_size_per_ledger_bytes
        )

    def _start_new_tail_ledger(self) -> None:
        self._tail_ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        self._tail_entries = 0
        self._tail_bytes = HEADER_SIZE
        self._must_roll = False

    def _maybe_request_spare(self) -> None:
        """Start zero-filling the next segment file ahead of need (append lock held).

        Needed when the tail ledger has no file yet (first append after open or after a
        failure) or once it is half full, so the spare is ready when it rolls.
        """
        if self._spare is not None or self._config.segment_preallocation == 0:
            return
        active = self._active
        needs_file = active is None or active.ledger_id != self._tail_ledger_id
        half_full = (
            self._tail_entries * 2 >= self._config.max_entries_per_ledger
            or self._tail_bytes * 2 >= self._config.max_size_per_ledger_bytes
        )
        if needs_file or half_full:
            path = self._directory / f"spare-{uuid4().hex}.seg{TEMP_SUFFIX}"
            size = self._config.segment_preallocation
            if active is None:
                # The first segment since open: a small spare, extended ahead as data comes
                # (``_write_chunk``), so 10,000 topics taking a few entries each do not
                # zero-fill 10,000 x 8 MiB. A topic that rolls is busy: full-size spares.
                size = min(size, _MIN_EXTEND_BYTES)
            self._spare = self._preallocator.submit(
                _make_spare, self._layer, path, size, self._config.direct_io
            )

    # -- flush ------------------------------------------------------------------------------

    def flush(self) -> Position | None:
        """See ``Ledger.flush``."""
        with self._flush_lock or first_lock(self, "_flush_lock"):
            with self._lock or first_lock(self, "_lock"):
                batch, self._pending = self._pending, []
            if not batch:
                return self.last_confirmed
            started = time.monotonic()
            try:
                for ledger_id, entries in _split_by_ledger(batch):
                    self._write_chunk(ledger_id, entries)
            except OSError as exc:
                discarded = self._discard_after_failure(exc)
                raise LedgerFlushError(exc, self.last_confirmed, discarded) from exc
            self.sync_latency_ms.observe((time.monotonic() - started) * 1000)
            self.group_entries.observe(len(batch))
            return self.last_confirmed

    def _write_chunk(self, ledger_id: int, entries: list[tuple[Position, bytes, int]]) -> None:
        if self._active is None or self._active.ledger_id != ledger_id:
            self._roll_to(ledger_id)
        segment = self._active
        assert segment is not None
        datas = [data for _, data, _ in entries]
        parts, offsets, size, new_crc = encode_record_parts(
            datas, segment.crc, [crc for _, _, crc in entries]
        )
        segment.write(parts, size, self._config.sync_data)
        if self.fence is not None:
            self.fence()
        self._table.commit(segment, offsets, size, new_crc)
        self.last_confirmed = entries[-1][0]
        self._cache.put_block(ledger_id, entries[0][0].entry_id, datas)
        # Headroom as large as the data so far (doubling), from 64 KiB up to the configured
        # pre-allocation: a busy segment soon has the full chunk ahead, an idle one 64 KiB.
        ahead = min(self._config.segment_preallocation, max(_MIN_EXTEND_BYTES, segment.data_end))
        segment.extend_ahead(self._preallocator, ahead)

    def _roll_to(self, ledger_id: int) -> None:
        """Seal the active segment and make ``ledger_id`` the active one (flush lock held)."""
        if self.fence is not None:
            self.fence()
        if self._active is not None:
            self._seal_active()
        with self._lock or first_lock(self, "_lock"):
            spare, self._spare = self._spare, None
        # A spare still queued behind other ledgers' jobs is not worth waiting for: cancel it
        # and start with a plain file (extended ahead later). One being filled is nearly done.
        spare_path = None if spare is None or spare.cancel() else _result_or_none(spare)
        path = self._directory / segment_file_name(ledger_id)
        segment = Segment.create(
            self._layer, path, ledger_id, spare_path, direct_io=self._config.direct_io
        )
        self._table.add(segment)
        self._active = segment
        with self._lock or first_lock(self, "_lock"):
            self._maybe_request_spare()  # the tail may already be half way to the next roll

    def seal_active(self) -> None:
        """Seal the active segment, if any (close path)."""
        with self._flush_lock or first_lock(self, "_flush_lock"):
            if self._active is not None:
                self._seal_active()

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
        now_ms = int(self._clock() * 1000)
        with self._meta.lock:
            self._meta.write(sealed=[*self._table.sealed_infos(), segment.info(now_ms)])
            self._table.mark_sealed(segment, now_ms)
        self._active = None

    def _discard_after_failure(self, exc: OSError) -> Position | None:
        """Forget everything not durable and cut the failed segment back (flush lock held)."""
        with self._lock or first_lock(self, "_lock"):
            last_confirmed = self.last_confirmed
            discarded = self.last_position if self.last_position != last_confirmed else None
            self._pending = []
            self.last_position = last_confirmed
            self._must_roll = True
        log.error("flush of %s failed (%s); discarded up to %s", self._directory, exc, discarded)
        if self._active is not None:
            try:
                self._seal_active()
            except OSError as error:
                log.error("could not seal %s after a failed flush: %s", self._active.path, error)
        return discarded

    # -- release ----------------------------------------------------------------------------

    def release(self, remove_spare: bool) -> None:
        """Drop the spare and the write descriptor; write nothing else."""
        with self._flush_lock or first_lock(self, "_flush_lock"):
            with self._lock or first_lock(self, "_lock"):
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


def _split_by_ledger(
    batch: list[tuple[Position, bytes, int]],
) -> Iterator[tuple[int, list[tuple[Position, bytes, int]]]]:
    """Consecutive runs of ``batch`` that belong to the same ledger."""
    start = 0
    for index in range(1, len(batch) + 1):
        if index == len(batch) or batch[index][0].ledger_id != batch[start][0].ledger_id:
            yield batch[start][0].ledger_id, batch[start:index]
            start = index


def _make_spare(layer: FileLayer, path: Path, size: int, direct: bool) -> Path:
    preallocate_file(layer, path, size, direct)
    return path


def _result_or_none(future: Future[Path]) -> Path | None:
    """The spare's path, or None if pre-allocating it failed (then a plain file is used)."""
    try:
        return future.result()
    except Exception as exc:
        log.warning("pre-allocating a spare segment failed: %s", exc)
        return None
