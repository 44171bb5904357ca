"""The record format and the pure scan that recovery is built on.

A record is ``[length u32 LE][crc32c u32 LE][entry bytes]``. The crc is crc32c over the four
length bytes followed by the entry, so a corrupted *length* is caught as surely as a corrupted
payload: without it, a flipped length bit would silently re-frame everything after it.

Pre-allocated segment space is zero-filled. An all-zero header cannot be a valid record
(crc32c of four zero bytes is 0x48674BC7, not 0), so the first zero header ends the data
without a special marker, while an empty entry (length 0) remains representable.

``scan_valid_prefix`` is a pure function over bytes: it returns the length of the longest
prefix made of whole, valid records and the offset of each of them. Everything about torn tails,
truncation and corruption is decided from that, which makes the crash cases plain unit tests.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterator
from typing import NamedTuple

import crc32c

from broker.storage.config import MAX_ENTRY_BYTES
from protocol._accel import speedups

RECORD_HEADER = struct.Struct("<II")
RECORD_HEADER_SIZE = RECORD_HEADER.size
_LENGTH = struct.Struct("<I")


class ScanResult(NamedTuple):
    """``valid_bytes``: length of the valid prefix; ``offsets``: start of each record in it."""

    valid_bytes: int
    offsets: array[int]


def record_crc(entry: bytes | memoryview) -> int:
    """The crc stored in an entry's record header (covers the length, then the entry)."""
    return crc32c.crc32c(entry, crc32c.crc32c(_LENGTH.pack(len(entry))))


def record_header(entry: bytes | memoryview) -> bytes:
    """The 8-byte header that precedes ``entry`` on disk."""
    return RECORD_HEADER.pack(len(entry), record_crc(entry))


#: A flush's records as ``pwritev`` parts: (the parts, each record's offset from the first, the
#: parts' total size, the running crc carried over every byte).
RecordParts = tuple[list[bytes], list[int], int, int]

#: An entry this large is written from its own buffer; smaller ones, with the headers, are
#: copied into runs (a ``pwritev`` part costs about as much as copying a kilobyte).
OWN_BUFFER_BYTES = 4096


def py_encode_record_parts(
    entries: list[bytes], running_crc: int, entry_crcs: list[int] | None = None
) -> RecordParts:
    """The records for ``entries`` as parts to write back to back: each entry of
    ``OWN_BUFFER_BYTES`` or more is a part of its own (no copy); the headers and the smaller
    entries between two such are joined into one part.

    ``entry_crcs`` (each entry's CRC-32C where known, else -1) lets the compiled flush skip its
    passes over large entries; the reference reads every entry, which gives the same records
    when the known CRCs are right.

    The reference of the compiled ``encode_record_parts``: the flush of a group commit, whose
    batched entries may add up to megabytes, which a joined buffer would copy (and fault in)
    once more.
    """
    parts: list[bytes] = []
    run: list[bytes] = []
    offsets: list[int] = []
    position = 0
    pack_header, pack_length, crc = RECORD_HEADER.pack, _LENGTH.pack, crc32c.crc32c
    for entry in entries:
        length = len(entry)
        header = pack_header(length, crc(entry, crc(pack_length(length))))
        running_crc = crc(entry, crc(header, running_crc))
        offsets.append(position)
        position += RECORD_HEADER_SIZE + length
        run.append(header)
        if length >= OWN_BUFFER_BYTES:
            parts += (b"".join(run), bytes(entry))
            run = []
        else:
            run.append(entry)
    if run:
        parts.append(b"".join(run))
    return parts, offsets, position, running_crc


def encode_records(entries: list[bytes]) -> tuple[bytes, list[int]]:
    """Concatenated records for ``entries`` and each record's offset within the result."""
    parts, offsets, _, _ = encode_record_parts(entries, 0, None)
    return b"".join(parts), offsets


def scan_valid_prefix(buf: bytes | memoryview, *, base: int = 0) -> ScanResult:
    """Walk records from the start of ``buf``; stop at the first one that is not whole and valid.

    A record is invalid when its header or payload runs past the end of ``buf``, its length is
    implausible, or its crc does not match. Nothing after an invalid record is considered.
    ``base`` is added to every reported offset (the position of ``buf`` in its file), so callers
    scanning a slice get file offsets without a second pass; ``valid_bytes`` stays relative.
    """
    view = memoryview(buf)
    size = len(view)
    offsets: array[int] = array("Q")
    offset = 0
    unpack = RECORD_HEADER.unpack_from
    while offset + RECORD_HEADER_SIZE <= size:
        length, stored_crc = unpack(view, offset)
        start = offset + RECORD_HEADER_SIZE
        end = start + length
        if length > MAX_ENTRY_BYTES or end > size:
            break
        crc = crc32c.crc32c(view[start:end], crc32c.crc32c(view[offset : offset + 4]))
        if crc != stored_crc:
            break
        offsets.append(base + offset)
        offset = end
    return ScanResult(offset, offsets)


def iter_records(buf: bytes | memoryview) -> Iterator[memoryview]:
    """Entries of a buffer that must consist of valid records only (raises ``ValueError``)."""
    view = memoryview(buf)
    offset = 0
    while offset < len(view):
        if offset + RECORD_HEADER_SIZE > len(view):
            raise ValueError(f"truncated record header at offset {offset}")
        length, stored_crc = RECORD_HEADER.unpack_from(view, offset)
        start = offset + RECORD_HEADER_SIZE
        entry = view[start : start + length]
        if len(entry) != length or record_crc(entry) != stored_crc:
            raise ValueError(f"invalid record at offset {offset}")
        yield entry
        offset = start + length


_speedups = speedups()
if _speedups is not None:
    _speedups.bind_record_parts(py_encode_record_parts)
    encode_record_parts: Callable[[list[bytes], int, list[int] | None], RecordParts] = (
        _speedups.encode_record_parts
    )
else:
    encode_record_parts = py_encode_record_parts
