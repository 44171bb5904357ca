"""A fixed 64-bit hash of byte strings, many at once: the exactly-once sink's first sort key.

The Spark sink numbers a task's rows after sorting them (``spark_connector.row_order``), and a
row's number is its sequence id: its exactly-once identity. Sorting 100-byte values by their
bytes is slow (they often share long prefixes); sorting first by a 64-bit hash of each value and
only then by the bytes (which break the rare ties, so the order is still a pure function of the
set of rows) is about three times faster.

**The hash is part of the identity: it must never change.** A task retried by a newer build
must number its rows as the failed attempt of the older build did, or the replay guard fails
the task. Any other hash is a new function with a new name; this one is ``rowhash64`` v1:

* ``h = P5 + len(value)`` (mod 2^64);
* for each 8 bytes of the value, read as a little-endian word ``w`` (the last, shorter piece
  padded with zero bytes): ``k = rotl(w * P2, 31) * P1``; ``h = rotl(h ^ k, 27) * P1 + P4``;
* then the avalanche: ``h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32``.

The constants and the word step are xxHash64's (its short-input path, applied to every length;
this is *not* xxHash64). Fixed values are pinned in tests/protocol/test_row_hash.py.

``row_hashes`` hashes the values of an Arrow-style binary column given as its buffers (value
offsets, 32- or 64-bit, and data), so ``protocol`` stays free of pyarrow: ``py_row_hashes`` is
the reference, ``row_hashes`` the compiled loop (``protocol/_rowhash.pxi``) when built.
``hash_order`` sorts rows by such hashes (compiled: buckets by the top bits, in two levels so
each scatter stays in cache, then insertion; an LSD radix sort when a bucket crowds;
``py_hash_order`` the reference): several times faster than a general sort, for the common
case where no two rows share a hash (2.8 -> 1.4 ms per 100k rows at 500k rows with the two
levels, against one scatter into 2^16 buckets). Its scratch (32 bytes a row) is kept from one
call to the next (up to 1M rows' worth): freed, its pages went back to the system and the next
Spark task faulted each one in again (3.1 -> 2.2 ms per 100k rows inside a task). The compiled
``row_hashes`` hashes four values in lockstep (one value's words form a serial chain of
multiplies; four chains keep the multiplier busy): the same values, 4.7 -> 2.3 ms per 100k
values of 100 B inside a sink task.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from protocol._accel import speedups

__all__ = [
    "hash_order",
    "py_hash_order",
    "py_row_hashes",
    "row_hash64",
    "row_hashes",
    "value_bounds",
]

_MASK = (1 << 64) - 1
P1 = 0x9E3779B185EBCA87
P2 = 0xC2B2AE3D27D4EB4F
P3 = 0x165667B19E3779F9
P4 = 0x85EBCA77C2B2AE63
P5 = 0x27D4EB2F165667C5


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def row_hash64(value: bytes) -> int:
    """``rowhash64`` v1 of ``value`` (see the module docstring)."""
    size = len(value)
    h = (P5 + size) & _MASK
    for start in range(0, size, 8):
        word = int.from_bytes(value[start : start + 8], "little")
        k = (_rotl((word * P2) & _MASK, 31) * P1) & _MASK
        h = (_rotl(h ^ k, 27) * P1 + P4) & _MASK
    h ^= h >> 33
    h = (h * P2) & _MASK
    h ^= h >> 29
    h = (h * P3) & _MASK
    return h ^ (h >> 32)


def value_bounds(offsets: Any, first: int, count: int, wide: bool) -> tuple[int, ...]:
    """The ``count + 1`` offsets of a binary column's values ``first`` to ``first + count``
    (native 64-bit integers when ``wide``, else 32-bit), checked to lie in ``offsets``.

    Raises:
        ValueError: ``first``/``count`` negative, or ``offsets`` too short.
    """
    if first < 0 or count < 0:
        raise ValueError("first and count must be >= 0")
    width = 8 if wide else 4
    view = memoryview(offsets).cast("B")
    if (first + count + 1) * width > len(view):
        raise ValueError("the offsets buffer is too short")
    return struct.unpack_from(f"={count + 1}{'q' if wide else 'i'}", view, first * width)


def py_row_hashes(offsets: Any, data: Any, first: int, count: int, wide: bool) -> bytes:
    """The hashes of values ``first .. first + count`` of a binary column, as ``count``
    unsigned 64-bit integers in native byte order (an Arrow ``uint64`` data buffer): value
    ``i`` is ``data[offsets[i]:offsets[i + 1]]``.

    ``offsets`` and ``data`` are any objects with the buffer protocol (``pyarrow.Buffer``,
    ``bytes``); ``offsets`` holds native 64-bit integers when ``wide``, else 32-bit.

    Raises:
        ValueError: ``first``/``count`` negative, or offsets outside the buffers.
    """
    bounds = value_bounds(offsets, first, count, wide)
    raw = memoryview(data).cast("B")
    hashes = []
    for i in range(count):
        start, stop = bounds[i], bounds[i + 1]
        if stop < start or start < 0 or stop > len(raw):
            raise ValueError("an offset outside the data buffer")
        hashes.append(row_hash64(bytes(raw[start:stop])))
    return struct.pack(f"={count}Q", *hashes)


def py_hash_order(hashes: Any, first: int, count: int) -> tuple[bytes, bool]:
    """The rows ``0 .. count`` ordered by their hashes (``count`` native unsigned 64-bit
    integers from index ``first`` of ``hashes``), equal hashes in row order, as native signed
    64-bit row numbers (an Arrow ``int64`` buffer, for ``take``); and whether any two rows
    share a hash (then a caller that must order them by more than the hash cannot use this).

    Raises:
        ValueError: ``first``/``count`` negative, or a buffer too short.
    """
    if first < 0 or count < 0:
        raise ValueError("first and count must be >= 0")
    raw = memoryview(hashes).cast("B")
    if (first + count) * 8 > len(raw):
        raise ValueError("the hashes buffer is too short")
    keys = struct.unpack_from(f"={count}Q", raw, first * 8)
    rows = sorted(range(count), key=keys.__getitem__)
    ties = any(keys[rows[i]] == keys[rows[i + 1]] for i in range(count - 1))
    return struct.pack(f"={count}q", *rows), ties


_speedups = speedups()
if TYPE_CHECKING:
    row_hashes = py_row_hashes
    hash_order = py_hash_order
elif _speedups is not None:
    row_hashes = _speedups.row_hashes
    hash_order = _speedups.hash_order
else:
    row_hashes = py_row_hashes
    hash_order = py_hash_order
