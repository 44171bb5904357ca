"""The values of a binary column held in several chunks, as Python bytes, in any row order.

The Spark sink's exactly-once path sorts a task's rows (``spark_connector.row_order``) and then
needs each value as a Python ``bytes`` object, in sorted order, to hand to the client. Gathering
a sorted Arrow copy first (``take``, after gluing the chunks into one with ``combine_chunks``)
and then converting that copy (``to_pylist``) copies every value twice before the ``bytes`` it
ends as. ``RowGather`` builds the ``bytes`` objects straight from the unsorted chunks' buffers,
a slice of the order at a time: one copy per value, the one ``to_pylist`` makes anyway.

A chunk is an Arrow-style binary column given as its buffers, so ``protocol`` stays free of
pyarrow: ``(validity, offsets, data, first, count, wide)``, where ``validity`` is the null
bitmap (None: no nulls), ``offsets`` holds ``count + 1`` bounds from index ``first`` (native
64-bit integers when ``wide``, else 32-bit) and value ``i`` of the chunk is
``data[offsets[first + i]:offsets[first + i + 1]]``. Rows are numbered across the chunks in
the order given (row 0 is the first chunk's first value). Every buffer is any object with the
buffer protocol; the gather keeps them referenced, and they must not change while it lives.

``PyRowGather`` is the reference; ``RowGather`` is the compiled class
(``protocol/_gather.pxi``) when built: a table of each row's address and size, filled in one
pass, then one ``bytes`` per ordered row, the rows ahead prefetched (the order is random, so
each row is a cache miss), every cache line of the value (a value of 100 B spans three lines
more often than two; prefetching two left the third a miss: 4.1 -> 3.8 ms per 100k).
Measured on 500k values of 100 B in hash order: 4.5 ms per 100k values, where
``combine_chunks`` + ``take`` + ``to_pylist`` took 6.8 (and ``to_pylist`` of the unsorted
chunks, what at-least-once pays, 2.3).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from protocol._accel import speedups
from protocol.row_hash import value_bounds

__all__ = ["Chunk", "PyRowGather", "RowGather"]

Chunk = tuple[Any, Any, Any, int, int, bool]  # (validity, offsets, data, first, count, wide)


class PyRowGather:
    """The rows of ``chunks`` (see the module docstring), addressed by row number.

    ``count`` rows, ``nulls`` of them null; ``min_size`` and ``max_size`` are the shortest and
    longest value's length (-1 both when no value is non-null).

    Raises:
        ValueError: a chunk's buffers too short, or an offset outside its data.
    """

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self._rows: list[bytes | None] = []
        for validity, offsets, data, first, count, wide in chunks:
            self._rows += _chunk_values(validity, offsets, data, first, count, wide)
        self.count = len(self._rows)
        sizes = [len(v) for v in self._rows if v is not None]
        self.nulls = self.count - len(sizes)
        self.min_size = min(sizes, default=-1)
        self.max_size = max(sizes, default=-1)

    def values(self, order: Any, start: int, stop: int) -> list[bytes | None]:
        """The values of rows ``order[start:stop]`` (``order``: native 64-bit row numbers), in
        that order; None for a null one.

        Raises:
            ValueError: ``start``/``stop`` outside ``order``, or a row number out of range.
        """
        return [self._rows[row] for row in self._order(order, start, stop)]

    def sizes(self, order: Any, start: int, stop: int) -> bytes:
        """The lengths of the same values (0 for a null one), as native 64-bit integers (an
        Arrow ``int64`` buffer)."""
        rows = self._rows
        lengths = [len(rows[row] or b"") for row in self._order(order, start, stop)]
        return struct.pack(f"={len(lengths)}q", *lengths)

    def _order(self, order: Any, start: int, stop: int) -> tuple[int, ...]:
        raw = memoryview(order).cast("B")
        if not 0 <= start <= stop or stop * 8 > len(raw):
            raise ValueError("start and stop must be within the order")
        rows: tuple[int, ...] = struct.unpack_from(f"={stop - start}q", raw, start * 8)
        if any(not 0 <= row < self.count for row in rows):
            raise ValueError("a row number out of range")
        return rows


def _chunk_values(
    validity: Any, offsets: Any, data: Any, first: int, count: int, wide: bool
) -> list[bytes | None]:
    bounds = value_bounds(offsets, first, count, wide)
    bits = None if validity is None else memoryview(validity).cast("B")
    if bits is not None and (first + count + 7) // 8 > len(bits):
        raise ValueError("the validity buffer is too short")
    raw = memoryview(data).cast("B")
    values: list[bytes | None] = []
    for i in range(count):
        start, stop = bounds[i], bounds[i + 1]
        if stop < start or start < 0 or stop > len(raw):
            raise ValueError("an offset outside the data buffer")
        bit = first + i
        valid = bits is None or bits[bit >> 3] >> (bit & 7) & 1
        values.append(bytes(raw[start:stop]) if valid else None)
    return values


_speedups = speedups()
if TYPE_CHECKING:
    RowGather = PyRowGather
elif _speedups is not None:
    RowGather = _speedups.RowGather
else:
    RowGather = PyRowGather
