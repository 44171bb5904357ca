"""File naming, the file-operation seam, and atomic checked small files.

Every write, truncate, rename, unlink and sync the storage package performs goes through a
``FileLayer``. The default, ``OsFileLayer``, is a thin veneer over ``os``. Tests substitute a
layer that injects ``OSError`` on chosen calls or simulates a power loss (dropping whatever was
not synced). Reads (``pread``, ``mmap``, ``listdir``) use ``os`` directly: they change nothing a
crash could lose.

Small metadata files (ledger metadata, cursors) use one format, "checked file"::

    magic (4 bytes) | version u16 | reserved u16 | payload length u32 | crc32c u32 | payload

The crc covers version, reserved, length and payload, so a flipped bit anywhere after the magic
is detected; a wrong magic or size is detected by the structure check. They are replaced
atomically: write a uniquely named temp file, fsync it, rename over the target, fsync the
directory. Readers therefore see either the old or the new content, never a mix.

File names: segments are ``<ledger id, 20 digits>.seg`` so ``ls`` sorts them numerically (the
Kafka convention); temp files end in ``.tmp`` and are deleted when a ledger opens.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Sequence
from pathlib import Path

import crc32c

from broker.storage.errors import CorruptLedgerError

SEGMENT_SUFFIX = ".seg"
TEMP_SUFFIX = ".tmp"
_ID_DIGITS = 20

_CHECKED_HEADER = struct.Struct("<4sHHII")
_CHECKED_VERSION = 1


def segment_file_name(ledger_id: int) -> str:
    """``00000000000000000042.seg`` for ledger 42."""
    return f"{ledger_id:0{_ID_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_file_name(name: str) -> int | None:
    """The ledger id of a segment file name, or None if ``name`` is not one."""
    stem, suffix = name[: -len(SEGMENT_SUFFIX)], name[-len(SEGMENT_SUFFIX) :]
    if suffix != SEGMENT_SUFFIX or len(stem) != _ID_DIGITS or not stem.isdigit():
        return None
    return int(stem)


class FileLayer:
    """The file operations that change state on disk. Subclass to inject faults.

    All methods raise ``OSError`` like their ``os`` counterparts.
    """

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pwritev(self, fd: int, buffers: Sequence[bytes], offset: int) -> int:
        """Write ``buffers`` back to back from ``offset`` in one call (at most ``IOV_MAX``).

        A layer that overrides ``pwrite`` (the tests' fault injection) gets the buffers joined
        into one ``pwrite``, so every write still passes through its faults.
        """
        if type(self).pwrite is not FileLayer.pwrite:
            return self.pwrite(fd, b"".join(buffers), offset)
        return os.pwritev(fd, buffers, offset)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def link(self, src: Path, dst: Path) -> None:
        """A second name for ``src``; ``FileExistsError`` if ``dst`` exists (never replaces)."""
        os.link(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def fsync_dir(self, path: Path) -> None:
        """Make creations, renames and unlinks inside ``path`` durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)


class OsFileLayer(FileLayer):
    """The production layer: real ``os`` calls, nothing added."""


#: The production layer, shared: it holds no state, and a broker opens one ledger per topic
#: (100,000 idle topics need not hold 100,000 copies; issue #26).
OS_FILES = OsFileLayer()


def write_all(layer: FileLayer, fd: int, data: bytes | memoryview, offset: int) -> None:
    """``pwrite`` until every byte is written (a regular file may accept a short write)."""
    view = memoryview(data)
    while view:
        written = layer.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(f"pwrite wrote {written} bytes")
        view = view[written:]
        offset += written


#: Buffers per ``pwritev`` call: the system's limit (1024 on Linux).
IOV_MAX = os.sysconf("SC_IOV_MAX")


