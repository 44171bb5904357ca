"""``Segment``: one ledger's file, its in-memory offset index and its durable end.

File layout::

    header: magic "MGSG" | version u16 | reserved u16 | ledger id u64 | crc32c u32 (of the above)
    records from HEADER_SIZE on (see ``recovery``), then zero-filled pre-allocation (active only)

The logical end of the data is tracked by ``data_end`` (in memory, from the flushes that
succeeded) or found by ``recovery.scan_valid_prefix`` after a crash: never by the file size,
because an active segment is pre-allocated and zero-filled ahead of need (a pre-written file
makes ``fdatasync`` a data-only operation, see performance.md §1.1).

Pre-allocation continues while the segment is active: when less than half a chunk of zeroed
space is left ahead of the durable end, a background job zero-fills (and syncs) the next chunk
past it. The flush thread never writes into a region such a job may still fill: it cancels the
job if it has not started, else waits for it (normally long finished), so zeros can never
overwrite data.

A sealed segment (listed in ``ledger.meta``) has been truncated to ``data_end``; its record
region must hash to the recorded crc. Its offset index is built lazily on first read, by a scan
that must end exactly at ``data_end`` with the recorded entry count.

Thread safety: one writer (the ledger's flush thread) calls ``write``/``prepare_seal``; new
durable state is published through ``commit`` under the segment table's lock. Readers (any
thread; the broker reads from its disk threads while the event loop appends and the flush
thread commits) never use the write descriptor (each read opens its own), so sealing or trimming
cannot pull a descriptor from under a reader. They only look at offsets below an ``entries``
snapshot taken under the table lock; ``commit`` appends past it (``array`` item reads and
``extend`` are each atomic under the GIL). A sealed segment's index is built once, under its own
lock: a second reader waits for the first one's scan instead of repeating it.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
from array import array
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from pathlib import Path

import crc32c

from broker.storage.direct_io import BLOCK, DirectWriter, zero_fill_direct
from broker.storage.errors import CorruptLedgerError
from broker.storage.files import FileLayer, write_all, write_all_parts
from broker.storage.ledger_meta_file import SealedLedger
from broker.storage.recovery import RECORD_HEADER, RECORD_HEADER_SIZE, scan_valid_prefix

log = logging.getLogger(__name__)

SEGMENT_MAGIC = b"MGSG"
SEGMENT_VERSION = 1
_HEADER = struct.Struct("<4sHHQ")
_HEADER_CRC = struct.Struct("<I")
HEADER_SIZE = _HEADER.size + _HEADER_CRC.size
_ZERO_CHUNK = bytes(1024 * 1024)


def encode_segment_header(ledger_id: int) -> bytes:
    """The fixed header written at offset 0 of a segment."""
    head = _HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, 0, ledger_id)
    return head + _HEADER_CRC.pack(crc32c.crc32c(head))


def header_problem(view: memoryview | bytes, ledger_id: int) -> str | None:
    """Why the header in ``view`` is not a valid header for ``ledger_id`` (None if it is)."""
    if len(view) < HEADER_SIZE:
        return "file shorter than the segment header"
    magic, version, _reserved, found_id = _HEADER.unpack_from(view)
    (stored_crc,) = _HEADER_CRC.unpack_from(view, _HEADER.size)
    if crc32c.crc32c(view[: _HEADER.size]) != stored_crc:
        return "segment header checksum mismatch"
    if magic != SEGMENT_MAGIC or version != SEGMENT_VERSION:
        return f"unknown segment format {magic!r} v{version}"
    if found_id != ledger_id:
        return f"header names ledger {found_id}, file name says {ledger_id}"
    return None


@contextmanager
def mapped(path: Path) -> Iterator[memoryview]:
    """A read-only memory map of ``path`` (an empty view for an empty file)."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            yield memoryview(b"")
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
            view = memoryview(mapping)
            try:
                yield view
            finally:
                view.release()


