"""Where the exactly-once sink's client batches end: a pure function of the row sequence.

PIP-6 dedup judges a batch entry by its first and last sequence ids, so a replay is exact only if
it forms the *same* batches as the attempt it repeats: then every entry is stored whole or
dropped whole. A batch closing on a timer, or a partial batch flushed because a task failed,
would cut elsewhere on replay (our broker then stores the straddling batch whole: duplicates).

So the sink, not the client's timers, decides: rows of one producer are grouped into batches of
``max_messages`` rows, or fewer when the next row would push the estimated bytes past
``max_bytes`` (a row bigger than that goes alone). The sink hands a batch to the client only
when it is complete (the client's count trigger, set to the same ``max_messages``, sends it at
once; a batch closed by bytes is flushed), so a failing task leaves only whole batches behind.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

__all__ = ["BatchCutter", "cut_points", "row_bytes"]

_RECORD_OVERHEAD = 32  # per-message metadata in a batch (ids, sizes, time), estimated


def row_bytes(value: bytes | None, key: str | None, properties: dict[str, str] | None) -> int:
    """Estimated bytes of a row inside a batch entry."""
    size = _RECORD_OVERHEAD + (len(value) if value else 0) + (len(key) if key else 0)
    if properties:
        size += sum(len(k) + len(v) + 4 for k, v in properties.items())
    return size


class BatchCutter:
    """Tracks the batch in progress of one producer."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0

    def closes_before(self, size: int) -> bool:
        """Whether the batch in progress must end before a row of ``size`` bytes joins it."""
        return self.count > 0 and self.bytes + size > self.max_bytes

    def add(self, size: int) -> bool:
        """Add a row; True when the batch is now complete (count reached, or bytes)."""
        self.count += 1
        self.bytes += size
        return self.count >= self.max_messages or self.bytes >= self.max_bytes

    def reset(self) -> None:
        self.count = 0
        self.bytes = 0

    def split(self, sizes: Sequence[int], uniform: int | None = None) -> list[int]:
        """Rows of ``sizes`` bytes join the batch in progress in order: the positions (0 ..
        ``len(sizes)``) where a batch ends, as ``closes_before``/``add`` would cut them one row
        at a time (``split_each``, the reference). The rows after the last position stay in
        the batch in progress (this cutter's state); a position 0 ends the batch held before
        these rows.

        One step per *batch*, not per row: with the running byte totals (prefix sums, summed
        in C by ``itertools.accumulate``) the row where a batch reaches ``max_bytes`` is found
        by bisection, and the count limit is arithmetic. Row sizes are positive (each counts
        ``RECORD_OVERHEAD``), so the totals increase strictly and the bisection is exact.
        ``uniform``: every size is that one (the caller knows; ``rows.Columns.uniform``), so
        the totals are a ``range`` (bisected in C as well) and no list is built.
        """
        n = len(sizes)
        totals: Sequence[int]  # totals[i]: bytes of rows before i
        if uniform is not None:
            totals = range(0, (n + 1) * uniform, uniform)
        else:
            totals = [0, *itertools.accumulate(sizes)]
        max_messages, max_bytes = self.max_messages, self.max_bytes
        ends: list[int] = []
        count, held = self.count, self.bytes  # the batch in progress before ``begin``
        begin = 0
        while begin < n:
            by_count = begin + max_messages - count  # the end when the count limit closes it
            # The first row ``j`` whose inclusion makes the batch reach ``max_bytes``:
            # held + totals[j + 1] - totals[begin] >= max_bytes.
            j = bisect.bisect_left(totals, max_bytes - held + totals[begin], begin + 1) - 1
            if j >= n or by_count <= j:
                end = by_count  # the count limit comes first (or the bytes never come)
            elif held + totals[j + 1] - totals[begin] > max_bytes and (j > begin or count):
                end = j  # row ``j`` would pass the limit: the batch closes before it
            else:
                end = j + 1  # reached exactly, or a row alone at or above the limit
            if end > n:  # the chunk ends inside this batch: it stays in progress
                count += n - begin
                held += totals[n] - totals[begin]
                break
            ends.append(end)
            count = held = 0
            begin = end
        self.count, self.bytes = count, held
        return ends

    def split_each(self, sizes: Sequence[int]) -> list[int]:
        """``split`` one row at a time: the reference its property test compares it with."""
        ends: list[int] = []
        count, total = self.count, self.bytes
        max_messages, max_bytes = self.max_messages, self.max_bytes
        for position, size in enumerate(sizes):
            if count and total + size > max_bytes:
                ends.append(position)
                count = total = 0
            count += 1
            total += size
            if count >= max_messages or total >= max_bytes:
                ends.append(position + 1)
                count = total = 0
        self.count, self.bytes = count, total
        return ends


def cut_points(sizes: list[int], max_messages: int, max_bytes: int) -> list[int]:
    """Row indexes where a new batch starts (after 0), for rows of ``sizes`` bytes."""
    cutter = BatchCutter(max_messages, max_bytes)
    cuts = []
    for index, size in enumerate(sizes):
        if cutter.closes_before(size):
            cuts.append(index)
            cutter.reset()
        if cutter.add(size) and index + 1 < len(sizes):
            cuts.append(index + 1)
            cutter.reset()
    return cuts
