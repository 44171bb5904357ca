"""Which sealed segments may be trimmed: consumption by durable cursors, then retention.

Pulsar's rule (``ManagedLedgerImpl.internalTrimLedgers``): only ledgers that every durable
cursor has consumed are candidates, oldest first, and never the ledger being written. A
candidate is deleted when its age since it was closed exceeds the retention time *or* while the
topic's total size exceeds the retention size; -1 disables a limit, 0 keeps nothing beyond
consumption. The first candidate that is kept stops the scan: only a prefix is ever deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.storage.position import Position
from broker.storage.segment import Segment


def trimmable_prefix(
    segments: Sequence[Segment],
    slowest_mark: Position | None,
    retention_time_minutes: int,
    retention_size_mb: int,
    now_ms: int,
) -> list[Segment]:
    """The oldest segments that may be deleted now.

    Args:
        segments: all stored segments in order (the active one, unsealed, stops the scan).
        slowest_mark: the lowest *persisted* mark-delete of the durable cursors (None: there
            are none, so everything counts as consumed).
        retention_time_minutes / retention_size_mb: the retention policy.
        now_ms: wall-clock time in milliseconds.
    """
    retention_ms = retention_time_minutes * 60_000
    retention_bytes = retention_size_mb * 1024 * 1024
    total = sum(s.data_bytes for s in segments)
    doomed: list[Segment] = []
    for segment in segments:
        if segment.sealed_at_ms is None:
            break
        last_entry = Position(segment.ledger_id, segment.entries - 1)
        if slowest_mark is not None and slowest_mark < last_entry:
            break
        expired = retention_ms >= 0 and now_ms - segment.sealed_at_ms >= retention_ms
        over_quota = retention_bytes >= 0 and total > retention_bytes
        if not (expired or over_quota):
            break
        doomed.append(segment)
        total -= segment.data_bytes
    return doomed
