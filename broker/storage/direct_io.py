"""Large flushes written with ``O_DIRECT``: from the process's memory to the disk, without the
copy into the page cache (issue #26, P1).

Why: a profile of batched ingest (P1) showed the flush thread's time in the kernel's copy of
each write into the page cache (``copy_folio_from_iter_atomic``), 0.4-1.1 GB/s on this machine
against 1.2-1.3 GB/s for ``dd oflag=direct`` of 1 MiB blocks. BookKeeper offers the same for its
entry log (``dbStorage_directIOEntryLogger``, BP-47), and the key has its name here.

How: ``O_DIRECT`` wants the buffer address, the file offset and the length aligned to the
device's block (4 KiB is safe everywhere). A flush therefore starts at the block holding the
durable end: the bytes of that block already on disk (``tail``: kept from the previous direct
write, else read back) are copied first, then the records, then zeros up to the next block
boundary. Rewriting the head of the block writes the same bytes again; the zeros land where the
segment holds zeros anyway (pre-allocation, ``recovery``: a zero header ends the data). The
aligned buffer is one per flush thread, ``CHUNK_BYTES`` long and reused (a freshly mapped buffer
costs a page fault per 4 KiB, which is what made the earlier joined-buffer flush slow); a larger
flush is written in chunks through it, so memory is bounded by the threads, not by the topics.

Only flushes of ``DIRECT_MIN_BYTES`` or more take this path: a small one is cheaper through the
page cache, and the kernel keeps both views coherent (a direct write first writes back dirty
pages of its range and drops the cached ones after). A file system without ``O_DIRECT``
(``EINVAL`` at open, tmpfs for one, or at the first write, which then wrote nothing) is written
through the page cache, once logged.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from collections.abc import Sequence

from broker.storage.files import FileLayer, write_all

log = logging.getLogger(__name__)

BLOCK = 4096
DIRECT_MIN_BYTES = 256 * 1024
#: The aligned buffer of a flush thread, and so the largest single write: a bigger flush (groups
#: reach 10-20 MB while a slow sync runs) is written in chunks of this size through the same
#: buffer. Fresh memory for each large flush cost a page fault per 4 KiB (a fifth of the flush
#: thread's time in a profile).
CHUNK_BYTES = 4 * 1024 * 1024

_buffers = threading.local()
_unsupported_logged = False


def _thread_buffer() -> mmap.mmap:
    """This thread's aligned buffer: private anonymous memory (page-aligned, faulted in once;
    Python's default for ``mmap(-1, ...)`` is shared memory)."""
    buffer: mmap.mmap | None = getattr(_buffers, "buffer", None)
    if buffer is None or len(buffer) < CHUNK_BYTES:  # (tests change the chunk size)
        buffer = mmap.mmap(-1, CHUNK_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        _buffers.buffer = buffer
    return buffer


class DirectWriter:
    """The ``O_DIRECT`` side of one active segment: its descriptor and the durable tail block."""

    __slots__ = ("_fd", "_layer", "_path", "_tail", "_tail_end", "supported")

    #: Flushes smaller than this go through the page cache (tests lower it).
    min_bytes = DIRECT_MIN_BYTES

    def __init__(self, layer: FileLayer, path: os.PathLike[str]) -> None:
        self._layer = layer
        self._path = path
        self._fd: int | None = None
        self._tail = b""  # the bytes of the block holding ``_tail_end``, up to it
        self._tail_end = -1
        self.supported = True

    def wants(self, size: int) -> bool:
        """Whether a flush of ``size`` bytes should be written by this writer."""
        return self.supported and size >= self.min_bytes

    def write(self, buffered_fd: int, parts: Sequence[bytes], size: int, end: int) -> bool:
        """Write ``parts`` (``size`` bytes) at ``end``, the durable end; False if this file
        system cannot (the caller writes the whole flush through the page cache then)."""
        fd = self._descriptor()
        if fd is None:
            return False
        try:
            self._write_aligned(fd, buffered_fd, parts, size, end)
        except OSError as exc:
            # Some file systems accept O_DIRECT at open and refuse the I/O itself (EINVAL,
            # before writing anything): stop using it for this segment rather than failing
            # every large flush. Other errors are the flush's to report.
            if exc.errno != errno.EINVAL:
                raise
            self.supported = False
            self.close()
            _log_unsupported(self._path, "refuses O_DIRECT writes")
            return False
        return True

    def _write_aligned(
        self, fd: int, buffered_fd: int, parts: Sequence[bytes], size: int, end: int
    ) -> None:
        start = end - end % BLOCK
        head = self._head(buffered_fd, start, end)
        view = memoryview(_thread_buffer())
        try:
            self._tail_end = -1  # until the whole flush is written
            offset, filled = start, len(head)
            view[:filled] = head
            for part in parts:
                data = memoryview(part)
                while data:
                    take = min(len(data), CHUNK_BYTES - filled)
                    view[filled : filled + take] = data[:take]
                    filled += take
                    data = data[take:]
                    if filled == CHUNK_BYTES:
                        self._write_out(fd, buffered_fd, view, offset)
                        offset, filled = offset + CHUNK_BYTES, 0
            tail_start = filled - filled % BLOCK
            if filled:
                aligned = -(-filled // BLOCK) * BLOCK
                view[filled:aligned] = bytes(aligned - filled)
                self._write_out(fd, buffered_fd, view[:aligned], offset)
            self._tail = bytes(view[tail_start:filled])
            self._tail_end = end + size
        finally:
            view.release()

    def forget_tail(self) -> None:
        """A write failed: what is on disk past the durable end is unknown; read it back."""
        self._tail_end = -1

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._layer.close(fd)

    def _descriptor(self) -> int | None:
        if self._fd is None and self.supported:
            try:
                self._fd = self._layer.open(self._path, os.O_WRONLY | os.O_DIRECT)  # type: ignore[arg-type]
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.supported = False
                _log_unsupported(self._path, "has no O_DIRECT")
        return self._fd

    def _head(self, buffered_fd: int, start: int, end: int) -> bytes:
        """The bytes of the durable end's block before it (kept, or read back once)."""
        if end == start:
            return b""
        if self._tail_end == end:
            return self._tail
        head = os.pread(buffered_fd, end - start, start)
        if len(head) != end - start:
            raise OSError(errno.EIO, f"short read of the tail block of {self._path}")
        return head

    def _write_out(self, fd: int, buffered_fd: int, data: memoryview, offset: int) -> None:
        """One aligned write; a short one is finished through the page cache (still aligned
        or not, the kernel keeps both views of the file coherent)."""
        try:
            written = self._layer.pwrite(fd, data, offset)
        except BaseException:
            self.forget_tail()
            raise
        if written < len(data):
            try:
                write_all(self._layer, buffered_fd, data[written:], offset + written)
            except BaseException:
                self.forget_tail()
                raise


#: Zeros for pre-allocation written with O_DIRECT: private anonymous memory never written, so
#: every page of it is the kernel's one shared zero page (no memory, nothing copied).
ZEROS_BYTES = 1024 * 1024
_zeros: mmap.mmap | None = None
#: Folders whose file system refused O_DIRECT to a zero fill: their next ones go through the
#: page cache without asking again (a flush's writer asks once per segment on its own).
_refusing_folders: set[str] = set()


def zero_fill_direct(layer: FileLayer, path: os.PathLike[str], start: int, end: int) -> int:
    """Write zeros over the whole blocks of ``[start, end)`` with ``O_DIRECT``; return the
    offset they reach (from the first block boundary at or after ``start``), or ``start`` when
    this file system takes no ``O_DIRECT``. The caller writes the rest through the page cache
    and syncs.

    Why: zero-filling a spare or the space ahead of the active segment through the page cache
    copied every zero into cached pages, which the next direct flush of that range then
    dropped again (P1 of issue #26: 6-7 % of the broker's CPU, on the pre-allocation thread).
    """
    global _zeros
    first = -(-start // BLOCK) * BLOCK
    last = end - end % BLOCK
    folder = os.path.dirname(os.fspath(path))
    if first >= last or folder in _refusing_folders:
        return start
    try:
        fd = layer.open(path, os.O_WRONLY | os.O_DIRECT)  # type: ignore[arg-type]
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        _refusing_folders.add(folder)
        _log_unsupported(path, "has no O_DIRECT")
        return start
    try:
        if _zeros is None:
            _zeros = mmap.mmap(-1, ZEROS_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        zeros = memoryview(_zeros)
        offset = first
        while offset < last:
            try:
                written = layer.pwrite(fd, zeros[: min(ZEROS_BYTES, last - offset)], offset)
            except OSError as exc:
                if exc.errno != errno.EINVAL or offset != first:
                    raise
                _refusing_folders.add(folder)
                _log_unsupported(path, "refuses O_DIRECT writes")
                return start
            if written % BLOCK or written == 0:  # short and unaligned: the page cache finishes
                return offset + written
            offset += written
        return offset
    finally:
        layer.close(fd)


def _log_unsupported(path: os.PathLike[str], what: str) -> None:
    """Say once per process that large flushes go through the page cache after all."""
    global _unsupported_logged
    if not _unsupported_logged:
        _unsupported_logged = True
        log.info("%s: the file system %s; writing through the page cache", path, what)
