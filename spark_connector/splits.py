"""``minPartitions``: a partition's range split into several Spark partitions when the ranges
are fewer than asked (the Kafka connector's option). Pure code.

``partitions(start, end)`` must stay a pure function of the two offsets (Spark calls it first
on a restart, and the sink's producer names come from the Spark partition ids), so the split
is computed from the positions alone: entry ids are dense within a ledger, and every ledger's
entries start at 0. A range within one ledger is split at entry boundaries; a range spanning
ledgers is split in its end ledger only (the sizes of the ledgers before are not in the
offsets): its first piece also holds everything before. Like Kafka, each range gets a number
of pieces proportional to its size (rounded), at least one; a piece is at least one entry.
"""

from __future__ import annotations

import itertools
import math

from spark_connector.positions import Position

__all__ = ["Range", "split_ranges"]

Range = tuple[str, int, Position, Position]


def _pieces(topic: str, partition: int, start: Position, end: Position, parts: int) -> list[Range]:
    """``[start, end)`` (one ledger) in ``parts`` pieces of whole entries."""
    first = start.entry
    count = end.entry + (1 if end.batch > 0 else 0) - first
    parts = max(1, min(parts, count))
    inner = [Position(start.ledger, first + count * i // parts, 0) for i in range(1, parts)]
    cuts = [start, *inner, end]
    return [(topic, partition, a, b) for a, b in itertools.pairwise(cuts) if a < b]


def split_ranges(ranges: list[Range], min_partitions: int | None) -> list[Range]:
    """``ranges`` with each split so that there are about ``min_partitions`` in all (never
    fewer than given); order kept (by topic, partition, position)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    # The part of each range in its end ledger: the only part whose size the ids tell.
    tails = [
        start if start.ledger == end.ledger else Position(end.ledger, 0, 0)
        for _, _, start, end in ranges
    ]
    sizes = [
        end.entry + (1 if end.batch > 0 else 0) - tail.entry
        for (*_, end), tail in zip(ranges, tails, strict=True)
    ]
    total = sum(sizes) or 1
    out: list[Range] = []
    for (topic, partition, start, end), tail, size in zip(ranges, tails, sizes, strict=True):
        parts = math.floor(min_partitions * size / total + 0.5)  # rounded, as Kafka
        pieces = _pieces(topic, partition, tail, end, parts)
        # The earlier ledgers (sizes unknown) go with the first piece.
        first = pieces[0] if pieces else (topic, partition, tail, end)
        out.append((topic, partition, start, first[3]))
        out.extend(pieces[1:])
    return out
