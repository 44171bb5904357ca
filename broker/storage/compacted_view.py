"""The compacted view of a topic: one CRC-checked file per compaction, replaced atomically.

Pulsar keeps the result of a compaction in a separate ledger whose id it records on the
``__compaction`` cursor (property ``CompactedTopicLedger``), with the cursor's mark-delete at the
compaction horizon. Magnetar does the same with a file instead of a ledger:

* ``<generation, 20 digits>.compacted`` in the topic's directory (so deleting the topic deletes
  it, and the ledger ignores it: it is not a segment name);
* written whole to a temp file, fsynced, renamed, directory fsynced (`write_view`); only then is
  the ``__compaction`` cursor moved to the new horizon with the new generation as its property,
  and persisted (atomically, like every cursor file);
* on load (`load_view`) the generation named by the cursor is opened and every other view file is
  deleted: a crash after the rename but before the cursor write leaves an orphan of the *next*
  generation, which is dropped, so the topic has the old view or the new one, never a mix.

File layout (little-endian)::

    header:  magic "MGCV" | version u16 | reserved u16 | horizon ledger i64 | horizon entry i64
             | record count u64 | crc32c u32 (of the header bytes before it)
    records: ledger i64 | entry i64 | length u32 | crc32c u32 (of the 20 bytes before it and
             the data) | data

Each record is the entry as readers receive it at that (original) position: its message id is
kept, so acknowledgements, seeks and ``has_message_available`` mean the same on both sides of
the horizon. Reads use ``os.pread`` on a descriptor held open, so they are safe from any thread
and keep working on a view whose file a newer compaction already deleted.
"""

from __future__ import annotations

import bisect
import os
import struct
import uuid
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

import crc32c

from broker.storage.errors import CorruptLedgerError
from broker.storage.files import TEMP_SUFFIX, FileLayer, list_files, unlink_durably, write_all
from broker.storage.position import Position

VIEW_SUFFIX = ".compacted"
#: Property of the ``__compaction`` cursor naming the view's generation (Pulsar's
#: ``CompactedTopicLedger``, which names the compacted ledger).
GENERATION_PROPERTY = "CompactedTopicLedger"

_MAGIC = b"MGCV"
_VERSION = 1
_HEADER = struct.Struct("<4sHHqqQ")
_HEADER_CRC = struct.Struct("<I")
_RECORD = struct.Struct("<qqI")
_RECORD_CRC = struct.Struct("<I")
_HEADER_SIZE = _HEADER.size + _HEADER_CRC.size
_RECORD_SIZE = _RECORD.size + _RECORD_CRC.size


def view_file(directory: Path, generation: int) -> Path:
    return directory / f"{generation:020d}{VIEW_SUFFIX}"


def _generation_of(path: Path) -> int | None:
    stem = path.name[: -len(VIEW_SUFFIX)]
    if not path.name.endswith(VIEW_SUFFIX) or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class CompactedView:
    """An opened view: the horizon, the positions it holds, and their bytes on demand."""

    def __init__(
        self,
        generation: int,
        horizon: Position,
        positions: list[Position],
        offsets: list[tuple[int, int]],
        fd: int | None,
    ) -> None:
        self.generation = generation
        #: The last position of the log this view covers (Pulsar's compaction horizon).
        self.horizon = horizon
        self.positions = positions
        self._offsets = offsets  # (data offset, length) per position
        self._fd = fd
        if fd is not None:
            weakref.finalize(self, os.close, fd)

    @classmethod
    def empty(cls) -> CompactedView:
        """No compaction yet: horizon before everything, no entries."""
        return cls(0, Position(-1, -1), [], [], None)

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def last_position(self) -> Position | None:
        return self.positions[-1] if self.positions else None

    def first_index_at_or_after(self, position: Position) -> int:
        return bisect.bisect_left(self.positions, position)

    def next_after(self, position: Position) -> Position | None:
        """The first position of the view after ``position``, None when there is none."""
        index = bisect.bisect_right(self.positions, position)
        return self.positions[index] if index < len(self.positions) else None

    def previous_before(self, position: Position) -> Position | None:
        index = bisect.bisect_left(self.positions, position)
        return self.positions[index - 1] if index > 0 else None

    def read(
        self, position: Position, max_entries: int, max_bytes: int
    ) -> list[tuple[Position, bytes]]:
        """Entries at or after ``position`` (at least one when one exists); touches the disk."""
        found: list[tuple[Position, bytes]] = []
        index = self.first_index_at_or_after(position)
        total = 0
        while index < len(self.positions) and len(found) < max_entries:
            offset, length = self._offsets[index]
            if found and total + length > max_bytes:
                break
            found.append((self.positions[index], self._pread(offset, length)))
            total += length
            index += 1
        return found

    def iter_entries(self) -> Iterator[tuple[Position, bytes]]:
        for index, position in enumerate(self.positions):
            offset, length = self._offsets[index]
            yield position, self._pread(offset, length)

    def _pread(self, offset: int, length: int) -> bytes:
        assert self._fd is not None
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise OSError(f"short read of a compacted view at offset {offset}")
        return data