#: How far past a read of a segment the kernel is asked to read ahead (``POSIX_FADV_WILLNEED``):
#: twice the read, at most this. Each read opens its own descriptor (see the module docstring),
#: so the kernel's own per-descriptor read-ahead never gets going; the hint makes the next
#: read of a catch-up find its pages loaded while this one is dispatched.
READ_AHEAD_MAX_BYTES = 8 << 20
_HAS_FADVISE = hasattr(os, "posix_fadvise")


def pread_exact(path: Path, offset: int, length: int, ahead_until: int = 0) -> bytes:
    """``length`` bytes of ``path`` at ``offset`` through a private descriptor; with
    ``ahead_until`` past the read, the kernel is told the bytes up to there come next."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _HAS_FADVISE:
            # One sequential region: the read itself, then the read-ahead (asynchronous).
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_SEQUENTIAL)
            if ahead_until > offset + length:
                ahead = offset + length
                os.posix_fadvise(fd, ahead, ahead_until - ahead, os.POSIX_FADV_WILLNEED)
        chunks: list[bytes] = []
        remaining = length
        while remaining > 0:
            chunk = os.pread(fd, remaining, offset)
            if not chunk:
                raise CorruptLedgerError(path, offset, "file ends before the indexed data")
            chunks.append(chunk)
            offset += len(chunk)
            remaining -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def preallocate_file(layer: FileLayer, path: Path, size: int, direct: bool = False) -> None:
    """Create ``path`` zero-filled to ``size`` bytes and make it durable (not its name);
    ``direct``: with ``O_DIRECT`` where the file system takes it (``_zero_fill``).

    Real zeros, not ``fallocate``: an unwritten extent still costs a metadata commit on the
    first write, which is exactly what pre-allocation is meant to avoid.
    """
    fd = layer.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _zero_fill(layer, fd, 0, size, path if direct else None)
    finally:
        layer.close(fd)


class Segment:
    """A ledger's segment file with its durable entry count, end, crc and offset index."""

    def __init__(
        self,
        layer: FileLayer,
        path: Path,
        ledger_id: int,
        *,
        entries: int,
        data_end: int,
        crc: int,
        offsets: array[int] | None,
        sealed_at_ms: int | None,
        fd: int | None = None,
        allocated_end: int = 0,
        direct: DirectWriter | None = None,
    ) -> None:
        self.path = path
        self.ledger_id = ledger_id
        self.entries = entries
        self.data_end = data_end
        self.crc = crc
        self.sealed_at_ms = sealed_at_ms
        self._offsets = offsets
        self._index_lock = threading.Lock()
        self._layer = layer
        self._fd = fd
        self.allocated_end = allocated_end
        self._direct = direct
        self._extension: Future[int] | None = None
        self._extension_start = 0

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def open_sealed(cls, layer: FileLayer, path: Path, info: SealedLedger, verify: bool) -> Segment:
        """A sealed segment from its metadata; with ``verify``, check it now (else on read)."""
        segment = cls(
            layer,
            path,
            info.ledger_id,
            entries=info.entries,
            data_end=info.data_end,
            crc=info.crc,
            offsets=None,
            sealed_at_ms=info.sealed_at_ms,
        )
        if not path.is_file():
            raise CorruptLedgerError(path, 0, "sealed segment file is missing")
        if verify:
            segment.verify()
        return segment

    @classmethod
    def recover(cls, layer: FileLayer, path: Path, ledger_id: int) -> Segment:
        """Recover an unsealed segment: keep the longest valid prefix, cut the rest durably.

        A missing or torn header means the segment never held durable data (the header is
        written with, and synced by, the first flush), so the result then has no entries. A bad
        header followed by valid records is not that: those records were flushed with it, so
        the header was damaged afterwards, and dropping the segment would silently lose
        acknowledged entries. That is refused as corruption (``magnetar repair-topic``).

        Raises:
            CorruptLedgerError: the header is bad but valid records follow it.
        """
        with mapped(path) as view:
            file_size = len(view)
            problem = header_problem(view, ledger_id)
            if problem is not None:
                behind = scan_valid_prefix(view[HEADER_SIZE:], base=HEADER_SIZE)
                if len(behind.offsets):
                    raise CorruptLedgerError(
                        path,
                        0,
                        f"{problem}, yet {len(behind.offsets)} valid records follow it: "
                        "the header was damaged after data became durable",
                    )
                valid_end, offsets, crc = 0, array("Q"), 0
            else:
                scan = scan_valid_prefix(view[HEADER_SIZE:], base=HEADER_SIZE)
                valid_end = HEADER_SIZE + scan.valid_bytes
                offsets, crc = scan.offsets, crc32c.crc32c(view[HEADER_SIZE:valid_end])
            tail_nonzero = _has_nonzero(view[valid_end:file_size])
        if file_size != valid_end:
            _truncate_durably(layer, path, valid_end)
            log.warning(
                "segment %s: recovered %d entries, dropped %d tail bytes (%s)",
                path,
                len(offsets),
                file_size - valid_end,
                "torn or corrupt data" if tail_nonzero else "zero pre-allocation only",
            )
        return cls(
            layer,
            path,
            ledger_id,
            entries=len(offsets),
            data_end=valid_end,
            crc=crc,
            offsets=offsets,
            sealed_at_ms=None,
        )

    @classmethod
    def create(
        cls,
        layer: FileLayer,
        path: Path,
        ledger_id: int,
        spare: Path | None,
        *,
        direct_io: bool = False,
    ) -> Segment:
        """A new active segment, from a pre-allocated ``spare`` file if one is given; with
        ``direct_io``, large flushes bypass the page cache (``broker.storage.direct_io``).

        The header is written here without a sync; the first flush's fdatasync covers it. The
        directory is fsynced so the new name survives a crash.
        """
        if spare is not None:
            allocated = os.stat(spare).st_size
            # link + unlink, never a rename over ``path``: like O_EXCL below, a segment of this
            # id that already exists (cluster mode: another broker took the topic over while
            # this one was paused) makes this fail instead of destroying it. A crash in between
            # leaves the spare's temporary name, removed as any leftover temp file.
            layer.link(spare, path)
            layer.unlink(spare)
            fd = layer.open(path, os.O_RDWR)
        else:
            allocated = 0
            fd = layer.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_all(layer, fd, encode_segment_header(ledger_id), 0)
            layer.fsync_dir(path.parent)
        except BaseException:
            layer.close(fd)
            raise
        return cls(
            layer,
            path,
            ledger_id,
            entries=0,
            data_end=HEADER_SIZE,
            crc=0,
            offsets=array("Q"),
            sealed_at_ms=None,
            fd=fd,
            allocated_end=allocated,
            direct=DirectWriter(layer, path) if direct_io else None,
        )

    # -- state ----------------------------------------------------------------------------

    @property
    def sealed(self) -> bool:
        return self.sealed_at_ms is not None

    @property
    def data_bytes(self) -> int:
        """Bytes of records (header excluded), the size retention counts."""
        return max(0, self.data_end - HEADER_SIZE)

    def info(self, sealed_at_ms: int) -> SealedLedger:
        """The metadata row describing this segment once sealed at ``sealed_at_ms``."""
        return SealedLedger(self.ledger_id, self.entries, self.data_end, self.crc, sealed_at_ms)

    # -- write side (flush thread) --------------------------------------------------------

    def write(self, records: list[bytes], size: int, sync: bool) -> None:
        """Write ``records`` (parts of ``size`` bytes in all) at the durable end; fdatasync if
        ``sync``. State is unchanged."""
        if self._fd is None:
            raise OSError(f"segment {self.path} is not writable")
        direct = self._direct
        if direct is not None and direct.wants(size):
            # The aligned write ends with zeros up to the next block: settle a zero-fill
            # job that could still be writing there.
            self.wait_extension(before=-(-(self.data_end + size) // BLOCK) * BLOCK)
            if direct.write(self._fd, records, size, self.data_end):
                if sync:
                    self._layer.fdatasync(self._fd)
                return
        self.wait_extension(before=self.data_end + size)
        write_all_parts(self._layer, self._fd, records, self.data_end)
        if sync:
            self._layer.fdatasync(self._fd)

    def extend_ahead(self, executor: Executor, chunk: int) -> None:
        """Zero-fill the next ``chunk`` bytes past the allocated end in the background, once
        less than half a chunk is left (flush thread; at most one job at a time)."""
        if chunk <= 0 or self._fd is None or self._extension is not None:
            return
        if self.allocated_end - self.data_end >= chunk // 2:
            return
        start = max(self.allocated_end, self.data_end)
        self._extension_start = start
        direct_path = self.path if self._direct is not None and self._direct.supported else None
        self._extension = executor.submit(
            _zero_fill, self._layer, self._fd, start, chunk, direct_path
        )

    def wait_extension(self, before: int | None = None) -> None:
        """Settle an extension job that covers bytes below ``before`` (all if None): cancel it
        if it has not started, else wait for it (one zero-fill at most).

        A failed or cancelled extension is only a lost optimisation: the write grows the file.
        """
        job = self._extension
        if job is None or (before is not None and before <= self._extension_start):
            return
        self._extension = None
        if job.cancel():
            return  # still queued behind other ledgers' jobs: nothing written, do not wait
        try:
            self.allocated_end = job.result()
        except OSError as exc:
            log.warning("pre-allocating more of %s failed: %s", self.path, exc)

    def commit(self, record_offsets: list[int], nbytes: int, new_crc: int) -> None:
        """Publish a successful write (call under the ledger lock)."""
        assert self._offsets is not None
        base = self.data_end
        self._offsets.extend(base + offset for offset in record_offsets)
        self.entries += len(record_offsets)
        self.data_end += nbytes
        self.crc = new_crc

    def prepare_seal(self) -> None:
        """Cut the file at the durable end (drops pre-allocation and failed writes), fsync.

        Idempotent; the segment stays writable-in-memory until ``mark_sealed``.
        """
        self.wait_extension()
        fd = self._layer.open(self.path, os.O_RDWR) if self._fd is None else self._fd
        try:
            self._layer.ftruncate(fd, self.data_end)
            self._layer.fsync(fd)
        finally:
            if fd != self._fd:
                self._layer.close(fd)

    def mark_sealed(self, sealed_at_ms: int) -> None:
        """Record that the metadata now lists this segment; release the write descriptor."""
        self.sealed_at_ms = sealed_at_ms
        self.close()

    def close(self) -> None:
        """Release the write descriptor (if any), after any extension job using it."""
        try:
            self.wait_extension()
        finally:
            self._close_fd()

    def _close_fd(self) -> None:
        if self._direct is not None:
            self._direct.close()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._layer.close(fd)

    # -- verification and reads -----------------------------------------------------------

    def verify(self) -> None:
        """Check a sealed segment's header and whole-region crc; locate damage if any."""
        with mapped(self.path) as view:
            problem = header_problem(view, self.ledger_id)
            if problem is not None:
                raise CorruptLedgerError(self.path, 0, problem)
            if len(view) < self.data_end:
                raise CorruptLedgerError(
                    self.path, len(view), f"file is shorter than its sealed size {self.data_end}"
                )
            if crc32c.crc32c(view[HEADER_SIZE : self.data_end]) != self.crc:
                self._raise_located(view)

    def _raise_located(self, view: memoryview) -> None:
        """Raise ``CorruptLedgerError`` at the first bad record of a damaged sealed segment."""
        scan = scan_valid_prefix(view[HEADER_SIZE : self.data_end], base=HEADER_SIZE)
        offset = HEADER_SIZE + scan.valid_bytes
        if offset >= self.data_end:
            raise CorruptLedgerError(self.path, HEADER_SIZE, "segment checksum mismatch")
        raise CorruptLedgerError(self.path, offset, "invalid record in a sealed segment")

    def offsets(self) -> array[int]:
        """Offsets of the durable records, loading a sealed segment's index on first use.

        The load maps and crc-scans the whole file: call it off the event loop.
        """
        offsets = self._offsets
        if offsets is None:
            with self._index_lock:
                if self._offsets is None:
                    self._offsets = self._load_index()
                offsets = self._offsets
        return offsets

    def _load_index(self) -> array[int]:
        with mapped(self.path) as view:
            problem = header_problem(view, self.ledger_id)
            if problem is not None:
                raise CorruptLedgerError(self.path, 0, problem)
            region = view[HEADER_SIZE : self.data_end]
            scan = scan_valid_prefix(region, base=HEADER_SIZE)
            del region
            if HEADER_SIZE + scan.valid_bytes != self.data_end or len(scan.offsets) != self.entries:
                self._raise_located(view)
        return scan.offsets

    def run_size(self, first: int, stop: int, entries: int, data_end: int) -> int:
        """Payload bytes of entries ``first .. stop-1`` (record headers excluded), from the
        index alone, given a consistent (entries, data_end) snapshot."""
        offsets = self.offsets()
        end = offsets[stop] if stop < entries else data_end
        return end - offsets[first] - RECORD_HEADER_SIZE * (stop - first)

    def read_entries(self, first: int, stop: int, entries: int, data_end: int) -> list[bytes]:
        """Entries ``first .. stop-1`` from disk with one read, each crc-checked, split in one
        pass; the kernel is asked to read ahead what a sequential reader wants next.

        ``entries``/``data_end`` must be a consistent snapshot with ``stop <= entries``.
        """
        offsets = self.offsets()
        start = offsets[first]
        end = offsets[stop] if stop < entries else data_end
        ahead = min(data_end, end + min(2 * (end - start), READ_AHEAD_MAX_BYTES))
        buf = pread_exact(self.path, start, end - start, ahead)
        return _split_records(self.path, buf, start, stop - first)


def _split_records(path: Path, buf: bytes, start: int, count: int) -> list[bytes]:
    """The ``count`` entries of the records in ``buf`` (read at file offset ``start``), each
    checked against its crc (which covers the length bytes, then the entry: the 4 length
    bytes are hashed where they lie, not packed again)."""
    result: list[bytes] = []
    view = memoryview(buf)
    unpack, crc = RECORD_HEADER.unpack_from, crc32c.crc32c
    cursor = 0
    for _ in range(count):
        length, stored_crc = unpack(view, cursor)
        body_start = cursor + RECORD_HEADER_SIZE
        body = view[body_start : body_start + length]
        if len(body) != length or crc(body, crc(view[cursor : cursor + 4])) != stored_crc:
            raise CorruptLedgerError(path, start + cursor, "record checksum mismatch")
        result.append(body.tobytes())
        cursor = body_start + length
    return result


def _zero_fill(
    layer: FileLayer, fd: int, start: int, size: int, direct_path: Path | None = None
) -> int:
    """Write ``size`` zero bytes at ``start`` and sync; returns the new allocated end. With
    ``direct_path`` (``dbStorage_directIOEntryLogger``) the whole blocks are written with
    ``O_DIRECT`` (``zero_fill_direct``), the partial ones around them through ``fd``."""
    end = start + size
    if direct_path is not None:
        first = -(-start // BLOCK) * BLOCK
        reached = zero_fill_direct(layer, direct_path, start, end)
        if reached > start:
            _write_zeros(layer, fd, start, first)
            start = reached
    _write_zeros(layer, fd, start, end)
    layer.fdatasync(fd)
    return end


def _write_zeros(layer: FileLayer, fd: int, start: int, end: int) -> None:
    offset = start
    while offset < end:
        chunk = _ZERO_CHUNK[: min(len(_ZERO_CHUNK), end - offset)]
        write_all(layer, fd, chunk, offset)
        offset += len(chunk)


def _has_nonzero(view: memoryview) -> bool:
    """Whether ``view`` holds any non-zero byte (counted in C, not byte by byte in Python)."""
    data = view.tobytes()
    return data.count(0) != len(data)


def _truncate_durably(layer: FileLayer, path: Path, length: int) -> None:
    """Truncate ``path`` to ``length`` and fsync the file and its directory."""
    fd = layer.open(path, os.O_RDWR)
    try:
        layer.ftruncate(fd, length)
        layer.fsync(fd)
    finally:
        layer.close(fd)
    layer.fsync_dir(path.parent)
