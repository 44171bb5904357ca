"""Where a read starts: positions for SEEK, readers and seek-by-time, from a topic's ledger.

Pure functions of the ledger (a ``Ledger``, or the ``MemoryLog`` of a non-persistent topic), so
the connection's consumer endpoint and the admin API's reset-cursor share one answer.
"""

from __future__ import annotations

from broker.blocking import run_blocking
from broker.storage import Ledger, Position
from protocol.errors import RemoteProtocolError
from protocol.ids import I64_MAX, MessageId
from protocol.metadata import parse_entry_metadata


def last_confirmed_position(ledger: Ledger) -> Position:
    """The last durable entry, or "before the first" for a ledger that has none."""
    last = ledger.last_confirmed_position
    return last if last is not None else ledger.before_first_position()


def first_read_position(ledger: Ledger) -> Position:
    """The first entry a read from the earliest message starts at."""
    return ledger.next_position(ledger.before_first_position())


def seek_target(ledger: Ledger, target: MessageId) -> Position:
    """Next read position for SEEK by message id (inclusive)."""
    if target.ledger_id < 0 or target.entry_id < 0:
        return first_read_position(ledger)
    if target.ledger_id >= I64_MAX or target.entry_id >= I64_MAX:
        return ledger.next_position(last_confirmed_position(ledger))
    return Position(target.ledger_id, target.entry_id)


def reader_start(ledger: Ledger, start: MessageId) -> Position:
    """First read position of a reader starting at ``start``: inclusive (the client filters
    the start message itself when it asked for exclusive). Latest = after the last entry,
    so the mark-delete is the last entry, as hasMessageAvailable needs."""
    return seek_target(ledger, start)


async def find_position_by_publish_time(ledger: Ledger, timestamp_ms: int) -> Position:
    """First entry whose publish time is at or after ``timestamp_ms`` (or the end).

    As Java: binary search for the newest entry published before T, then the next one. The
    search reads entries all over the log, so it runs in a disk thread.
    """
    newest_before = await run_blocking(
        ledger.find_newest_matching, lambda entry: _published_before(entry, timestamp_ms)
    )
    if newest_before is None:
        return first_read_position(ledger)
    return ledger.next_position(newest_before)


def _published_before(entry: bytes, timestamp_ms: int) -> bool:
    """Seek-by-time predicate. An unreadable entry counts as not published before the target:
    the binary search may then stop early and redeliver a few earlier messages, never skip a
    later one; the entry itself is skipped on delivery."""
    try:
        return parse_entry_metadata(entry).publish_time < timestamp_ms
    except RemoteProtocolError:
        return False