def write_view(
    layer: FileLayer,
    directory: Path,
    generation: int,
    horizon: Position,
    entries: Iterable[tuple[Position, bytes]],
    checkpoint: object = None,
) -> Path:
    """Write a complete view file durably (temp + fsync + rename + directory fsync).

    ``entries`` must come in position order. ``checkpoint`` (a callable taking a stage name, or
    None) is called between the steps: the crash tests pause there and SIGKILL the broker.
    """
    target = view_file(directory, generation)
    temp = target.with_name(f"{target.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    fd = layer.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            offset = _HEADER_SIZE
            count = 0
            previous: Position | None = None
            for position, data in entries:
                if previous is not None and position <= previous:
                    raise ValueError("compacted entries must be written in position order")
                previous = position
                head = _RECORD.pack(position.ledger_id, position.entry_id, len(data))
                crc = crc32c.crc32c(data, crc32c.crc32c(head))
                record = head + _RECORD_CRC.pack(crc) + data
                write_all(layer, fd, record, offset)
                offset += len(record)
                count += 1
                if count == 1 and callable(checkpoint):
                    checkpoint("writing")
            header = _HEADER.pack(_MAGIC, _VERSION, 0, horizon.ledger_id, horizon.entry_id, count)
            write_all(layer, fd, header + _HEADER_CRC.pack(crc32c.crc32c(header)), 0)
            layer.fsync(fd)
        finally:
            layer.close(fd)
        if callable(checkpoint):
            checkpoint("before-rename")
        layer.replace(temp, target)
    except BaseException:
        try:
            layer.unlink(temp)
        except OSError:
            pass
        raise
    layer.fsync_dir(directory)
    return target


def open_view(path: Path, generation: int) -> CompactedView:
    """Open and verify a view file (every record's CRC); raises ``CorruptLedgerError``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _HEADER_SIZE, 0)
        if len(head) != _HEADER_SIZE:
            raise CorruptLedgerError(path, 0, "compacted view shorter than its header")
        magic, version, _reserved, h_ledger, h_entry, count = _HEADER.unpack_from(head)
        (crc,) = _HEADER_CRC.unpack_from(head, _HEADER.size)
        if magic != _MAGIC or version != _VERSION or crc32c.crc32c(head[: _HEADER.size]) != crc:
            raise CorruptLedgerError(path, 0, "bad compacted view header")
        positions: list[Position] = []
        offsets: list[tuple[int, int]] = []
        offset = _HEADER_SIZE
        for _ in range(count):
            record_head = os.pread(fd, _RECORD_SIZE, offset)
            if len(record_head) != _RECORD_SIZE:
                raise CorruptLedgerError(path, offset, "truncated compacted record")
            ledger_id, entry_id, length = _RECORD.unpack_from(record_head)
            (record_crc,) = _RECORD_CRC.unpack_from(record_head, _RECORD.size)
            data = os.pread(fd, length, offset + _RECORD_SIZE)
            if len(data) != length or crc32c.crc32c(data, crc32c.crc32c(record_head[:20])) != (
                record_crc
            ):
                raise CorruptLedgerError(path, offset, "compacted record checksum mismatch")
            positions.append(Position(ledger_id, entry_id))
            offsets.append((offset + _RECORD_SIZE, length))
            offset += _RECORD_SIZE + length
        if offset != size:
            raise CorruptLedgerError(path, offset, "bytes after the last compacted record")
    except BaseException:
        os.close(fd)
        raise
    return CompactedView(generation, Position(h_ledger, h_entry), positions, offsets, fd)


def load_view(layer: FileLayer, directory: Path, generation: int | None) -> CompactedView:
    """The view the ``__compaction`` cursor names (empty if none); every other view file is an
    orphan of an interrupted compaction (or a superseded view) and is deleted."""
    for path in list_files(directory):
        found = _generation_of(path)
        if found is not None and found != generation:
            unlink_durably(layer, path)
    if generation is None:
        return CompactedView.empty()
    path = view_file(directory, generation)
    if not path.exists():
        raise CorruptLedgerError(path, 0, "the compacted view named by __compaction is missing")
    return open_view(path, generation)


def remove_view(layer: FileLayer, directory: Path, generation: int) -> None:
    unlink_durably(layer, view_file(directory, generation))
