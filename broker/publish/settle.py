"""The group commit's loops over its publications: the entries for the ledger and the positions
it gave them (``Publisher._flush_loop``), then settling the durable group (``_complete``).

Settling: for every publication of a group, in append order, its publish latency is tallied
against the histogram's bounds and it is marked done (a connection's SEND) or its future
resolved (``Topic.publish``). The group's new idempotency keys (issue #16) became durable just
before, in one call of the window (``KeyGate.persist_group``).

Each ``py_*`` function is the reference of the compiled one of the same name without the prefix
(``protocol/_send_path.pxi``), used when the extension is in use: the same stores, calls and
results (tests/broker/publish/test_settle.py holds them side by side). One call per group
instead of a Python loop per publication: ~0.3 us a message off the event loop (issue #26).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol._accel import speedups

if TYPE_CHECKING:
    from broker.publish.dedup import MessageDeduplication
    from broker.publish.publication import Publication
    from broker.storage import Position

__all__ = [
    "group_entries",
    "move_dedup_marks",
    "place_group",
    "py_group_entries",
    "py_move_dedup_marks",
    "py_place_group",
    "py_settle_durable",
    "settle_durable",
]


def py_settle_durable(
    group: list[Publication], durable_at: float, bounds: tuple[float, ...]
) -> tuple[list[int], float]:
    """Settle every publication of ``group`` (each has its position) as durable.

    Returns the latencies in milliseconds since each was staged, as ``Buckets.observe`` would
    count them against ``bounds`` (one count per bucket, the last above every bound) and their
    sum. The group's idempotency keys were made durable just before (the window's
    ``persist_group``)."""
    counts = [0] * (len(bounds) + 1)
    total = 0.0
    for write in group:
        position = write.position
        assert position is not None
        latency = (durable_at - write.staged_at) * 1000.0
        counts[bisect_left(bounds, latency)] += 1
        total += latency
        if write.future is None:  # a connection's SEND: `resolve` without the future
            write.done = True
        else:
            write.resolve(position)
    return counts, total


def py_group_entries(group: list[Publication]) -> tuple[list[bytes], list[int]]:
    """The entries of ``group`` and their CRC-32Cs (-1: unknown), in order: what the ledger
    appends (``Ledger.append_many``)."""
    return [write.entry for write in group], [write.entry_crc for write in group]


def py_place_group(group: list[Publication], positions: list[Position]) -> None:
    """Give each publication of ``group`` its position (the ledger's, in append order)."""
    for write, position in zip(group, positions, strict=True):
        write.position = position


def py_move_dedup_marks(dedup: MessageDeduplication[Position], group: list[Publication]) -> None:
    """PIP-6's persisted marks for a durable ``group``, in append order.

    The marks move once per run of one producer's whole entries (a group is mostly such runs)
    with the run's largest id and last position: the same marks as a call per entry, since
    they keep the maximum (``MessageDeduplication.on_persisted``'s ``count``)."""
    run_name = ""
    run_highest = run_count = 0
    run_end: Position | None = None  # read only while run_count > 0
    for write in group:
        name = write.producer.name
        highest = write.highest_sequence_id
        position = write.position
        assert position is not None
        if write.chunk_id < 0 and run_count and name == run_name:
            if highest > run_highest:
                run_highest = highest
            run_count += 1
            run_end = position
            continue
        if run_count:
            assert run_end is not None
            dedup.on_persisted(run_name, run_highest, run_end, run_count)
            run_count = 0
        if write.chunk_id >= 0:  # a chunk that is not its message's last: its own progress
            dedup.on_chunk_persisted(name, highest, write.chunk_id, position)
        else:
            run_name, run_highest, run_count, run_end = name, highest, 1, position
    if run_count:
        assert run_end is not None
        dedup.on_persisted(run_name, run_highest, run_end, run_count)


SettleDurable = Callable[[list["Publication"], float, tuple[float, ...]], tuple[list[int], float]]


_compiled: Any = speedups()
if TYPE_CHECKING:
    settle_durable: SettleDurable = py_settle_durable
    group_entries = py_group_entries
    place_group = py_place_group
    move_dedup_marks = py_move_dedup_marks
elif _compiled is not None:
    settle_durable = _compiled.settle_durable
    group_entries = _compiled.group_entries
    place_group = _compiled.place_group
    move_dedup_marks = _compiled.move_dedup_marks
else:
    settle_durable = py_settle_durable
    group_entries = py_group_entries
    place_group = py_place_group
    move_dedup_marks = py_move_dedup_marks