def write_all_parts(layer: FileLayer, fd: int, parts: Sequence[bytes], offset: int) -> None:
    """``write_all`` of ``parts`` back to back, each from its own buffer (``pwritev``)."""
    index, count = 0, len(parts)
    while index < count:
        chunk = parts[index : index + IOV_MAX]
        if not any(chunk):  # only empty parts: nothing to write (pwritev would return 0)
            index += len(chunk)
            continue
        written = layer.pwritev(fd, chunk, offset)
        if written <= 0:
            raise OSError(f"pwritev wrote {written} bytes")
        offset += written
        for part in chunk:  # whole parts written move on; a part cut short is finished alone
            if written < len(part):
                write_all(layer, fd, memoryview(part)[written:], offset)
                offset += len(part) - written
                index += 1
                break
            written -= len(part)
            index += 1


def ensure_directory(layer: FileLayer, path: Path) -> None:
    """Create ``path`` (and missing parents) durably: each new entry's parent is fsynced."""
    if path.is_dir():
        return
    ensure_directory(layer, path.parent)
    try:
        layer.mkdir(path)
    except FileExistsError:
        return
    layer.fsync_dir(path.parent)


def unlink_durably(layer: FileLayer, path: Path) -> None:
    """Remove ``path`` (if present) and fsync its directory."""
    try:
        layer.unlink(path)
    except FileNotFoundError:
        return
    layer.fsync_dir(path.parent)


def remove_temp_files(layer: FileLayer, directory: Path) -> None:
    """Delete leftovers of interrupted atomic writes and pre-allocations."""
    leftovers = [path for path in list_files(directory) if path.name.endswith(TEMP_SUFFIX)]
    for path in leftovers:
        layer.unlink(path)
    if leftovers:
        layer.fsync_dir(directory)


def list_files(directory: Path) -> list[Path]:
    """The regular files directly inside ``directory``, sorted by name."""
    with os.scandir(directory) as entries:
        return sorted(Path(entry.path) for entry in entries if entry.is_file())


def encode_checked(magic: bytes, payload: bytes) -> bytes:
    """Frame ``payload`` as a checked file (see the module docstring)."""
    header = _CHECKED_HEADER.pack(magic, _CHECKED_VERSION, 0, len(payload), 0)
    crc = crc32c.crc32c(payload, crc32c.crc32c(header[4:-4]))
    return header[:-4] + struct.pack("<I", crc) + payload


def decode_checked(
    magic: bytes,
    data: bytes,
    path: Path,
    error: type[CorruptLedgerError] = CorruptLedgerError,
) -> bytes:
    """The payload of a checked file; raises ``error`` naming ``path`` if it is damaged."""
    if len(data) < _CHECKED_HEADER.size:
        raise error(path, 0, f"file too short ({len(data)} bytes)")
    found_magic, version, _reserved, length, crc = _CHECKED_HEADER.unpack_from(data)
    if found_magic != magic:
        raise error(path, 0, f"bad magic {found_magic!r}, expected {magic!r}")
    if version != _CHECKED_VERSION:
        raise error(path, 4, f"unsupported format version {version}")
    if _CHECKED_HEADER.size + length != len(data):
        raise error(path, 8, f"length field {length} does not match file size {len(data)}")
    payload = data[_CHECKED_HEADER.size :]
    expected = crc32c.crc32c(payload, crc32c.crc32c(data[4:12]))
    if expected != crc:
        raise error(path, _CHECKED_HEADER.size, "checksum mismatch")
    return payload


def atomic_write(layer: FileLayer, path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp + fsync + rename + dir fsync).

    On failure the target keeps its old content and the temp file is removed (best effort).
    """
    temp = path.with_name(f"{path.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    fd = layer.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            write_all(layer, fd, data, 0)
            layer.fsync(fd)
        finally:
            layer.close(fd)
        layer.replace(temp, path)
    except BaseException:
        try:
            layer.unlink(temp)
        except OSError:
            pass
        raise
    layer.fsync_dir(path.parent)


def read_file(path: Path) -> bytes:
    """The whole content of ``path`` (plain read; nothing to make durable)."""
    with open(path, "rb") as handle:
        return handle.read()
